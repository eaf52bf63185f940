package corral_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// sent records the commands a client sends (a hook), by name, with a
// script's keys: "evalsha <key> <key>...".
type sent struct {
	mu    sync.Mutex
	names []string
}

func (s *sent) record(cmd redis.Cmder) error {
	if isSetup(cmd) {
		return nil
	}
	a := cmd.Args()
	name := strings.ToLower(fmt.Sprint(a[0]))
	if name == "evalsha" || name == "eval" {
		for _, k := range scriptKeys(a) {
			name += " " + fmt.Sprint(k)
		}
	}
	s.mu.Lock()
	s.names = append(s.names, name)
	s.mu.Unlock()
	return nil
}

// take returns the commands recorded since the last take.
func (s *sent) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.names
	s.names = nil
	return got
}

// A Cache on one server reads the group invalidations' records and the
// entry in one command (peekread.lua) when the records are due: a first
// hit is one EVALSHA, with no HMGET, read.lua or TIME beside it, and the
// records it read are the ones it judges by (an entry of an invalidated
// tag is loaded again).
func TestPeek_RecordsFolded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	tagged := func(v string) func(context.Context) (corral.Entry, error) {
		return func(context.Context) (corral.Entry, error) {
			return corral.Entry{Value: []byte(v), TTL: time.Hour, Tags: []string{"t"}}, nil
		}
	}
	for _, k := range []string{"kept", "dropped"} {
		if _, err := e.c.FetchEntry(ctx, k, tagged("old")); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.FetchEntry(ctx, "kept", tagged("new")); err != nil { // stored again after the invalidation
		t.Fatal(err)
	}

	rdb := e.srv.Client()
	s := &sent{}
	f := &faults{}
	f.setBefore(s.record)
	rdb.AddHook(f)
	c := newCache(t, rdb, nil)
	if err := c.Ready(ctx); err != nil { // its start-up by a command of its own: the first peek carries none
		t.Fatal(err)
	}
	warm := newCache(t, e.srv.Client(), nil) // by which the server learns peekread.lua
	if err := warm.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Fetch(ctx, "warm", time.Hour, value("w")); err != nil {
		t.Fatal(err)
	}
	s.take()
	v, err := c.FetchEntry(ctx, "kept", tagged("unwanted"))
	if string(v) != "new" || err != nil {
		t.Fatalf("FetchEntry(kept) = %q, %v; want the stored value", v, err)
	}
	entry := wire.EntryName("corral", "kept")
	if got := s.take(); len(got) != 1 || !strings.HasSuffix(got[0], " "+entry) {
		t.Fatalf("a first hit sent %q; want one script on %s", got, entry)
	}
	v, err = c.FetchEntry(ctx, "dropped", tagged("reloaded"))
	if string(v) != "reloaded" || err != nil {
		t.Fatalf("FetchEntry(dropped) = %q, %v; want it loaded again (its tag was invalidated)", v, err)
	}
}

// refusal is an error reply of Redis's, as a refused command gets.
type refusal string

func (r refusal) Error() string { return string(r) }
func (refusal) RedisError()     {}

// A server that refuses the folded read (a proxy that shards keys, say)
// is sent the records' read and the peek apart, at once and from then on;
// a key of another type at an entry's name is no refusal.
func TestPeek_RecordsFoldRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.c.Fetch(ctx, "k", time.Hour, value("v")); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, wire.EntryName("corral", "foreign"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	entry, records := wire.EntryName("corral", "k"), wire.ClearName("corral")
	for _, refuse := range []bool{false, true} {
		rdb := e.srv.Client()
		s := &sent{}
		f := &faults{}
		f.setBefore(func(cmd redis.Cmder) error {
			_ = s.record(cmd)
			if a := cmd.Args(); refuse && len(a) > 4 && a[3] == records && a[4] == entry {
				return refusal("CROSSSLOT Keys in request don't hash to the same slot")
			}
			return nil
		})
		rdb.AddHook(f)
		c := newCache(t, rdb, nil)
		if _, err := c.Fetch(ctx, "foreign", time.Hour, value("mine")); err != nil {
			t.Fatalf("refused %v: Fetch(foreign): %v", refuse, err)
		}
		// Hits until the records are read folded with a peek; refused,
		// until two reads of the records after the refusal, none folded.
		refused, after := false, 0
		eventually(t, 10*time.Second, "the records read again", func() bool {
			s.take()
			v, err := c.Fetch(ctx, "k", time.Hour, value("unwanted"))
			if string(v) != "v" || err != nil {
				t.Fatalf("refused %v: Fetch(k) = %q, %v; want the stored value", refuse, v, err)
			}
			got := s.take()
			folded := slices.Contains(got, "evalsha "+records+" "+entry)
			read := slices.Contains(got, "evalsha "+records)
			switch {
			case !refuse:
				return folded
			case folded && refused:
				t.Fatalf("a hit after the refusal sent %q; want the records read apart", got)
			case folded && !read:
				t.Fatalf("the refused hit sent %q; want its read sent again apart", got)
			case folded:
				refused = true
			case read && refused:
				after++
			}
			return after == 2
		})
	}
}

// isPeek reports whether cmd is a peek of key (under the default prefix):
// an HMGET of its entry, or peekread.lua, folded with the records' read
// (peekstart.lua, the first, with the probe key after the entry).
func isPeek(cmd redis.Cmder, key string) bool {
	a, entry := cmd.Args(), wire.EntryName("corral", key)
	switch strings.ToLower(fmt.Sprint(a[0])) {
	case "hmget":
		return len(a) > 1 && a[1] == entry
	case "evalsha", "eval":
		keys := scriptKeys(a)
		if len(keys) > 2 && keys[len(keys)-1] == "corral:probe" {
			keys = keys[:len(keys)-1]
		}
		return len(keys) > 1 && keys[0] == wire.ClearName("corral") && keys[len(keys)-1] == entry
	}
	return false
}

// scriptKeys returns the KEYS of an EVAL or EVALSHA's arguments a.
func scriptKeys(a []any) []any {
	if len(a) < 3 {
		return nil
	}
	n, _ := a[2].(int)
	if n < 0 || len(a) < 3+n {
		return nil
	}
	return a[3 : 3+n]
}
