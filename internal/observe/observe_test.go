package observe

import (
	"context"
	"testing"
)

type event struct {
	class Class
	name  string
}

func classOf(e event) Class { return e.class }

type recorder struct{ got []string }

func (r *recorder) Observe(_ context.Context, e event) { r.got = append(r.got, e.name) }

type reader struct{ recorder }

func (*reader) ReadStats(string, func() int) {}

type key struct{}

type tracer struct {
	recorder
	name string
}

func (t *tracer) Start(ctx context.Context, e event) context.Context {
	t.got = append(t.got, "start "+e.name)
	return context.WithValue(ctx, key{}, t.name)
}

// A Reader is not told outcomes; only Tracers are told of a call's scope,
// and each Tracer's Start wraps the context the one before returned.
func TestMulti_WhoIsToldWhat(t *testing.T) {
	plain, reads, tr := &recorder{}, &reader{}, &tracer{name: "t"}
	m := New[event, int](classOf, plain, nil, reads, tr)
	mt, ok := m.(Tracer[event])
	if !ok {
		t.Fatal("a fan-out to a Tracer is not a Tracer")
	}
	ctx := mt.Start(context.Background(), event{FetchStart, "fetch"})
	if ctx.Value(key{}) != "t" {
		t.Fatal("Start did not return the Tracer's context")
	}
	mt.Start(ctx, event{Other, "load"})
	mt.Observe(ctx, event{Outcome, "hit"})
	mt.Observe(ctx, event{FetchEnd, "end"})
	if want := "[load hit]"; fmtList(plain.got) != want {
		t.Fatalf("a plain Observer was told %v; want %s", plain.got, want)
	}
	if want := "[load]"; fmtList(reads.got) != want {
		t.Fatalf("a Reader was told %v; want %s", reads.got, want)
	}
	if want := "[start fetch start load hit end]"; fmtList(tr.got) != want {
		t.Fatalf("the Tracer was told %v; want %s", tr.got, want)
	}
	if !WantsOutcomes[event, int](m) || WantsOutcomes[event, int](New[event, int](classOf, &reader{}, &reader{})) {
		t.Fatal("WantsOutcomes is wrong for a fan-out")
	}
	if New[event, int](classOf, nil) != nil || New[event, int](classOf, plain) != Observer[event](plain) {
		t.Fatal("none and one Observer are not returned as they are")
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
