package observetest

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Counted returns the counters of st that the script checks (Want's and
// WantOutage's, and BreakerOpens), the others zero.
func Counted(st corral.Stats) corral.Stats {
	return corral.Stats{
		Hits: st.Hits, NearHits: st.NearHits, StaleHits: st.StaleHits, NegativeHits: st.NegativeHits,
		FailureHits: st.FailureHits, StaleIfError: st.StaleIfError, Misses: st.Misses, Coalesced: st.Coalesced,
		Waited: st.Waited, Errors: st.Errors, Joined: st.Joined,
		Loads: st.Loads, LoadErrors: st.LoadErrors, Waits: st.Waits, EarlyRefreshes: st.EarlyRefreshes,
		Refreshes: st.Refreshes, RefreshErrors: st.RefreshErrors, LeasesLost: st.LeasesLost,
		CommitsRejected: st.CommitsRejected, FailOpens: st.FailOpens, FailSafeHits: st.FailSafeHits,
		BreakerOpens: st.BreakerOpens, InvalidationsQueued: st.InvalidationsQueued,
		InvalidationsReplayed: st.InvalidationsReplayed, InvalidationsDropped: st.InvalidationsDropped,
		TagInvalidations: st.TagInvalidations, Clears: st.Clears, Expires: st.Expires,
	}
}

// Events returns how many events of each kind an Observer of the Caches
// that counted st is told: what the Stats imply (LoadStart and LoadEnd are
// both Loads; the failed LoadEnds are LoadErrors). Breaker events other
// than EventBreakerOpen are left out: Stats does not count them.
func Events(st corral.Stats) map[corral.EventKind]uint64 {
	return map[corral.EventKind]uint64{
		corral.EventHit:            st.Hits,
		corral.EventNearHit:        st.NearHits,
		corral.EventStaleHit:       st.StaleHits - st.StaleIfError,
		corral.EventStaleIfError:   st.StaleIfError,
		corral.EventNegativeHit:    st.NegativeHits,
		corral.EventFailureHit:     st.FailureHits,
		corral.EventMiss:           st.Misses,
		corral.EventFailOpen:       st.FailOpens,
		corral.EventFailSafe:       st.FailSafeHits,
		corral.EventCoalesced:      st.Coalesced,
		corral.EventWaited:         st.Waited,
		corral.EventError:          st.Errors,
		corral.EventLoadStart:      st.Loads,
		corral.EventLoadEnd:        st.Loads,
		corral.EventWaitStart:      st.Waits,
		corral.EventWaitEnd:        st.Waits,
		corral.EventLeaseLost:      st.LeasesLost,
		corral.EventCommitRejected: st.CommitsRejected,
		corral.EventBreakerOpen:    st.BreakerOpens,

		corral.EventInvalidationQueued:   st.InvalidationsQueued,
		corral.EventInvalidationReplayed: st.InvalidationsReplayed,
		corral.EventInvalidationDropped:  st.InvalidationsDropped,

		corral.EventTagInvalidated: st.TagInvalidations,
		corral.EventCleared:        st.Clears,
		corral.EventExpired:        st.Expires,
	}
}

func value(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

// hold starts a Fetch of key on c whose load returns val once release is
// called, and returns when that load has started; done gets the Fetch's
// error (or a wrong value's).
func hold(t *testing.T, c cache, key, val string) (release func(), done <-chan error) {
	started, unblock, result := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		v, err := c.Fetch(context.Background(), key, time.Hour, func(context.Context) ([]byte, error) {
			close(started)
			<-unblock
			return []byte(val), nil
		})
		if err == nil && string(v) != val {
			err = errors.New("the holder got " + strconv.Quote(string(v)))
		}
		result <- err
	}()
	select {
	case <-started:
	case <-time.After(within):
		t.Fatalf("the load of %q did not start", key)
	}
	return func() { close(unblock) }, result
}

// pastSoftExpiry waits until the server's clock is past the soft expiry of
// the entry named entry.
func pastSoftExpiry(t *testing.T, rdb *redis.Client, entry string) {
	ctx := context.Background()
	soft, err := rdb.HGet(ctx, entry, "s").Int64()
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the soft expiry", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > soft
	})
}

// poll calls cond until it holds, every millisecond, for up to within.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyEvery(t, within, time.Millisecond, what, cond)
}

// add returns the sum of a and b's counters, gauges (InvalidationsPending)
// and durations (OutageTime); BreakerOpen: either's.
func add(a, b corral.Stats) corral.Stats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := range va.NumField() {
		switch f := va.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(f.Uint() + vb.Field(i).Uint())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + vb.Field(i).Int())
		case reflect.Bool:
			f.SetBool(f.Bool() || vb.Field(i).Bool())
		default:
			panic("observetest: add: Stats." + va.Type().Field(i).Name + " is of a kind add does not sum")
		}
	}
	return a
}
