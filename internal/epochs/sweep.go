package epochs

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Sweeps of cleared entries. A Clear leaves its entries in Redis, each
// replaced when next asked for, or gone when it expires; a sweep deletes
// them sooner (reclaim.lua), so that a Redis under noeviction does not
// fill up with cleared entries nobody asks for again. One process sweeps a
// prefix at a time, under the sweep's lease (sweep.lua), and records the
// last Clear swept to the end (wire.SweptName). A process that reads a
// Clear's epoch above the last one it knows swept takes the sweep up
// (Config.Cleared, at most once per SweepLease, one at a time), waiting
// while another holds the lease: a sweep cut short, by its Cache's Close, a
// crash or a CLI that exited, is finished by another.

// SweepLease is a sweep's lease TTL, renewed after every batch of SCAN.
const SweepLease = 30 * time.Second

// sweepRetry is how often a Sweep that waits asks for the lease again.
const sweepRetry = 2 * time.Second

// ErrSweepHeld says another process is sweeping the prefix.
var ErrSweepHeld = errors.New("another process is sweeping")

// errSweepLost says a sweep's lease expired under it.
var errSweepLost = errors.New("the sweep's lease expired")

// Sweep deletes the entries of the prefix that the Clear of epoch (0: the
// prefix's last Clear, read first) invalidated, scanning every master
// (SCAN, 500 names at a time). It runs on rdb directly: a scan is no
// call's. It returns nil at once when that Clear was swept already. When
// another process sweeps, it returns ErrSweepHeld, or with wait, asks
// again every 2 s until that sweep is done or its lease lapses (its
// process gone), or ctx ends. A sweep that fails hands its lease back, for
// another to take up.
func (r Records) Sweep(ctx context.Context, rdb redis.UniversalClient, epoch int64, wait bool) (deleted int64, err error) {
	for {
		deleted, err = r.sweep(ctx, rdb, epoch)
		if !wait || !errors.Is(err, ErrSweepHeld) {
			return deleted, err
		}
		t := time.NewTimer(sweepRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// sweep is one try of Sweep.
func (r Records) sweep(ctx context.Context, rdb redis.UniversalClient, epoch int64) (deleted int64, err error) {
	if epoch == 0 {
		v, err := rdb.Get(ctx, wire.ClearName(r.Prefix)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		if epoch, _ = ParseRecord(v); epoch == 0 {
			return 0, nil // never cleared
		}
	}
	swept := wire.SweptName(r.Prefix)
	keys, token := []string{swept, swept + ":l"}, wire.NewToken(0)
	lease := func(ctx context.Context, op string) (int64, error) {
		return sweepScript.Run(ctx, rdb, keys, op, epoch, token, wire.MS(SweepLease)).Int64()
	}
	switch n, err := lease(ctx, "take"); {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, nil
	case n == 0:
		return 0, ErrSweepHeld
	}
	hold := func(ctx context.Context) error {
		n, err := lease(ctx, "hold")
		if err == nil && n == 0 {
			err = errSweepLost
		}
		return err
	}
	if deleted, err = r.scan(ctx, rdb, epoch, hold); err != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = lease(ctx, "drop") // a closing Cache's too: another takes it up at once
		return deleted, err
	}
	if n, err := lease(ctx, "done"); err != nil || n == 0 {
		return deleted, errors.Join(err, errSweepLost)
	}
	return deleted, nil
}

// scan is Sweep's scan of every master, hold renewing its lease.
func (r Records) scan(ctx context.Context, rdb redis.UniversalClient, epoch int64, hold func(context.Context) error) (deleted int64, err error) {
	// Entries only (wire.EntryName: P:e:{tag}:key), not those of a prefix
	// that begins with P:e.
	match := escapeGlob(r.Prefix+":e:") + "{*"
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		counts := make(chan int64, 64) // ForEachMaster runs the nodes concurrently
		done := make(chan struct{})
		go func() {
			for n := range counts {
				deleted += n
			}
			close(done)
		}()
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n, err := sweepNode(ctx, c, match, epoch, hold)
			counts <- n
			return err
		})
		close(counts)
		<-done
		return deleted, err
	}
	c, ok := rdb.(*redis.Client)
	if !ok {
		return 0, errors.New("sweep: a client of another kind")
	}
	return sweepNode(ctx, c, match, epoch, hold)
}

// sweepNode is Sweep on one node.
func sweepNode(ctx context.Context, c *redis.Client, match string, epoch int64, hold func(context.Context) error) (deleted int64, err error) {
	var cursor uint64
	loaded := false
	for {
		keys, next, err := c.Scan(ctx, cursor, match, 500).Result()
		if err != nil {
			return deleted, err
		}
		if len(keys) > 0 && !loaded {
			// The first by EVALSHA, or EVAL when the server lacks it (no
			// SCRIPT LOAD: the ACL rule need not grant it); the rest by
			// EVALSHA, pipelined.
			if n, err := reclaimScript.Run(ctx, c, keys[:1], epoch).Int64(); err != nil {
				return deleted, err
			} else if n > 0 {
				deleted++
			}
			keys, loaded = keys[1:], true
		}
		if len(keys) > 0 {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					reclaimScript.EvalSha(ctx, p, []string{k}, epoch)
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return deleted, err
			}
			for _, cmd := range cmds {
				if n, _ := cmd.(*redis.Cmd).Int64(); n > 0 {
					deleted++
				}
			}
		}
		if cursor = next; cursor == 0 {
			return deleted, nil
		}
		if err := hold(ctx); err != nil {
			return deleted, err
		}
	}
}

// escapeGlob escapes the glob characters of a pattern's literal part (a
// prefix may hold *, ?, [ or \).
func escapeGlob(lit string) string {
	var b strings.Builder
	for _, ch := range lit {
		if strings.ContainsRune(`*?[]\`, ch) {
			b.WriteByte('\\')
		}
		b.WriteRune(ch)
	}
	return b.String()
}
