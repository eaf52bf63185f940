package corral

import "github.com/corralhq/corral/internal/wire"

// Health returns nil while this Cache can use Redis as it needs, and
// otherwise why not, as an error to match with errors.Is:
//
//   - ErrCircuitOpen, wrapping the cause, while a node's circuit breaker is
//     open: Redis refuses connections (the connection's error), is silent
//     (ErrRedisTimeout), refuses the client's credentials (Redis's
//     WRONGPASS or NOAUTH reply), or kept failing. Calls are then answered
//     from memory or fail open (Options.FailSafe).
//   - ErrPermission, wrapping Redis's NOPERM reply, when a call met a right
//     the ACL user lacks in the last 10 s: the calls that need it fail.
//   - ErrWriteRefused, naming OOM or READONLY, when Redis refused a write
//     in the last 10 s: hits are served, nothing is stored.
//
// It asks nothing of Redis: it says what the Cache's own calls met, so it
// costs nothing to call often (a health check). A Cache that has made no
// call yet is healthy.
func (c *Cache) Health() error {
	if err := c.store.openErr(); err != nil {
		return err
	}
	return c.warn.Recent()
}

// skipped returns the error of a call of key while its node is tripped, so
// that the call skips Redis without a round through the pipeline; nil
// otherwise (when no node is tripped, at the cost of one atomic load).
func (c *Cache) skipped(key string) error {
	return c.store.skipped(wire.EntryName(c.opts.Prefix, key))
}
