package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// Group invalidation, by tag, of everything (Clear), softly (Expire,
// ExpireTags): how, and why it holds, docs/design.md, section 3.10.

// Coherence is how long after another process's InvalidateTags, ExpireTags
// or Clear returned this process may still serve what it invalidated: a
// process trusts the records it read for this long.
const Coherence = 100 * time.Millisecond

// InvalidateTags invalidates every entry tagged with one of tags (Entry.Tags,
// SetEntry) that was loaded (its load began) or set before the call. Once
// it returns nil, no call that starts its own flight gets such an entry:
// in this process at once, near copies included, in every other process
// within Coherence. A load that began before it returned cannot make its
// result servable after it, wherever it commits. Entries of other tags, and
// untagged ones, are untouched.
//
// The work in Redis is one script on the prefix's records, whatever the
// number of entries: an invalidated entry is reloaded when next asked for,
// or expires. When Redis cannot take the invalidation, the error wraps
// ErrQueued: this process treats the tags' entries as invalidated at once
// and until it lands, which it does before the process reads them from
// Redis again (as Delete's).
//
// Errors: ErrInvalidTag (no tags, an empty one, or one with a NUL byte),
// ErrClosed, ErrPermission, ErrWriteRefused, ErrCircuitOpen and
// ErrRedisTimeout, each wrapped with context.
func (c *Cache) InvalidateTags(ctx context.Context, tags ...string) error {
	return c.invalidate(ctx, epochs.HardTags, tags)
}

// ExpireTags is the soft form of InvalidateTags: entries tagged with one of
// tags loaded or set before the call are stale at once, as if their TTL had
// passed: served stale, within their stale window (StaleTTL, Entry.StaleTTL),
// while one caller across the fleet refreshes them; those without a stale
// window are invalidated. Errors are InvalidateTags's.
func (c *Cache) ExpireTags(ctx context.Context, tags ...string) error {
	return c.invalidate(ctx, epochs.SoftTags, tags)
}

// Clear invalidates every entry of the Cache's Prefix loaded or set before
// the call, with InvalidateTags's guarantee; other prefixes are untouched.
// It costs Redis one write, whatever the number of entries; the cleared
// entries are deleted by a background SCAN, finished by another Cache of
// the prefix if this one closes first, or expire. Errors are
// InvalidateTags's but ErrInvalidTag.
func (c *Cache) Clear(ctx context.Context) error {
	return c.invalidate(ctx, epochs.Clear, nil)
}

// Expire expires key's entry softly: stale at once, as if its TTL had
// passed, served stale within its stale window while one caller refreshes
// it; an entry without a stale window is deleted, as by Delete. Either way
// a load of key under way cannot store what it loaded. Errors are Delete's.
func (c *Cache) Expire(ctx context.Context, key string) error {
	if err := c.validate(ctx, key, nil, false); err != nil {
		return err
	}
	err := c.store.expire(ctx, wire.NewNames(c.opts.Prefix, key))
	c.detach(key)
	if err != nil {
		c.countRedisError(ctx, err)
		return c.invalidateLater(ctx, key, err) // applied as a Delete
	}
	c.stats.Expires.Add(1)
	c.observe(ctx, EventExpired, key)
	c.queue.Superseded(ctx, string(queuedKey)+key)
	return nil
}

// SetEntry is Set for a value with its own freshness and tags: e's TTL
// (which must be > 0, used exactly: no Jitter), StaleTTL (0:
// Options.StaleTTL, < 0: none) and Tags. Errors are Set's, and
// ErrInvalidTag.
func (c *Cache) SetEntry(ctx context.Context, key string, e Entry) error {
	fr := c.entryFreshness(e)
	tags, err := epochs.Encode(e.Tags)
	if err != nil {
		return errorf("%w: %w", ErrInvalidTag, err)
	}
	fr.tags = tags
	return c.set(ctx, key, e.Value, fr, refuse.TTL(e.TTL))
}

// invalidate records an invalidation of kind (of tags, or Clear), and
// applies it here: the Mirror learns it, and no call that starts later
// joins a flight or a peek begun before.
func (c *Cache) invalidate(ctx context.Context, kind epochs.Kind, tags []string) error {
	if kind != epochs.Clear {
		var err error
		if tags, err = epochs.Unique(tags); err != nil {
			return errorf("%w: %w", ErrInvalidTag, err)
		}
	}
	if err := c.ready(ctx, nil, false); err != nil {
		return err
	}
	at := near.Clock()
	mk, err := c.records.MarkAs(ctx, false, kind, tags)
	c.detachAll()
	if err != nil {
		err = denied(err)
		c.countRedisError(ctx, err)
		return c.invalidateGroupLater(ctx, kind, tags, err)
	}
	c.marked(ctx, kind, tags, mk, at)
	return nil
}

// marked applies here an invalidation Redis recorded (mk; at, near.Clock
// before it was sent), and counts it.
func (c *Cache) marked(ctx context.Context, kind epochs.Kind, tags []string, mk epochs.Mark, at int64) {
	c.groups.Apply(tags, mk, at)
	if kind == epochs.Clear {
		c.tasks.Start(func() { c.sweep(mk.Clear) })
		c.stats.Clears.Add(1)
		c.observe(ctx, EventCleared, "")
		return
	}
	for _, tag := range tags {
		c.stats.TagInvalidations.Add(1)
		c.observe(ctx, EventTagInvalidated, tag)
	}
}

// detachAll makes every call that starts now start its own flight and
// peek (as detach does for one key), and forgets what fail-open loads
// returned: a group invalidation may concern any key.
func (c *Cache) detachAll() {
	c.flights.DetachAll()
	c.peeks.DetachAll()
	c.batchPeeks.DetachAll()
	c.forgetAll()
}

// sweep deletes the entries a Clear of epoch invalidated, in the
// background (internal/epochs' Sweep, epochs.Config.Cleared).
func (c *Cache) sweep(epoch int64) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Hour)
	defer cancel()
	switch n, err := c.records.Sweep(ctx, c.rdb, epoch, true); {
	case err == nil:
		c.groups.Swept(epoch)
	case !errors.Is(err, epochs.ErrSweepHeld) && c.ctx.Err() == nil:
		c.opts.Logger.Warn("corral: the sweep of cleared entries stopped; a Cache of the prefix serving calls takes it up, or they expire", "deleted", n, errAttr(err))
	}
}

// sendPeeks sends peeks (one may go inline), with a read of the group
// invalidations' records when one is due (epochs' Due): in the same batch,
// so the records cost a peek no round trip more, and on one server no
// command more either, folded into the first peek (epochs' ReadBeside).
func (c *Cache) sendPeeks(ops []*transport.Op) {
	if tags, done, ok := c.groups.Due(); ok {
		ops = append(c.records.ReadBeside(c.ctx, tags, done, ops[0], c.resend), ops[1:]...)
	}
	if len(ops) == 1 {
		c.store.send(ops[0])
		return
	}
	c.store.sendAll(ops)
}

// sendPeek is sendPeeks of one, without a slice on the hit path.
func (c *Cache) sendPeek(o *transport.Op) {
	if tags, done, ok := c.groups.Due(); ok {
		c.store.sendAll(c.records.ReadBeside(c.ctx, tags, done, o, c.resend))
		return
	}
	c.store.send(o)
}

// resend sends ops a folded read could not answer (epochs' ReadBeside).
func (c *Cache) resend(ops ...*transport.Op) { c.store.sendAll(ops) }

// judge is the verdict of the group invalidations on an entry (its born
// and tags), the records read first when stale (epochs' Verdict).
func (c *Cache) judge(ctx context.Context, born int64, tags string) (epochs.Verdict, error) {
	v, err := c.groups.Verdict(ctx, born, tags)
	return v, denied(err)
}

// judgeNotice is judge for the value a notice brought f's callers, by the
// records as they stood when its last caller joined: all Coherence asks
// (docs/design.md, section 3.10); read first only if stale then.
func (c *Cache) judgeNotice(f *flight, born int64, tags string) (epochs.Verdict, error) {
	if v := c.groups.CheckAt(born, tags, f.joinedAt.Load(), nil); v != epochs.Unknown {
		return v, nil
	}
	return c.judge(f.ctx, born, tags)
}

// tagged makes the records of w's tags outlive it (epochs' Tagged),
// before w is stored.
func (c *Cache) tagged(ctx context.Context, w entryWrite) error {
	if w.tags == "" {
		return nil
	}
	if err := c.records.Tagged(ctx, epochs.Tags(w.tags), w.hard); err != nil {
		return errorf("tags: %w", denied(err))
	}
	return nil
}
