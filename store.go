package corral

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/corralhq/corral/internal/wire"
	"github.com/klauspost/compress/s2"
	"github.com/redis/go-redis/v9"
)

// This file holds every Redis command corral sends outside pub/sub
// subscriptions (internal/notify). The protocol itself is in the .lua files.

var (
	//go:embed scripts/fetch.lua
	fetchSrc string
	//go:embed scripts/commit.lua
	commitSrc string
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/delete.lua
	deleteSrc string
	//go:embed scripts/read.lua
	readSrc string

	fetchScript   = redis.NewScript(fetchSrc)
	commitScript  = redis.NewScript(commitSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = redis.NewScript(releaseSrc)
	deleteScript  = redis.NewScript(deleteSrc)
	readScript    = redis.NewScript(readSrc)
)

// store runs corral's Redis commands through the pipeline (pipeline.go),
// each bounded by RedisTimeout plus its payload's transfer time, and keeps
// the payload's encoding (compression, size limit) out of the protocol.
type store struct {
	pipe        *pipeline
	inline      int  // Options.NoticeInlineLimit
	noShard     bool // Options.DisableShardedPubSub
	compressMin int  // compress payloads of at least this many bytes; 0: never
	version     int  // Options.CodecVersion, stored with every entry
	maxValue    int  // Options.MaxValueBytes
	hooks       storeHooks

	leaseTTL time.Duration // Options.LeaseTTL: the least a revocation marker lives

	probeMu   sync.Mutex                 // one probe at a time
	mode      atomic.Pointer[pubsubMode] // nil until detected
	probeName string                     // Prefix's probe: the pub/sub probe's channel, the rights check's key
}

// storeHooks are what the store tells its Cache of. Each may be nil.
type storeHooks struct {
	noticeFailed func(error)      // a notice Redis refused to publish (a write that stood)
	refusedWrite func(why string) // a write Redis refused (OOM, a replica)
	nodeFailed   func()           // a call failed: its node may have failed over
}

func newStore(rdb redis.UniversalClient, o Options, stats *counters, hooks storeHooks) *store {
	s := &store{inline: o.NoticeInlineLimit, noShard: o.DisableShardedPubSub, maxValue: o.MaxValueBytes, version: o.CodecVersion,
		probeName: o.Prefix + ":probe", leaseTTL: o.LeaseTTL, hooks: hooks}
	if o.Compress {
		s.compressMin = o.CompressMinBytes
	}
	s.pipe = newPipeline(rdb, o.RedisTimeout, func(error) {
		if s.hooks.nodeFailed != nil {
			s.hooks.nodeFailed()
		}
	}, func(p *pipeline, node string) *breaker { return newBreaker(o, stats, node, p.lastError) })
	return s
}

// close stops the pipeline (see pipeline.close).
func (s *store) close() { s.pipe.close() }

// largeReply is the largest payload fetch.lua sends with its reply; a larger
// one is read by a command of its own, bounded by its size.
const largeReply = 256 << 10

// call runs a script through the pipeline. size is the payload it carries,
// in bytes.
func (s *store) call(ctx context.Context, sc *redis.Script, keys []string, size int, args ...any) (any, error) {
	r := s.pipe.do(&op{ctx: ctx, key: keys[0], size: size,
		build:   func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return sc.EvalSha(ctx, p, keys, args...) },
		rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return sc.Eval(ctx, p, keys, args...) },
	})
	if r.err != nil {
		return nil, denied(r.err)
	}
	res, err := r.cmd.(*redis.Cmd).Result()
	return res, denied(err)
}

// denied wraps err with ErrPermission when it is Redis refusing a command
// or key to the ACL user: NOPERM, or the error a script gets for a command
// it may not run ("The user executing the script can't ..."); and with
// ErrWriteRefused when Redis refuses to write (OOM, READONLY).
func denied(err error) error {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) {
		return err
	}
	switch msg := reply.Error(); {
	case strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "user executing the script can't"):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case strings.HasPrefix(msg, "OOM") || strings.HasPrefix(msg, "READONLY"):
		return fmt.Errorf("%w: %w", ErrWriteRefused, err) // a write the scripts could not catch (Delete's)
	}
	return err
}

// fetch runs fetch.lua (see its header). A payload too large to come with
// the reply is read by a command of its own; Entry.Value is the payload
// decoded (decompressed).
func (s *store) fetch(ctx context.Context, n wire.Names, a fetchArgs) (wire.FetchReply, error) {
	skip := ""
	if a.skip != 0 {
		skip = strconv.FormatInt(a.skip, 10)
	}
	for range 3 {
		res, err := s.call(ctx, fetchScript, []string{n.Entry, n.Lease}, 0,
			a.token, a.leaseTTL.Milliseconds(), strconv.FormatFloat(a.x, 'g', -1, 64), largeReply, skip, a.version)
		if err != nil {
			return wire.FetchReply{}, fmt.Errorf("corral: fetch: %w", err)
		}
		r, err := wire.ParseFetch(res)
		if err != nil {
			return wire.FetchReply{}, fmt.Errorf("corral: fetch: %w", err)
		}
		if (r.Kind == wire.Hit || r.Kind == wire.Stale) && r.Payload == nil {
			payload, flags, ok, err := s.read(ctx, n, r.Size)
			if err != nil {
				return wire.FetchReply{}, fmt.Errorf("corral: fetch: %w", err)
			}
			if !ok {
				continue // replaced by an entry of another format, or gone: decide again
			}
			r.Payload, r.Flags.Kind, r.Flags.Compressed = payload, flags.Kind, flags.Compressed
		}
		if r.Payload, err = s.decode(r.Payload, r.Flags); err != nil {
			return r, fmt.Errorf("corral: fetch %q: %w: %w", n.Entry, errBadEntry, err)
		}
		return r, nil
	}
	return wire.FetchReply{}, fmt.Errorf("corral: fetch %q: the entry kept changing while it was read", n.Entry)
}

// errBadEntry is wrapped by the error of a fetch whose entry does not decode
// (a corrupt compressed payload, one over MaxValueBytes): the entry is to be
// taken as missing, not Redis as failing.
var errBadEntry = errors.New("corral: the entry does not decode")

// fetchArgs are fetch.lua's arguments (see its header).
type fetchArgs struct {
	token    string
	leaseTTL time.Duration
	x        float64 // the XFetch draw
	skip     int64   // the soft expiry of an entry the caller could not use; 0 for none
	version  string  // the caller's codec version; "" for any
}

// read reads an entry's payload and flags (HMGET), allowing for size bytes
// on the wire. ok is false when the entry has no payload.
func (s *store) read(ctx context.Context, n wire.Names, size int) (payload []byte, f wire.Flags, ok bool, err error) {
	r := s.pipe.do(&op{ctx: ctx, key: n.Entry, size: size,
		build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return p.HMGet(ctx, n.Entry, wire.FieldValue, wire.FieldCompressed, "f")
		},
	})
	if r.err == nil {
		r.err = r.cmd.Err()
	}
	if r.err != nil {
		return nil, f, false, denied(r.err)
	}
	vals := r.cmd.(*redis.SliceCmd).Val()
	fs, _ := vals[2].(string)
	if f = wire.ParseFlags(fs); f.Unknown {
		return nil, f, false, nil // a format of another release: no entry here
	}
	field := vals[0]
	if f.Compressed {
		field = vals[1]
	}
	v, ok := field.(string)
	if !ok {
		return nil, f, false, nil
	}
	return []byte(v), f, true, nil
}

// decode returns the value a payload holds: decompressed when it was stored
// compressed, and no larger than MaxValueBytes.
func (s *store) decode(payload []byte, f wire.Flags) ([]byte, error) {
	if !f.Compressed {
		return payload, nil
	}
	n, err := s2.DecodedLen(payload)
	switch {
	case err != nil:
		return nil, fmt.Errorf("decompress: %w", err)
	case n > s.maxValue:
		return nil, fmt.Errorf("decompress: %d bytes: %w", n, ErrValueTooLarge)
	}
	v, err := s2.Decode(nil, payload)
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	return v, nil
}

// encode returns the payload to store for w, compressed when compression is
// on, w is a value of at least compressMin bytes, and compressing saves space.
func (s *store) encode(w entryWrite) (payload []byte, flags string) {
	if s.compressMin > 0 && w.kind == wire.Value && len(w.value) >= s.compressMin {
		if z := s2.Encode(nil, w.value); len(z) < len(w.value) {
			return z, w.kind.Flags(true)
		}
	}
	return w.value, w.kind.Flags(false)
}

// entryWrite is one entry to store: a load's result or a Set.
type entryWrite struct {
	value []byte
	kind  wire.Kind
	soft  time.Duration // soft TTL
	hard  time.Duration // hard TTL: soft + stale window
	took  time.Duration // the load's duration, for XFetch
}

// commit stores w under n. With a token it stores only while that token holds
// the lease; it reports whether it stored. With an empty token (Set) it
// always stores, and revokes any lease.
//
// A commit Redis refuses to store (out of memory, a replica) returns an
// error wrapping ErrWriteRefused; the lease was handed back and waiters got
// the value inline, or were told to load it.
func (s *store) commit(ctx context.Context, n wire.Names, token string, w entryWrite) (bool, error) {
	res, err := s.commitHeld(ctx, n, holder{token: token}, w)
	return res != commitRejected, err
}

// holder is what a load's commit stands on: its lease's token, and what
// commit.lua needs to tell that lease evicted from revoked (see its
// header).
type holder struct {
	token    string
	deadline int64 // server ms: the lease cannot have expired before; 0 when the token must hold it
	seen     int64 // the soft expiry of the entry the lease was taken over; 0 for none
}

// commitResult is what commit.lua did with a commit that Redis did not
// refuse.
type commitResult int

const (
	commitRejected commitResult = 0 // the token no longer holds the lease
	commitStored   commitResult = 1
	commitEvicted  commitResult = 2 // stored, although the lease was missing (evicted)
)

// commitHeld is commit, for a load whose lease may have been evicted: h
// says until when its lease was surely alive, and which entry it was
// taken over, so that commit.lua can tell an eviction from a revocation.
func (s *store) commitHeld(ctx context.Context, n wire.Names, h holder, w entryWrite) (commitResult, error) {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return commitRejected, err
	}
	payload, flags := s.encode(w)
	res, err := s.call(ctx, commitScript, []string{n.Entry, n.Lease, n.Notice}, len(payload),
		h.token, payload, flags, ms(w.soft), ms(w.hard), fractionalMS(w.took), pub, s.inline, s.version,
		ms(s.leaseTTL), optionalMS(h.deadline), optionalMS(h.seen))
	if err != nil {
		return commitRejected, fmt.Errorf("corral: commit: %w", err)
	}
	status, refusal, err := s.written(res)
	switch {
	case err != nil:
		return commitRejected, fmt.Errorf("corral: commit: %w", err)
	case status == -1:
		if s.hooks.refusedWrite != nil {
			s.hooks.refusedWrite(refusal)
		}
		return commitRejected, fmt.Errorf("corral: commit %q: %w: %s", n.Entry, ErrWriteRefused, refusal)
	}
	return commitResult(status), nil
}

// optionalMS formats a time in server ms for a script, and 0 (none) as the
// empty string.
func optionalMS(t int64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatInt(t, 10)
}

// written decodes the reply of a script that writes and publishes: {status,
// notice error}. A notice that could not be published (no channel rights)
// does not undo the write: it is reported to hooks.noticeFailed.
func (s *store) written(res any) (status int64, refusal string, err error) {
	a, _ := res.([]any)
	if len(a) != 2 && len(a) != 3 {
		return 0, "", fmt.Errorf("unexpected reply %#v", res)
	}
	status, ok := a[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("unexpected reply %#v", res)
	}
	if msg, ok := a[1].(string); ok && s.hooks.noticeFailed != nil {
		s.hooks.noticeFailed(errors.New(msg))
	}
	if len(a) == 3 {
		refusal, _ = a[2].(string)
	}
	return status, refusal, nil
}

// renewResult is what renew.lua replied.
type renewResult int

const (
	renewed      renewResult = 1
	renewRetaken renewResult = 2  // renewed, after finding the lease missing (evicted)
	renewNot     renewResult = 0  // the token no longer holds the lease
	renewLate    renewResult = -1 // reached the server after its deadline
)

// renew extends h's lease by ttl (renew.lua), unless it reaches the server
// after deadline (server ms). A lease found missing before h.deadline, over
// the entry it was taken over (h.seen), was evicted, and is taken again.
func (s *store) renew(ctx context.Context, n wire.Names, h holder, ttl time.Duration, deadline int64) (renewResult, error) {
	res, err := s.call(ctx, renewScript, []string{n.Lease, n.Entry}, 0,
		h.token, ttl.Milliseconds(), deadline, h.deadline, optionalMS(h.seen))
	if err != nil {
		return renewNot, fmt.Errorf("corral: renew lease: %w", err)
	}
	v, _ := res.(int64)
	return renewResult(v), nil
}

// releaseArgs say how release.lua hands a lease back.
type releaseArgs struct {
	notice string        // published when not empty
	hold   time.Duration // > 0: keep refreshes off this long (a backoff marker replaces the lease)
	mark   bool          // flag the entry: its last refresh failed
}

// release hands the lease back if token still holds it (release.lua).
func (s *store) release(ctx context.Context, n wire.Names, token string, a releaseArgs) (bool, error) {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	mark := 0
	if a.mark {
		mark = 1
	}
	hold := int64(0)
	if a.hold > 0 {
		hold = ms(a.hold)
	}
	res, err := s.call(ctx, releaseScript, []string{n.Lease, n.Notice, n.Entry}, 0, token, pub, a.notice, hold, mark)
	if err != nil {
		return false, fmt.Errorf("corral: release lease: %w", err)
	}
	status, _, err := s.written(res)
	if err != nil {
		return false, fmt.Errorf("corral: release lease: %w", err)
	}
	return status == 1, nil
}

func (s *store) delete(ctx context.Context, n wire.Names) error {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return err
	}
	res, err := s.call(ctx, deleteScript, []string{n.Entry, n.Lease, n.Notice}, 0, pub, ms(s.leaseTTL))
	if err == nil {
		_, _, err = s.written(res)
	}
	if err != nil {
		return fmt.Errorf("corral: delete: %w", err)
	}
	return nil
}

// get reads an entry without taking a lease: its value (decoded) and what it
// caches. ok is false when there is no entry.
func (s *store) get(ctx context.Context, n wire.Names) (value []byte, kind wire.Kind, ok bool, err error) {
	res, err := s.call(ctx, readScript, []string{n.Entry}, 0, largeReply)
	if errors.Is(err, redis.Nil) {
		return nil, wire.Value, false, nil
	}
	if err != nil {
		return nil, wire.Value, false, fmt.Errorf("corral: get: %w", err)
	}
	a, _ := res.([]any)
	if len(a) != 2 {
		return nil, wire.Value, false, fmt.Errorf("corral: get: unexpected reply %#v", res)
	}
	fs, _ := a[1].(string)
	f := wire.ParseFlags(fs)
	var payload []byte
	switch v := a[0].(type) {
	case string:
		payload = []byte(v)
	case int64:
		if payload, f, ok, err = s.read(ctx, n, int(v)); err != nil || !ok {
			return nil, wire.Value, false, err
		}
	default:
		return nil, wire.Value, false, fmt.Errorf("corral: get: unexpected reply %#v", res)
	}
	if value, err = s.decode(payload, f); err != nil {
		return nil, wire.Value, false, fmt.Errorf("corral: get %q: %w", n.Entry, err)
	}
	return value, f.Kind, true, nil
}

// pubsubMode is how this process announces and hears notices.
type pubsubMode struct {
	publish string // the command the scripts publish with: SPUBLISH or PUBLISH
	// mark is the first byte of this process's lease tokens, which tells
	// waiters elsewhere how its notices go out (wire.AnnounceSharded,
	// AnnouncePlain, or AnnounceNone without channel rights: they re-check
	// on their own).
	mark byte
}

// pubsub returns this process's pub/sub mode: sharded pub/sub where the
// server has it (Redis 7+), it is not disabled and the ACL user may use it;
// plain pub/sub otherwise; none when the user has no right to publish on
// corral's channels (notices are still sent, fail, and are counted). It
// probes on first use, on a channel under Prefix, so New works while Redis
// is down; concurrent first callers share one probe, and a probe that gets
// no answer is tried again next time.
func (s *store) pubsub(ctx context.Context) (pubsubMode, error) {
	if m := s.mode.Load(); m != nil {
		return *m, nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if m := s.mode.Load(); m != nil {
		return *m, nil
	}
	m := pubsubMode{publish: "PUBLISH", mark: wire.AnnounceNone}
	for _, try := range []pubsubMode{{"SPUBLISH", wire.AnnounceSharded}, {"PUBLISH", wire.AnnouncePlain}} {
		if try.mark == wire.AnnounceSharded && s.noShard {
			continue
		}
		err := s.probe(ctx, try.publish)
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			return pubsubMode{}, fmt.Errorf("corral: detect pub/sub: %w", err)
		}
		if err == nil {
			m = try
			break
		}
		// An unknown or renamed command, or one the ACL denies: try the next.
	}
	s.mode.Store(&m)
	return m, nil
}

// probe publishes an empty message with command (SPUBLISH or PUBLISH) on
// Prefix's probe channel, which nobody subscribes to.
func (s *store) probe(ctx context.Context, command string) error {
	channel := s.probeName
	r := s.pipe.do(&op{ctx: ctx, key: channel,
		build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			if command == "SPUBLISH" {
				return p.SPublish(ctx, channel, "")
			}
			return p.Publish(ctx, channel, "")
		},
	})
	if r.err != nil {
		return r.err
	}
	return r.cmd.Err()
}

// publishCommand returns the command the scripts publish notices with.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	m, err := s.pubsub(ctx)
	return m.publish, err
}

// fractionalMS formats d in milliseconds with microsecond precision, so
// that XFetch sees loads shorter than a millisecond too.
func fractionalMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64)
}

// ms rounds d up to whole milliseconds, at least 1: Redis rejects a 0 TTL.
func ms(d time.Duration) int64 {
	m := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(m), 1)
}

// peekReply is an entry read without a script (peek): what it holds, and
// the server's clock when it was read.
type peekReply struct {
	found   bool // the entry has a payload
	payload []byte
	flags   wire.Flags
	soft    int64   // soft expiry, server ms
	took    float64 // the last load's duration, ms (XFetch)
	now     int64   // the server's clock, ms
	arrived int64   // nearClock when the reply arrived
	version int     // the codec version it was written with (0 when absent)
}

// peek reads an entry's fields and the server's clock in one round trip,
// without the script and without writing (the hit path): finish gets the
// reply, in the calling goroutine when the read goes inline (inline.go),
// otherwise from a pipeline goroutine. ctx ends the op only if it has not
// been sent yet; an inline read ends by the time by (the caller's deadline;
// zero for none), and then goes on through the pipeline.
func (s *store) peek(ctx context.Context, by time.Time, entry string, finish func(peekReply, error)) {
	args := make([]any, len(peekFields)+2)
	args[0], args[1] = "hmget", entry
	copy(args[2:], peekFields)
	o := &op{ctx: ctx, key: entry, clock: true, read: args, readBy: by,
		build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return p.Do(ctx, args...)
		},
	}
	o.finish = func(r opResult) {
		if r.err == nil {
			r.err = r.cmd.Err()
		}
		if r.err != nil {
			finish(peekReply{}, fmt.Errorf("corral: peek: %w", denied(r.err)))
			return
		}
		vals, _ := r.cmd.(*redis.Cmd).Val().([]any)
		if len(vals) != len(peekFields) {
			finish(peekReply{}, fmt.Errorf("corral: peek: unexpected reply %#v", r.cmd.(*redis.Cmd).Val()))
			return
		}
		pr, err := s.parsePeek(vals, r.now)
		finish(pr, err)
	}
	if s.pipe.inline(o) {
		return
	}
	if !s.pipe.enqueue(o) {
		finish(peekReply{}, ErrClosed)
	}
}

// peekFields are the fields a peek reads (HMGET), boxed once: built per
// call, they cost an allocation each on the hit path.
var peekFields = []any{"s", "d", "f", wire.FieldValue, wire.FieldCompressed, "c"}

// parsePeek decodes a peek's HMGET s d f v z.
func (s *store) parsePeek(vals []any, now int64) (peekReply, error) {
	r := peekReply{now: now}
	soft, _ := vals[0].(string)
	var err error
	if r.soft, err = strconv.ParseInt(soft, 10, 64); err != nil {
		return r, nil // no entry (or none this release knows)
	}
	d, _ := vals[1].(string)
	r.took, _ = strconv.ParseFloat(d, 64)
	f, _ := vals[2].(string)
	if r.flags = wire.ParseFlags(f); r.flags.Unknown {
		return r, nil // a format of another release: no entry here
	}
	if c, ok := vals[5].(string); ok {
		r.version, _ = strconv.Atoi(c)
	}
	payload := vals[3]
	if r.flags.Compressed {
		payload = vals[4]
	}
	p, ok := payload.(string)
	if !ok {
		return r, nil
	}
	r.found = true
	if r.payload, err = s.decode(bytesOf(p), r.flags); err != nil {
		return r, fmt.Errorf("corral: peek: %w: %w", errBadEntry, err)
	}
	return r, nil
}

// bytesOf returns p's bytes without copying them: p is a bulk reply that
// go-redis read into a buffer of its own (which nobody else holds) and
// returned as a string, and the bytes go to callers, who must not modify
// them (see Fetch).
func bytesOf(p string) []byte {
	if len(p) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(p), len(p))
}
