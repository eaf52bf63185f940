package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/scripts"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The protocol's scripts (internal/scripts: see their headers), run
// through the store's one door (store.go, call): their arguments are
// built, and their replies parsed, by internal/wire.

// fetch runs fetch.lua (see its header). A payload too large to come with
// the reply is read by a command of its own; Entry.Value is the payload
// decoded (decompressed).
func (s *store) fetch(ctx context.Context, n wire.Names, a fetchArgs) (wire.FetchReply, error) {
	var asked time.Time                // when this try was sent, at the latest
	granted := func(cmd redis.Cmder) { // the lease held from the moment its grant is read
		if r, err := wire.ParseFetch(cmd.(*redis.Cmd).Val()); err == nil && (r.Kind == wire.Load || r.Refresh) && a.granted != nil {
			a.granted(r, a.skip, time.Now(), asked)
		}
	}
	keys, argv := a.group.Keys(n.Entry, n.Lease), wire.FetchArgv(a.token, a.leaseTTL, a.x, a.skip, a.version, a.stale, a.group, a.echo)
	for range 3 {
		asked = time.Now()
		res, err := s.callAs(ctx, false, granted, scripts.Fetch, keys, 0, argv...)
		if err != nil {
			return wire.FetchReply{}, errorf("fetch: %w", err)
		}
		r, err := wire.ParseFetch(res)
		if err != nil {
			return wire.FetchReply{}, errorf("fetch: %w", err)
		}
		if (r.Kind == wire.Hit || r.Kind == wire.Stale) && r.Payload == nil {
			payload, flags, ok, err := s.read(ctx, n, r.Size)
			if err != nil {
				return wire.FetchReply{}, errorf("fetch: %w", err)
			}
			if !ok {
				continue // replaced by an entry of another format, or gone: decide again
			}
			r.Payload, r.Flags.Kind, r.Flags.Compressed = payload, flags.Kind, flags.Compressed
		}
		if r.Payload, err = s.decode(r.Payload, r.Flags); err != nil {
			return r, errorf("fetch %q: %w: %w", n.Entry, errBadEntry, err)
		}
		return r, nil
	}
	return wire.FetchReply{}, errorf("fetch %q: the entry kept changing while it was read", n.Entry)
}

// fetchArgs are fetch.lua's arguments (see its header).
type fetchArgs struct {
	token    string
	leaseTTL time.Duration
	x        float64                                                  // the XFetch draw
	skip     int64                                                    // the soft expiry of an entry the caller could not use; 0 for none
	version  string                                                   // the caller's codec version; "" for any
	stale    int64                                                    // the soft expiry of an entry to take as stale (a tag's soft invalidation); 0 for none
	granted  func(r wire.FetchReply, skip int64, at, asked time.Time) // told of a reply granting the lease as it is read (at), and when its fetch was sent
	group    wire.Group                                               // the group lease whose member the lease is; zero for none
	echo     string                                                   // the caller's echo channel (notify's Listen); "" for none
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
	return res != wire.CommitRejected, err
}

// holder is what a load's commit stands on: its lease's token, and what
// commit.lua needs to tell that lease evicted from revoked (see its
// header).
type holder struct {
	token    string
	deadline int64 // server ms: the lease cannot have expired before; 0 when the token must hold it
	seen     int64 // the soft expiry of the entry the lease was taken over; 0 for none
	// softBy is the latest soft expiry (server ms) the entry may get: for
	// a soft TTL the loader set, when it ends on the server's clock,
	// estimated from the lease's grant so that it never runs late. Then
	// the time the commit spends on its way to Redis is not added to the
	// TTL. 0 for none: the TTL counts from when the commit runs.
	softBy int64
}

// commitHeld is commit, for a load whose lease may have been evicted: h
// says until when its lease was surely alive, and which entry it was
// taken over, so that commit.lua can tell an eviction from a revocation.
func (s *store) commitHeld(ctx context.Context, n wire.Names, h holder, w entryWrite) (wire.Commit, error) {
	s.leases.Halt(h.token) // the lease ends here: renewed no more (a no-op once halted, or for a Set)
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return wire.CommitRejected, err
	}
	payload, flags := s.encode(w)
	soft, hard := w.ttls()
	res, err := s.call(ctx, scripts.Commit, []string{n.Entry, n.Lease, n.Notice}, len(payload), wire.CommitArgs{
		Token: h.token, Payload: payload, Flags: flags, Soft: soft, Hard: hard, Took: w.took, Publish: pub,
		Inline: s.inline, Version: s.version, LeaseTTL: s.leaseTTL, Deadline: h.deadline, Seen: h.seen, SoftBy: h.softBy,
		Born: w.born, Tags: w.tags,
	}.Argv()...)
	if err != nil {
		return wire.CommitRejected, errorf("commit: %w", err)
	}
	wr, err := s.written(res)
	switch {
	case err != nil:
		return wire.CommitRejected, errorf("commit: %w", err)
	case wire.Commit(wr.Status) == wire.CommitRefused && transport.ClassifyReply(wr.Refusal)&transport.Denied != 0:
		// The script's write was refused for want of a right, not of memory.
		return wire.CommitRejected, errorf("commit %q: %w: %s", n.Entry, ErrPermission, wr.Refusal)
	case wire.Commit(wr.Status) == wire.CommitRefused:
		if s.hooks.refusedWrite != nil {
			s.hooks.refusedWrite(wr.Refusal)
		}
		return wire.CommitRejected, errorf("commit %q: %w: %s", n.Entry, ErrWriteRefused, wr.Refusal)
	}
	return wire.Commit(wr.Status), nil
}

// written decodes the reply of a script that writes and publishes
// (wire.Written). A notice that could not be published (no channel rights)
// does not undo the write: it is reported to hooks.noticeFailed.
func (s *store) written(res any) (wire.Written, error) {
	w, err := wire.ParseWritten(res)
	if err == nil && w.NoticeError != "" && s.hooks.noticeFailed != nil {
		s.hooks.noticeFailed(errors.New(w.NoticeError))
	}
	return w, err
}

// releaseArgs say how release.lua hands a lease back.
type releaseArgs struct {
	notice string        // published when not empty
	hold   time.Duration // > 0: keep refreshes off this long (a backoff marker replaces the lease)
	mark   bool          // flag the entry: its last refresh failed
}

// release hands the lease back if token still holds it (release.lua).
func (s *store) release(ctx context.Context, n wire.Names, token string, a releaseArgs) (bool, error) {
	s.leases.Halt(token) // the lease ends here: a renewal landing later could take it again
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	res, err := s.call(ctx, scripts.Release, []string{n.Lease, n.Notice, n.Entry}, 0, wire.ReleaseArgv(token, pub, a.notice, a.hold, a.mark)...)
	if err != nil {
		return false, errorf("release lease: %w", err)
	}
	wr, err := s.written(res)
	if err != nil {
		return false, errorf("release lease: %w", err)
	}
	return wr.Status == 1, nil
}

// delete invalidates n (delete.lua).
func (s *store) delete(ctx context.Context, n wire.Names) error {
	return s.deleteAs(ctx, n, false)
}

// deleteAs is delete; recovery as for callAs.
func (s *store) deleteAs(ctx context.Context, n wire.Names, recovery bool) error {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return err
	}
	res, err := s.callAs(ctx, recovery, nil, scripts.Delete, []string{n.Entry, n.Lease, n.Notice}, 0, pub, wire.MS(s.leaseTTL))
	if err == nil {
		_, err = s.written(res)
	}
	if err != nil {
		return errorf("delete: %w", err)
	}
	return nil
}

// expire expires n softly (expire.lua).
func (s *store) expire(ctx context.Context, n wire.Names) error {
	pub, err := s.publishCommand(ctx)
	if err == nil {
		var res any
		if res, err = s.call(ctx, scripts.Expire, []string{n.Entry, n.Lease, n.Notice}, 0, pub, wire.MS(s.leaseTTL)); err == nil {
			_, err = s.written(res)
		}
	}
	if err != nil {
		return errorf("expire: %w", err)
	}
	return nil
}

// get reads an entry without taking a lease: its value (decoded), and
// what it caches, when its load began and its tags (r's Flags.Kind, Born
// and Tags). ok is false when there is no entry.
func (s *store) get(ctx context.Context, n wire.Names) (value []byte, r wire.ReadReply, ok bool, err error) {
	res, err := s.call(ctx, scripts.Read, []string{n.Entry}, 0, wire.LargeReply)
	if errors.Is(err, redis.Nil) {
		return nil, r, false, nil
	}
	if err == nil {
		r, err = wire.ParseRead(res)
	}
	if err != nil {
		return nil, r, false, errorf("get: %w", err)
	}
	payload := r.Payload
	if payload == nil {
		if payload, r.Flags, ok, err = s.read(ctx, n, r.Size); err != nil || !ok {
			return nil, r, false, err
		}
	}
	if value, err = s.decode(payload, r.Flags); err != nil {
		return nil, r, false, errorf("get %q: %w", n.Entry, err)
	}
	return value, r, true, nil
}
