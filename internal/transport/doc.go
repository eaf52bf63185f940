// Package transport is corral's one door to Redis: every command the Cache
// sends, but its long-lived connections (pub/sub, the near cache's
// tracking), goes through a Pipeline, which applies the timeout, the circuit
// breaker and one error classification (Classify). It knows commands, keys
// to route them by, and nodes; nothing of what corral keeps in Redis.
//
// Batching. Concurrent ops share round trips: ops queue, and up to
// maxBatches senders each take what has queued and send it as one
// pipelined batch (auto-pipelining, as rueidis does; on a Cluster, one
// batch per master). A sender is a goroutine started by an op that finds no
// sender free; one that finds the queue empty lingers for senderLinger, for
// the next op to wake it rather than start a new goroutine (whose stack
// would have to grow again to the client's depth), then ends: an idle
// Pipeline has no sender. So a thousand cold keys at once cost a few round
// trips, not a thousand waits for a pooled connection, and the time an op
// spends queued is not mistaken for a slow Redis: a batch's bound (the
// timeout, plus the time its payload needs on the wire) starts when it is
// sent (pipeline.go, exchange.go).
//
// Slow is not down. A batch in flight is watched by the Pipeline's monitor
// (liveness.go): a node that answers anything, a PING on a connection of the
// monitor's own included (probe.go), is alive, however long its batch
// takes; a client starved of CPU is not taken for a silent Redis
// (cpuwait.go). Only a node that refuses connections, refuses the client's
// credentials, or stays silent for the timeout is down: its breaker trips
// (breaker.go), its batches fail at once, and a recovery probe finds when it
// answers again (down.go), calling Config.Recovered before the breaker lets
// callers through. Replies that say "not now", and connections that did not
// open in time, send their ops again (retry.go). Reads may run in their
// caller's goroutine when that cannot leave it stuck (inline.go).
package transport
