package notify

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// reply is an error reply of Redis, as go-redis returns it (redis.Error).
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

var _ redis.Error = reply("")

// Detect takes the first command Redis accepts; a refusal of a command
// moves on, anything else is an error.
func TestDetect(t *testing.T) {
	noPerm := reply("NOPERM User app has no permissions to access the 'x' channel")
	for _, tc := range []struct {
		name    string
		noShard bool
		answers map[string]error // by command; absent: accepted
		want    Mode
		wantErr bool
	}{
		{name: "sharded", want: Mode{"SPUBLISH", wire.AnnounceSharded, ""}},
		{name: "sharded disabled", noShard: true, answers: map[string]error{"SPUBLISH": errors.New("not sent")},
			want: Mode{"PUBLISH", wire.AnnouncePlain, ""}},
		{name: "no SPUBLISH", answers: map[string]error{"SPUBLISH": reply("ERR unknown command 'SPUBLISH'")},
			want: Mode{"PUBLISH", wire.AnnouncePlain, ""}},
		{name: "no channel rights", answers: map[string]error{"SPUBLISH": noPerm, "PUBLISH": noPerm},
			want: Mode{"PUBLISH", wire.AnnounceNone, noPerm.Error()}},
		{name: "no answer", answers: map[string]error{"SPUBLISH": errors.New("i/o timeout")}, wantErr: true},
		{name: "loading", answers: map[string]error{"SPUBLISH": reply("LOADING Redis is loading")}, wantErr: true},
		{name: "client refused", answers: map[string]error{"SPUBLISH": reply("WRONGPASS invalid username-password pair")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Detect(context.Background(), tc.noShard, func(_ context.Context, command string) error {
				return tc.answers[command]
			})
			if tc.wantErr {
				if err == nil || err.Error()[:len("corral: detect pub/sub: ")] != "corral: detect pub/sub: " {
					t.Fatalf("Detect = %+v, %v; want a detect pub/sub error", m, err)
				}
				return
			}
			if err != nil || m != tc.want {
				t.Fatalf("Detect = %+v, %v; want %+v", m, err, tc.want)
			}
		})
	}
}

// A Learner probes once for all its concurrent first callers, remembers
// what it learnt, and probes again after a probe without an answer.
func TestLearnerProbesOnce(t *testing.T) {
	var probes atomic.Int64
	fail := atomic.Bool{}
	fail.Store(true)
	l := NewLearner(func(ctx context.Context) (Mode, error) {
		return Detect(ctx, false, func(context.Context, string) error {
			probes.Add(1)
			if fail.Load() {
				return errors.New("i/o timeout")
			}
			return nil
		})
	})
	ctx := context.Background()
	if _, ok := l.Known(); ok {
		t.Fatal("Known before a probe")
	}
	if _, err := l.Learn(ctx); err == nil {
		t.Fatal("Learn = nil error; want the probe's")
	}
	if _, ok := l.Known(); ok {
		t.Fatal("Known after a failed probe")
	}
	fail.Store(false)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if m, err := l.Learn(ctx); err != nil || m.Mark != wire.AnnounceSharded {
				t.Errorf("Learn = %+v, %v", m, err)
			}
		})
	}
	wg.Wait()
	if n := probes.Load(); n != 2 {
		t.Errorf("%d probes; want 2 (one failed, one shared)", n)
	}
	if m, ok := l.Known(); !ok || m.Publish != "SPUBLISH" {
		t.Errorf("Known = %+v, %v", m, ok)
	}
}

// A claim's detection is the Learner's: callers waiting for it take the
// mode it learnt, or, when Redis failed, its error; after a claim that
// carried none, they detect on their own, once for all. No claim once the
// mode is known.
func TestLearnerClaim(t *testing.T) {
	ctx := context.Background()
	failed := errors.New("i/o timeout")
	for _, tc := range []struct {
		name     string
		mode     *Mode
		err      error
		want     error // every waiter's
		detected int64 // by the Learner's own Detector
	}{
		{"Redis failed", nil, failed, failed, 0},
		{"carried none", nil, nil, nil, 1},
		{"learnt", &Mode{Publish: "SPUBLISH", Mark: wire.AnnounceSharded}, nil, nil, 0},
	} {
		var detected atomic.Int64
		l := NewLearner(func(context.Context) (Mode, error) {
			detected.Add(1)
			return Mode{Publish: "PUBLISH", Mark: wire.AnnouncePlain}, nil
		})
		if !l.Claim() {
			t.Fatalf("%s: Claim = false", tc.name)
		}
		const n = 3
		errs := make(chan error, n)
		for range n {
			go func() {
				m, err := l.Learn(ctx)
				if err == nil && m.Mark == 0 {
					err = errors.New("no mode")
				}
				errs <- err
			}()
		}
		if !testkit.Within(10*time.Second, time.Millisecond, func() bool { return l.waiting.Load() == n }) {
			t.Fatalf("%s: %d callers waiting; want %d", tc.name, l.waiting.Load(), n)
		}
		l.Told(tc.mode, tc.err)
		for range n {
			if err := <-errs; !errors.Is(err, tc.want) {
				t.Fatalf("%s: a waiter's Learn = %v; want %v", tc.name, err, tc.want)
			}
		}
		if got := detected.Load(); got != tc.detected {
			t.Fatalf("%s: %d detections of the Learner's own; want %d", tc.name, got, tc.detected)
		}
		if _, known := l.Known(); known == (tc.err != nil) || known && l.Claim() {
			t.Fatalf("%s: mode known %v, claimed again; want known unless Redis failed, and no claim then", tc.name, known)
		}
	}
}

// A detection its caller's context cut short is no failure of Redis: a
// caller that waited for it detects on its own.
func TestLearnerCallerContext(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	l := NewLearner(func(ctx context.Context) (Mode, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			<-release
			return Mode{}, ctx.Err()
		}
		return Mode{Publish: "SPUBLISH", Mark: wire.AnnounceSharded}, nil
	})
	short, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := l.Learn(short)
		first <- err
	}()
	<-started
	second := make(chan error, 1)
	go func() {
		m, err := l.Learn(context.Background())
		if err == nil && m.Mark != wire.AnnounceSharded {
			err = errors.New("no mode")
		}
		second <- err
	}()
	if !testkit.Within(10*time.Second, time.Millisecond, func() bool { return l.waiting.Load() == 1 }) {
		t.Fatal("the second caller is not waiting for the first's detection")
	}
	cancel()
	close(release)
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first caller's Learn = %v; want its context's error", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the waiting caller's Learn = %v; want the mode, by a detection of its own", err)
	}
}
