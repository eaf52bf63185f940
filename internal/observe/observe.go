// Package observe owns the fan-out of a Cache's events to several
// Observers (the root's MultiObserver): who of them is told what, and in
// which order a Tracer's scopes wrap a context.
//
// It knows events only by their Class (Classify is its Config): the events
// themselves, the Observer interfaces and their docs stay in the root
// package, and so does when a Cache tells what. It may not touch a Cache,
// its Stats or Redis.
package observe

import "context"

// Observer, Tracer and Reader are the root's Observer, Tracer and
// StatsReader, over its Event (E) and Stats (S).
type Observer[E any] interface {
	Observe(ctx context.Context, e E)
}

type Tracer[E any] interface {
	Observer[E]
	Start(ctx context.Context, e E) context.Context
}

type Reader[S any] interface {
	ReadStats(prefix string, stats func() S)
}

// Class is what the fan-out needs to know of an event.
type Class uint8

const (
	Other      Class = iota
	Outcome          // the outcome of a call: not told to a Reader
	FetchStart       // a call's scope begins: Tracers only
	FetchEnd         // a call's scope ends: Tracers only
)

// Multi tells each of its Observers, in order, what each is to be told.
type Multi[E, S any] struct {
	obs      []Observer[E]
	classify func(E) Class
}

// New returns the fan-out to obs (nil ones left out), classify saying
// what each event is: nil when obs holds no Observer, the one when it
// holds one, a Tracer (*MultiTracer) when one of them is a Tracer.
func New[E, S any](classify func(E) Class, obs ...Observer[E]) Observer[E] {
	m := &Multi[E, S]{classify: classify}
	tracer := false
	for _, o := range obs {
		if o == nil {
			continue
		}
		_, t := o.(Tracer[E])
		tracer = tracer || t
		m.obs = append(m.obs, o)
	}
	switch {
	case len(m.obs) == 0:
		return nil
	case len(m.obs) == 1:
		return m.obs[0]
	case tracer:
		return &MultiTracer[E, S]{m}
	}
	return m
}

func (m *Multi[E, S]) Observe(ctx context.Context, e E) {
	c := m.classify(e)
	for _, o := range m.obs {
		if _, reads := o.(Reader[S]); !reads || c != Outcome {
			o.Observe(ctx, e)
		}
	}
}

// ReadStats passes the Cache's Stats on to those of m that read them.
func (m *Multi[E, S]) ReadStats(prefix string, stats func() S) {
	for _, o := range m.obs {
		if r, ok := o.(Reader[S]); ok {
			r.ReadStats(prefix, stats)
		}
	}
}

// wantsOutcomes reports whether one of m is to be told the outcomes of
// calls: one that does not read them from Stats.
func (m *Multi[E, S]) wantsOutcomes() bool {
	for _, o := range m.obs {
		if _, reads := o.(Reader[S]); !reads {
			return true
		}
	}
	return false
}

// MultiTracer is a Multi one of whose Observers is a Tracer.
type MultiTracer[E, S any] struct{ m *Multi[E, S] }

func (t *MultiTracer[E, S]) Observe(ctx context.Context, e E) {
	c := t.m.classify(e)
	for _, o := range t.m.obs {
		_, tracer := o.(Tracer[E])
		_, reads := o.(Reader[S])
		if (tracer || c != FetchEnd) && (!reads || c != Outcome) {
			o.Observe(ctx, e)
		}
	}
}

func (t *MultiTracer[E, S]) ReadStats(prefix string, stats func() S) { t.m.ReadStats(prefix, stats) }

// Start runs each Tracer's Start in turn, each wrapping the context the one
// before returned, and tells the other Observers through Observe (but of
// FetchStart).
func (t *MultiTracer[E, S]) Start(ctx context.Context, e E) context.Context {
	c := t.m.classify(e)
	for _, o := range t.m.obs {
		if tr, ok := o.(Tracer[E]); ok {
			ctx = tr.Start(ctx, e)
		} else if c != FetchStart {
			o.Observe(ctx, e)
		}
	}
	return ctx
}

// WantsOutcomes reports whether o, a Cache's Observer, is to be told the
// outcomes of calls: unless it reads them from Stats, or is a fan-out only
// to Observers that do.
func WantsOutcomes[E, S any](o Observer[E]) bool {
	switch m := o.(type) {
	case nil:
		return false
	case *Multi[E, S]:
		return m.wantsOutcomes()
	case *MultiTracer[E, S]:
		return m.m.wantsOutcomes()
	case Reader[S]:
		return false
	}
	return true
}
