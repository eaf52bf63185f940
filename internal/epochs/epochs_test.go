package epochs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a Config.Now the test moves.
type clock struct{ ns int64 }

func (c *clock) now() int64 { return c.ns }

// fakeRecords answers Read from a map, as Redis would hold the records.
type fakeRecords struct {
	clear string
	tags  map[string]string
	now   int64
	reads int
	fail  error
}

func (f *fakeRecords) read(_ context.Context, tags []string) (string, []string, int64, error) {
	f.reads++
	if f.fail != nil {
		return "", nil, 0, f.fail
	}
	vals := make([]string, len(tags))
	for i, t := range tags {
		vals[i] = f.tags[t]
	}
	return f.clear, vals, f.now, nil
}

func newMirror(c *clock, f *fakeRecords, held map[string]bool) *Mirror {
	return New(Config{Bound: 100 * time.Millisecond, Read: f.read, Now: c.now, Max: 10,
		Queued: func() bool { return len(held) > 0 }, Held: func(tag string) bool { return held[tag] }})
}

func TestEncode(t *testing.T) {
	got, err := Encode([]string{"a", "b", "a", "{c}"})
	if err != nil || got != "a\x00b\x00{c}" {
		t.Fatalf("Encode = %q, %v", got, err)
	}
	for _, bad := range [][]string{{""}, {"a\x00b"}} {
		if _, err := Encode(bad); !errors.Is(err, ErrTag) {
			t.Errorf("Encode(%q) = %v; want ErrTag", bad, err)
		}
	}
	if tags := Tags(got); len(tags) != 3 || tags[2] != "{c}" {
		t.Errorf("Tags = %q", tags)
	}
}

// The verdicts: an entry born at or before an epoch that concerns it is
// invalidated (hard) or stale (soft); records older than the bound are
// Unknown until read again; an older release's entry (born 0) yields to a
// Clear only.
func TestVerdicts(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "100,300", tags: map[string]string{"h": "200,0", "s": "0,300", "none": "0,0"}, now: 1000}
	m := newMirror(c, f, nil)
	if v := m.Check(500, ""); v != Unknown {
		t.Fatalf("before any read: %v; want Unknown", v)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		born int64
		tags string
		want Verdict
	}{
		{500, "", Valid}, {100, "", Hard}, {99, "", Hard}, {0, "", Hard},
		{150, "h", Hard}, {250, "h", Valid}, {250, "s", Soft}, {350, "s", Valid},
		{250, "s\x00h", Soft}, {150, "s\x00h", Hard}, {150, "none", Valid},
	} {
		v, err := m.Verdict(ctx, tc.born, tc.tags)
		if err != nil || v != tc.want {
			t.Errorf("Verdict(%d, %q) = %v, %v; want %v", tc.born, tc.tags, v, err, tc.want)
		}
	}
	reads := f.reads
	if v := m.Check(500, "h"); v != Valid || f.reads != reads {
		t.Fatalf("a fresh record: %v after %d reads; want Valid without a read", v, f.reads-reads)
	}
	c.ns += int64(101 * time.Millisecond)
	if v := m.Check(500, "h"); v != Unknown {
		t.Fatalf("records past the bound: %v; want Unknown", v)
	}
	if v := m.Judge(150, "h"); v != Hard {
		t.Fatalf("Judge on stale records: %v; want Hard (what it knows)", v)
	}
	f.fail = errors.New("down")
	if _, err := m.Verdict(ctx, 500, "h"); err == nil {
		t.Fatal("Verdict with the read failing: no error")
	}
}

// An invalidation queued for Redis holds what it concerns invalidated.
func TestHeld(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "0,0", tags: map[string]string{"t": "0,0", "u": "0,0"}, now: 1000}
	held := map[string]bool{"t": true}
	m := newMirror(c, f, held)
	if err := m.Refresh(context.Background(), []string{"t", "u"}); err != nil {
		t.Fatal(err)
	}
	if v := m.Check(5000, "t"); v != Hard { // born after the last tag invalidation, but held here
		t.Fatalf("a held tag: %v; want Hard", v)
	}
	if v := m.Check(5000, "u"); v != Valid {
		t.Fatalf("another tag: %v; want Valid", v)
	}
	held[""] = true
	if v := m.Check(5000, ""); v != Hard {
		t.Fatalf("a held Clear: %v; want Hard", v)
	}
}

// Born estimates the records' clock from below, from the last read, for a
// second; Apply's reply counts as a read.
func TestBorn(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{now: 1_000_000}
	m := newMirror(c, f, nil)
	if _, ok := m.Born(); ok {
		t.Fatal("Born before any read")
	}
	m.Apply([]string{"t"}, Mark{Now: 1_000_000, LastTag: 1_000_000, Hard: []int64{1_000_000}, Soft: []int64{0}}, c.ns)
	c.ns += int64(3 * time.Millisecond)
	if ms, ok := m.Born(); !ok || ms != 1_003_000 {
		t.Fatalf("Born = %d, %v; want 1003000 (µs)", ms, ok)
	}
	c.ns += int64(time.Second)
	if _, ok := m.Born(); ok {
		t.Fatal("Born from a read more than a second old")
	}
	if got := m.BornAt(context.Background(), 42); got != 42 {
		t.Fatalf("BornAt off a Cluster = %d; want the grant", got)
	}
}

// An entry born after the last tag invalidation (the Clear's record)
// needs no tag's record: a hit on a tag nobody checked lately reads
// nothing; one born before it reads its tags' records.
func TestLastTagInvalidation(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "0,300", tags: map[string]string{"old": "300,0"}, now: 1000}
	m := newMirror(c, f, nil)
	if err := m.Refresh(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if v := m.Check(301, "never-read"); v != Valid {
		t.Fatalf("born after the last tag invalidation: %v; want Valid without its tag's record", v)
	}
	if v := m.Check(300, "never-read"); v != Unknown {
		t.Fatalf("born at the last tag invalidation: %v; want Unknown (its tag's record is needed)", v)
	}
	if v, err := m.Verdict(context.Background(), 300, "old"); err != nil || v != Hard {
		t.Fatalf("Verdict(300, old) = %v, %v; want Hard", v, err)
	}
	// An invalidation made here raises the last epoch at once.
	m.Apply([]string{"new"}, Mark{Now: 500, LastTag: 500, Hard: []int64{500}, Soft: []int64{0}}, c.ns)
	if v := m.Check(400, "new"); v != Hard {
		t.Fatalf("after Apply: %v; want Hard", v)
	}
	if v := m.Check(400, "other"); v != Unknown {
		t.Fatalf("another tag after Apply: %v; want Unknown", v)
	}
}

// A read sent before an invalidation made here, whose reply comes after
// it, cannot lower an epoch: records only grow.
func TestRecordsOnlyGrow(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "0,0", tags: map[string]string{"t": "0,0"}, now: 1000}
	m := newMirror(c, f, nil)
	sent := c.ns
	m.Apply([]string{"t"}, Mark{Now: 900, Clear: 800, LastTag: 900, Hard: []int64{900}, Soft: []int64{0}}, c.ns)
	m.Refreshed([]string{"t"}, sent, "0,0", []string{"0,0"}, 1000, nil) // the late reply
	if v := m.Check(850, "t"); v != Hard {
		t.Fatalf("after a late reply: %v; want Hard", v)
	}
	if v := m.Check(700, ""); v != Hard {
		t.Fatalf("the Clear after a late reply: %v; want Hard", v)
	}
}

// A record Redis no longer holds (evicted, deleted by hand) was lost: a
// tag's makes its entries Hard (reloaded, which makes it anew); a lost
// Clear's record gives no shortcut past the tags' records.
func TestLostRecords(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "", tags: map[string]string{"kept": "0,0"}, now: 1000}
	m := newMirror(c, f, nil)
	ctx := context.Background()
	if v, err := m.Verdict(ctx, 500, "kept"); err != nil || v != Valid {
		t.Fatalf("a kept tag: %v, %v; want Valid", v, err)
	}
	if v, err := m.Verdict(ctx, 500, "gone"); err != nil || v != Hard {
		t.Fatalf("a lost tag: %v, %v; want Hard", v, err)
	}
	if v := m.Judge(500, "gone"); v != Hard {
		t.Fatalf("Judge of a lost tag: %v; want Hard", v)
	}
	if v := m.Check(500, "unread"); v != Unknown {
		t.Fatalf("with the Clear's record lost: %v; want Unknown (the tag's record is needed)", v)
	}
	f.clear, f.tags["gone"] = "0,0", "0,0" // made again
	c.ns += int64(101 * time.Millisecond)
	if v, err := m.Verdict(ctx, 500, "gone"); err != nil || v != Valid {
		t.Fatalf("a tag made again: %v, %v; want Valid", v, err)
	}
	if v := m.Check(500, "unread"); v != Valid {
		t.Fatalf("with the Clear's record made again: %v; want Valid (no tag invalidated)", v)
	}
	// A reply to a read sent before the last one cannot say lost again.
	m.Refreshed([]string{"gone"}, c.ns-int64(50*time.Millisecond), "", []string{""}, 1000, nil)
	if v := m.Check(500, "gone"); v != Valid {
		t.Fatalf("after an older read's late reply: %v; want Valid", v)
	}
}

// A copy whose tags were found valid under the last tag invalidation's
// epoch stays valid without a lookup of its tags while that epoch holds;
// a new invalidation makes it look them up again.
func TestCheckedStamp(t *testing.T) {
	c := &clock{ns: int64(time.Hour)}
	f := &fakeRecords{clear: "0,300", tags: map[string]string{"t": "100,0"}, now: 1000}
	m := newMirror(c, f, nil)
	if err := m.Refresh(context.Background(), []string{"t"}); err != nil {
		t.Fatal(err)
	}
	var checked atomic.Int64
	if v := m.CheckAt(200, "t", c.ns, &checked); v != Valid || checked.Load() != 300 {
		t.Fatalf("first check: %v, stamp %d; want Valid, 300", v, checked.Load())
	}
	m.tags.Delete("t") // a lookup would now say Unknown
	if v := m.CheckAt(200, "t", c.ns, &checked); v != Valid {
		t.Fatalf("under the same epoch: %v; want Valid without a lookup", v)
	}
	m.Apply([]string{"t"}, Mark{Now: 400, LastTag: 400, Hard: []int64{400}, Soft: []int64{0}}, c.ns)
	if v := m.CheckAt(200, "t", c.ns, &checked); v != Hard {
		t.Fatalf("after an invalidation of its tag: %v; want Hard", v)
	}
}

func TestParseRecord(t *testing.T) {
	for in, want := range map[string][2]int64{"": {0, 0}, "5": {5, 0}, "5,7": {5, 7}, "0,7": {0, 7}, "x,y": {0, 0}} {
		if h, s := ParseRecord(in); h != want[0] || s != want[1] {
			t.Errorf("ParseRecord(%q) = %d, %d; want %v", in, h, s, want)
		}
	}
}

// A folded read is refused for good only by a server that takes no script
// over several slots, or none: other error replies are the commands' own.
func TestRefusesFold(t *testing.T) {
	for msg, want := range map[string]bool{
		"CROSSSLOT Keys in request don't hash to the same slot":             true,
		"ERR Script attempted to access a non local key in a cluster node":  true,
		"MOVED 3999 127.0.0.1:6381":                                         true,
		"ERR unknown command 'EVALSHA'":                                     true,
		"WRONGTYPE Operation against a key holding the wrong kind of value": false,
		"NOPERM User app has no permissions to run the 'evalsha' command":   false,
		"LOADING Redis is loading the dataset in memory":                    false,
		"BUSY Redis is busy running a script":                               false,
		"WRONGPASS invalid username-password pair or user is disabled.":     false,
		"OOM command not allowed when used memory > 'maxmemory'":            false,
	} {
		if got := refusesFold(errors.New(msg)); got != want {
			t.Errorf("refusesFold(%q) = %v; want %v", msg, got, want)
		}
	}
}

// A fold is given up on a refusal, or after foldTries failures in a row.
func TestFoldGivenUp(t *testing.T) {
	var f Fold
	for i := 1; i < foldTries; i++ {
		if f.failed(false); f.refused.Load() {
			t.Fatalf("given up after %d failures; want %d", i, foldTries)
		}
	}
	if f.failed(false); !f.refused.Load() {
		t.Fatalf("not given up after %d failures in a row", foldTries)
	}
	var g Fold
	if g.failed(true); !g.refused.Load() {
		t.Fatal("not given up on a refusal")
	}
}
