// Package epochs is a process's copy of its group invalidations: the epoch
// of the prefix's last Clear, and of each tag's last invalidation, hard
// (InvalidateTags) and soft (ExpireTags), as Redis holds them (records,
// all in one Cluster slot: internal/wire's RecordNames). An entry is
// invalidated when it was born (its load began, on the records' node's
// clock) at or before such an epoch.
//
// A record read from Redis is trusted for Config.Bound after its read was
// sent (100 ms: the coherence bound). Past that an entry that needs it is
// Unknown, and its caller reads the records again (Refresh) before it
// decides. Records in use are read again in the background before they go
// stale (ahead), so that a steady stream of hits never waits for a read.
// The Clear's record also holds the epoch of the prefix's last tag
// invalidation, hard or soft: an entry born after it needs no tag's
// record, so that a hit on an entry whose tags nobody checked lately reads
// nothing more than the Clear's record, which every check keeps fresh.
// Epochs only grow: a record read is merged with the one kept, never
// lowering an epoch, so that a read sent before an invalidation made here
// cannot undo it when its reply comes later.
// An invalidation made in this process is applied here at once (Apply);
// one queued while Redis cannot take it holds its tags (or every entry,
// for Clear) invalidated until it lands (Config.Held).
//
// The package knows epochs, records and clocks; how records are read from
// Redis, and what a Cache does with a verdict, are its Config's and its
// caller's.
package epochs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Verdict is what the epochs say of an entry.
type Verdict int

const (
	Valid   Verdict = iota // born after every epoch that concerns it
	Soft                   // born at or before a soft epoch of one of its tags: stale
	Hard                   // born at or before the Clear's epoch or a hard epoch of one of its tags
	Unknown                // a record it needs is missing or older than the bound: Refresh, then check again
)

// Config is what a Mirror needs.
type Config struct {
	// Bound is how long a record read from Redis is trusted, counted from
	// when its read was sent.
	Bound time.Duration
	// Read reads the Clear's record and those of tags, in one round trip
	// on the records' node, and returns their values ("" for none) and
	// the node's clock (server ms) when it ran them.
	Read func(ctx context.Context, tags []string) (clear string, vals []string, now int64, err error)
	// Now is the local monotonic clock, in ns.
	Now func() int64
	// Max bounds the tags whose records are kept; past it, the records
	// not used since the last background read are dropped. 0: MaxRecords.
	Max int
	// Background runs f as one of the Cache's own goroutines; false when
	// it is closing.
	Background func(f func()) bool
	// Held reports whether an invalidation of tag ("" for a Clear) is
	// queued for Redis: the entries it concerns are invalidated until it
	// lands. It is asked only while Queued reports true. Both may be nil.
	Held   func(tag string) bool
	Queued func() bool
	// Advanced, when set, is called before the Mirror keeps a read's Clear
	// or last tag epoch above its own (another process's invalidation):
	// calls that start afterwards must not join a flight begun before.
	Advanced func()
	// Cleared, when set, is told of a Clear's epoch read above the last one
	// known swept (Swept), once per SweepLease at most, and not while the
	// sweep it started runs (until ended): it may be unfinished (sweep.go).
	Cleared func(epoch int64, ended func())
	// Cluster says the records may be on another node than an entry: a
	// load's grant is then on another clock (BornAt).
	Cluster bool
}

// record is one epoch record, as read at time at (Config.Now, before the
// read was sent). The Clear's holds its epoch as hard, and the prefix's
// last tag invalidation as soft.
//
// A record is lost when Redis no longer holds it (evicted, deleted by
// hand): an entry's tags' records, and the Clear's, are made before the
// entry is stored (tagged.lua), so a lost one may have held an epoch that
// concerns the entry. An entry with a lost tag is Hard (loaded again,
// which makes the record anew); a lost Clear's record gives no shortcut.
type record struct {
	hard, soft int64 // server µs; 0 for none
	at         int64
	lost       bool
	used       atomic.Bool // checked since the last background read
}

// Mirror is the process's copy of the records (see the package doc).
type Mirror struct {
	cfg   Config
	bound int64 // cfg.Bound in ns

	clear atomic.Pointer[record]
	tags  sync.Map // tag → *record
	n     atomic.Int64

	ahead atomic.Bool // a background read under way

	clock    atomic.Pointer[sync_] // the latest read's server time, for Born
	swept    atomic.Int64          // the last Clear known swept (Swept)
	told     atomic.Int64          // Config.Now when Cleared was last called
	sweeping atomic.Bool           // the sweep Cleared started has not ended
}

// sync_ is a server time read, and the local time its reply arrived.
type sync_ struct{ server, local int64 }

// MaxRecords is Config.Max's default.
const MaxRecords = 100_000

// New returns an empty Mirror: every entry is Unknown until a Refresh.
func New(cfg Config) *Mirror {
	if cfg.Max == 0 {
		cfg.Max = MaxRecords
	}
	return &Mirror{cfg: cfg, bound: int64(cfg.Bound)}
}

// Check returns the verdict on an entry born at born (server ms) with the
// tags tags (internal/wire's encoding, "" for none).
func (m *Mirror) Check(born int64, tags string) Verdict { return m.CheckAt(born, tags, now0, nil) }

// now0 asks CheckAt to read Config.Now itself.
const now0 = -1 << 63

// CheckAt is Check at now (Config.Now, or now0), for a caller that read it
// already. checked, when not nil, is the entry's own memory of the last
// tag invalidation's epoch under which its tags were found valid: a check
// under the same epoch returns Valid without looking them up, and one that
// finds them valid keeps the epoch there (a near copy's).
func (m *Mirror) CheckAt(born int64, tags string, now int64, checked *atomic.Int64) Verdict {
	if now == now0 {
		now = m.cfg.Now()
	}
	queued := m.queued()
	if queued && m.cfg.Held("") {
		return Hard
	}
	cr := m.clear.Load()
	if cr == nil || now-cr.at > m.bound {
		return Unknown
	}
	if cr.hard > 0 && born <= cr.hard { // born 0: an older release's entry, before any Clear
		return Hard
	}
	mark(&cr.used)
	if now-cr.at > m.bound/2 {
		m.readAhead()
	}
	if born > cr.soft && !cr.lost && !queued { // no tag invalidated since it was born
		return Valid
	}
	if checked != nil && !cr.lost && !queued && checked.Load() == cr.soft && cr.soft != 0 {
		return Valid // no tag invalidated since its tags were found valid
	}
	v := Valid
	for tags != "" {
		var tag string
		tag, tags = next(tags)
		if queued && m.cfg.Held(tag) {
			return Hard
		}
		r, _ := m.tags.Load(tag)
		tr, _ := r.(*record)
		if tr == nil || now-tr.at > m.bound {
			return Unknown
		}
		mark(&tr.used)
		switch {
		case tr.lost || tr.hard > 0 && born <= tr.hard:
			return Hard
		case tr.soft > 0 && born <= tr.soft:
			v = Soft
		}
	}
	if v == Valid && checked != nil && !cr.lost && !queued {
		checked.Store(cr.soft)
	}
	return v
}

// mark sets a record's mark of use, writing only when it is not set: a
// hit on every core must not fight over the cache line.
func mark(used *atomic.Bool) {
	if !used.Load() {
		used.Store(true)
	}
}

// Needs returns the tags of an encoded list whose records are missing or
// stale, for Refresh.
func (m *Mirror) Needs(tags string) []string {
	now := m.cfg.Now()
	var out []string
	for tags != "" {
		var tag string
		tag, tags = next(tags)
		r, _ := m.tags.Load(tag)
		if tr, _ := r.(*record); tr == nil || now-tr.at > m.bound {
			out = append(out, tag)
		}
	}
	return out
}

// Refresh reads the Clear's record and those of tags, and those of every
// tag checked since the last background read, and keeps them.
func (m *Mirror) Refresh(ctx context.Context, tags []string) error {
	tags = m.inUse(tags, false)
	at := m.cfg.Now()
	clear, vals, now, err := m.cfg.Read(ctx, tags)
	m.Refreshed(tags, at, clear, vals, now, err)
	return err
}

// inUse returns tags and those of the records checked since the last
// background read, clearing their marks of use when clear is set.
func (m *Mirror) inUse(tags []string, clear bool) []string {
	m.tags.Range(func(k, v any) bool {
		r := v.(*record)
		if clear && r.used.Swap(false) || !clear && r.used.Load() {
			tags = append(tags, k.(string))
		}
		return true
	})
	return tags
}

// Due returns the tags whose records a read sent with a peek should get,
// when the Clear's record is due for a read (never read, or past half the
// bound) and no background read is under way: the caller sends the read
// (Records.ReadOp) at once, and gives its result to done. ok is false when
// none is due.
func (m *Mirror) Due() (tags []string, done func(clear string, vals []string, now int64, err error), ok bool) {
	if cr := m.clear.Load(); cr != nil && m.cfg.Now()-cr.at <= m.bound/2 || !m.ahead.CompareAndSwap(false, true) {
		return nil, nil, false
	}
	return m.due()
}

// due is Due once a read is due: apart, so that what its closure holds is
// allocated only then, not on every hit.
func (m *Mirror) due() (tags []string, done func(clear string, vals []string, now int64, err error), ok bool) {
	at := m.cfg.Now()
	tags = m.inUse(nil, true)
	return tags, func(clear string, vals []string, now int64, err error) {
		m.Refreshed(tags, at, clear, vals, now, err)
		m.ahead.Store(false)
	}, true
}

// Refreshed keeps the records of the Clear and of tags a read sent at at
// returned (or nothing, on err).
func (m *Mirror) Refreshed(tags []string, at int64, clear string, vals []string, now int64, err error) {
	if err == nil {
		m.synced(now)
		h, s := ParseRecord(clear)
		if old := m.clear.Load(); old != nil && (h > old.hard || s > old.soft) && m.cfg.Advanced != nil {
			m.cfg.Advanced()
		}
		m.keepClear(h, s, at, clear == "")
		m.unswept(h)
		for i, tag := range tags {
			h, s := ParseRecord(vals[i])
			m.keep(tag, h, s, at, vals[i] == "")
		}
	}
}

// unswept tells Config.Cleared of a Clear's epoch above the last one
// known swept, once per SweepLease at most.
func (m *Mirror) unswept(epoch int64) {
	if m.cfg.Cleared == nil || epoch <= m.swept.Load() || m.sweeping.Load() {
		return
	}
	now, told := m.cfg.Now(), m.told.Load()
	if (told == 0 || now-told >= int64(SweepLease)) && m.told.CompareAndSwap(told, now) && m.sweeping.CompareAndSwap(false, true) {
		m.cfg.Cleared(epoch, func() { m.sweeping.Store(false) })
	}
}

// Swept records that the Clear of epoch was swept to the end.
func (m *Mirror) Swept(epoch int64) {
	for old := m.swept.Load(); epoch > old && !m.swept.CompareAndSwap(old, epoch); old = m.swept.Load() {
	}
}

// keepClear merges the Clear's record (its epoch, and the last tag
// invalidation's; lost when Redis had none) read at at into the one kept
// (merged).
func (m *Mirror) keepClear(hard, soft, at int64, lost bool) {
	for {
		old := m.clear.Load()
		if m.clear.CompareAndSwap(old, merged(old, hard, soft, at, lost)) {
			return
		}
	}
}

// merged is a record of hard and soft read at at (lost: Redis had none)
// merged with old: neither epoch lower than old's, lost as the later of
// the two reads says, read at the later.
func merged(old *record, hard, soft, at int64, lost bool) *record {
	r := &record{hard: hard, soft: soft, at: at, lost: lost}
	if old != nil {
		r.hard, r.soft, r.at = max(hard, old.hard), max(soft, old.soft), max(at, old.at)
		if old.at > at {
			r.lost = old.lost
		}
		r.used.Store(old.used.Load()) // still in use
	}
	return r
}

// keep merges tag's record read at at (lost: Redis had none) into the one
// kept (merged), dropping the unused ones when there are more than Max.
func (m *Mirror) keep(tag string, hard, soft, at int64, lost bool) {
	var had bool
	for {
		v, ok := m.tags.Load(tag)
		old, _ := v.(*record)
		r := merged(old, hard, soft, at, lost)
		if !ok {
			if _, had = m.tags.LoadOrStore(tag, r); !had {
				break
			}
			continue
		}
		if had = true; m.tags.CompareAndSwap(tag, old, r) {
			break
		}
	}
	if !had && m.n.Add(1) > int64(m.cfg.Max) {
		m.tags.Range(func(k, v any) bool {
			if !v.(*record).used.Load() && k.(string) != tag {
				m.tags.Delete(k)
				m.n.Add(-1)
			}
			return true
		})
	}
}

// readAhead reads the records in use again in the background, one read at
// a time (Due), so that they do not go stale under a steady stream of
// hits. The marks of use are cleared first: a record unused until the next
// read is not read again.
func (m *Mirror) readAhead() {
	if m.cfg.Background == nil || m.ahead.Load() || !m.ahead.CompareAndSwap(false, true) {
		return // a read under way: hits on every core must not fight over its flag
	}
	tags := m.inUse(nil, true)
	if !m.cfg.Background(func() {
		defer m.ahead.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Bound)
		defer cancel()
		at := m.cfg.Now()
		clear, vals, now, err := m.cfg.Read(ctx, tags)
		m.Refreshed(tags, at, clear, vals, now, err) // a failed read leaves the records to go stale: callers read them
	}) {
		m.ahead.Store(false)
	}
}

// Apply keeps what an invalidation made in this process wrote (mk), sent
// at at (Config.Now): the Clear's record and those of tags. The tags' are
// kept first: a check that sees the new last tag invalidation finds them.
func (m *Mirror) Apply(tags []string, mk Mark, at int64) {
	m.synced(mk.Now)
	for i, tag := range tags {
		m.keep(tag, mk.Hard[i], mk.Soft[i], at, false)
	}
	m.keepClear(mk.Clear, mk.LastTag, at, false)
}

// queued reports whether invalidations are queued for Redis (Config.Queued).
func (m *Mirror) queued() bool {
	return m.cfg.Queued != nil && m.cfg.Held != nil && m.cfg.Queued()
}

// Verdict is Check, with the records it needs read again first when they
// are missing or stale (bounded by ctx). An error is the read's.
func (m *Mirror) Verdict(ctx context.Context, born int64, tags string) (Verdict, error) {
	if v := m.Check(born, tags); v != Unknown {
		return v, nil
	}
	if err := m.Refresh(ctx, m.Needs(tags)); err != nil {
		return Unknown, err
	}
	return m.Judge(born, tags), nil
}
