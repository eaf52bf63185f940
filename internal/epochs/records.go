package epochs

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/scripts"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/warn"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The records in Redis (internal/wire's ClearName and TagName), written by
// this package's scripts (*.lua here, see their headers) and read with
// one MGET, all on the prefix's slot.

var (
	//go:embed mark.lua
	markSrc string
	//go:embed tagged.lua
	taggedSrc string
	//go:embed reclaim.lua
	reclaimSrc string
	//go:embed read.lua
	readSrc string
	//go:embed sweep.lua
	sweepSrc string
	//go:embed peekread.lua
	peekReadSrc string // defines peekread
	//go:embed peekstart.lua
	peekStartSrc string

	markScript    = redis.NewScript(markSrc)
	taggedScript  = redis.NewScript(taggedSrc)
	reclaimScript = redis.NewScript(reclaimSrc)
	readScript    = redis.NewScript(readSrc)
	sweepScript   = redis.NewScript(sweepSrc)
	peekRead      = redis.NewScript(peekReadSrc + "return peekread(#KEYS, ARGV)\n")
	peekStart     = redis.NewScript(scripts.StartSrc + peekReadSrc + peekStartSrc)
)

// RecordMin is the least a tag's record lives once written by an
// invalidation: longer than any load under way then can run, so that the
// load finds the record when it stores (tagged.lua).
const RecordMin = 24 * time.Hour

// Records runs the scripts and reads of a prefix's records.
type Records struct {
	Prefix string
	// Call runs a script through the Cache's one door to Redis; recovery
	// marks it as a recovering node's own (a replayed invalidation).
	Call func(ctx context.Context, recovery bool, sc *redis.Script, keys []string, args ...any) (any, error)
	// Fold, when set, lets ReadBeside fold a read of the records and a
	// peek into one script: for a client of one server (NewFold).
	Fold *Fold
	// Start, when set with Fold, lets a folded read carry start.lua's
	// work too (peekstart.lua): a Cache's first peek.
	Start Starter
}

// A Starter is what a Cache learns of its server once (start.lua), for a
// folded read to carry. Claim says whether this read is to, with start's
// two flags; the read then tells Told, once, start's part of its reply, or
// nil and why there is none (a nil error when the read did not carry it
// after all, or got no reply of the script).
type Starter interface {
	Claim() (sharded, policy string, ok bool)
	Told(reply any, err error)
}

// Fold is whether a server takes the records' read and a peek as one
// script (peekread.lua): it holds every key, so a script may read keys of
// any slot. A server that refuses it (a Cluster node behind a plain client,
// a proxy that shards: refusesFold), or fails it foldTries times in a row,
// is sent the two commands from then on.
type Fold struct {
	refused atomic.Bool
	fails   atomic.Int32 // folded reads that failed in a row
}

// On reports whether reads are folded (f is set and not given up): a
// Cache's first peek then carries its start-up (Records.Start).
func (f *Fold) On() bool { return f != nil && !f.refused.Load() }

// foldTries is how many folded reads may fail in a row, with replies
// refusesFold does not know, before the fold is given up.
const foldTries = 3

// failed records a folded read that failed; refused, or the last of
// foldTries in a row, gives the fold up.
func (f *Fold) failed(refused bool) {
	if refused || f.fails.Add(1) >= foldTries {
		f.refused.Store(true)
	}
}

// NewFold returns a Fold for rdb when it is a client of one server, and
// nil for a Cluster's or a Ring's, whose keys are spread over nodes.
func NewFold(rdb redis.UniversalClient) *Fold {
	if _, ok := rdb.(*redis.Client); ok {
		return &Fold{}
	}
	return nil
}

// Kind is what an invalidation does.
type Kind byte

const (
	HardTags Kind = 'h' // InvalidateTags
	SoftTags Kind = 's' // ExpireTags
	Clear    Kind = 'c' // Clear
)

// names returns the records of tags.
func (r Records) names(tags []string) []string {
	keys := make([]string, len(tags))
	for i, tag := range tags {
		keys[i] = wire.TagName(r.Prefix, tag)
	}
	return keys
}

// Mark is what an invalidation wrote (mark.lua), in server µs: the clock
// when it ran, the Clear's record (its epoch, and the last tag
// invalidation's), and each tag's record, hard and soft.
type Mark struct {
	Now, Clear, LastTag int64
	Hard, Soft          []int64
}

// MarkAs records an invalidation (mark.lua): of tags (hard or soft), or of
// every entry (Clear, tags nil); recovery as for Call.
func (r Records) MarkAs(ctx context.Context, recovery bool, kind Kind, tags []string) (Mark, error) {
	keys := []string{wire.ClearName(r.Prefix)}
	if kind != Clear {
		keys = append(keys, r.names(tags)...)
	}
	res, err := r.Call(ctx, recovery, markScript, keys, string(kind), wire.MS(RecordMin))
	if err != nil {
		return Mark{}, err
	}
	a, _ := res.([]any)
	if len(a) != 3+2*len(tags) {
		return Mark{}, fmt.Errorf("unexpected reply %#v", res)
	}
	var mk Mark
	mk.Now, _ = a[0].(int64)
	mk.Clear, _ = a[1].(int64)
	mk.LastTag, _ = a[2].(int64)
	for i := range tags {
		h, _ := a[3+2*i].(int64)
		s, _ := a[4+2*i].(int64)
		mk.Hard, mk.Soft = append(mk.Hard, h), append(mk.Soft, s)
	}
	return mk, nil
}

// Tagged makes the records of tags live at least ttl (tagged.lua), before
// an entry tagged with them and living ttl is stored.
func (r Records) Tagged(ctx context.Context, tags []string, ttl time.Duration) error {
	_, err := r.Call(ctx, false, taggedScript, r.readKeys(tags), wire.MS(ttl+time.Minute))
	return err
}

// Read reads the Clear's record and those of tags, and the node's clock
// in microseconds (read.lua), in one round trip.
func (r Records) Read(ctx context.Context, tags []string) (clear string, vals []string, now int64, err error) {
	res, err := r.Call(ctx, false, readScript, r.readKeys(tags))
	if err != nil {
		return "", nil, 0, err
	}
	return parseRead(res, len(tags))
}

// ReadOp is Read as an op for the Cache's pipeline, to send with another
// (a peek: one batch, one round trip); done gets its result.
func (r Records) ReadOp(ctx context.Context, tags []string, done func(clear string, vals []string, now int64, err error)) *transport.Op {
	keys := r.readKeys(tags)
	return &transport.Op{Ctx: ctx, Key: keys[0], ReadOnly: true, Clocked: readClock,
		Build:   func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return readScript.EvalSha(ctx, p, keys) },
		Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return readScript.Eval(ctx, p, keys) },
		Finish: func(res transport.Result) {
			if res.Err == nil {
				res.Err = res.Cmd.Err()
			}
			if res.Err != nil {
				done("", nil, 0, res.Err)
				return
			}
			done(parseRead(res.Cmd.(*redis.Cmd).Val(), len(tags)))
		},
	}
}

// ReadBeside returns the ops that read the records of tags, for done, and
// the peek o (an HMGET of a hash's fields, in o.Read): one script for both
// (peekread.lua) while the server takes it (Fold), else ReadOp and o. Sent
// as a batch, either way costs one round trip; folded, it is one command,
// which carries the Cache's start-up (peekstart.lua) when Start claims it.
// A folded read that gets an error reply is sent again as the two, with
// resend: the error is then each command's own (a key of another type at
// the entry's name, a right missing).
func (r Records) ReadBeside(ctx context.Context, tags []string, done func(clear string, vals []string, now int64, err error), o *transport.Op, resend func(...*transport.Op)) []*transport.Op {
	if r.Fold == nil || r.Fold.refused.Load() || len(o.Read) < 3 {
		return []*transport.Op{r.ReadOp(ctx, tags, done), o}
	}
	entry, _ := o.Read[1].(string)
	f := &folded{r: r, ctx: ctx, tags: tags, done: done, o: o, resend: resend, sc: peekRead, told: func(any, error) {}}
	keys, fields := append(r.readKeys(tags), entry), o.Read[2:]
	if r.Start != nil {
		if sharded, policy, ok := r.Start.Claim(); ok {
			keys = append(keys, wire.ProbeName(r.Prefix))
			fields = append([]any{sharded, policy}, fields...)
			f.sc, f.told = peekStart, r.Start.Told
		}
	}
	return []*transport.Op{{Ctx: ctx, Key: keys[0], ReadOnly: true, Script: f.sc, Clocked: readClock,
		Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return f.sc.EvalSha(ctx, p, keys, fields...)
		},
		Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return f.sc.Eval(ctx, p, keys, fields...)
		},
		Finish: f.finish,
	}}
}

// folded is ReadBeside's folded read: its script (peekread.lua, or
// peekstart.lua with told Start's Told), and what its reply answers.
type folded struct {
	r      Records
	ctx    context.Context
	tags   []string
	done   func(clear string, vals []string, now int64, err error)
	o      *transport.Op
	resend func(...*transport.Op)
	sc     *redis.Script
	told   func(reply any, err error)
}

// finish answers the read of the records (done) and the peek (o) from the
// folded read's result res, or sends them again as two commands.
func (f *folded) finish(res transport.Result) {
	if res.Err == nil {
		res.Err = res.Cmd.Err()
	}
	switch {
	case res.Err != nil && transport.Says(res.Err, transport.Reply):
		// A plain error reply counts towards giving the fold up; one
		// that says more (a server loading, a right missing, a key of
		// another type at the entry's name) is the commands' own.
		if refusesFold(res.Err) || transport.Classify(res.Err) == transport.Reply && !warn.IsWrongType(res.Err) {
			f.r.Fold.failed(refusesFold(res.Err))
		}
		f.told(nil, nil)
		f.resend(f.r.ReadOp(f.ctx, f.tags, f.done), f.o)
		return
	case res.Err != nil:
		f.told(nil, res.Err)
		f.done("", nil, 0, res.Err)
		f.o.Answer(transport.Result{Err: res.Err})
		return
	}
	a, _ := res.Cmd.(*redis.Cmd).Val().([]any)
	clear, vals, now, err := "", []string(nil), int64(0), fmt.Errorf("unexpected reply %#v", a)
	want := 3 // peekread.lua's reply; peekstart.lua's has start's too
	if f.sc == peekStart {
		want = 4
	}
	if len(a) == want {
		clear, vals, now, err = parseRead(a[:2], len(f.tags))
	}
	if err != nil { // not peekread.lua's reply: a proxy's, say; the commands apart
		f.r.Fold.failed(false)
		f.told(nil, nil)
		f.resend(f.r.ReadOp(f.ctx, f.tags, f.done), f.o)
		return
	}
	if want == 4 {
		f.told(a[3], nil) // before the peek's callers hear of it: a miss needs the mode
	}
	f.r.Fold.fails.Store(0)
	f.done(clear, vals, now, nil)
	got, _ := a[2].([]any)
	strs := make([]string, len(got))
	for i, v := range got {
		strs[i], _ = v.(string) // a missing field is "", as HMGET's StringSliceCmd has it
	}
	cmd := redis.NewStringSliceCmd(f.ctx)
	cmd.SetVal(strs)
	f.o.Answer(transport.Result{Cmd: cmd, Now: time.UnixMicro(now).UnixMilli()})
}

// refusesFold reports whether err, a folded read's error reply, says the
// server takes no script over keys of several slots, or no script at all:
// the fold is not tried again. Other replies (a key of another type, a
// right missing, a server loading or busy, a password refused) are the
// commands' own, and change nothing.
func refusesFold(err error) bool {
	msg := err.Error()
	for _, s := range []string{"CROSSSLOT", "non local key", "non-local key", "MOVED", "ASK ", "unknown command", "ERR unknown"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// readClock is the server's clock read.lua or peekread.lua read (ReadOp's
// and ReadBeside's Clocked): the peeks sent behind the read need no TIME
// of their own.
func readClock(cmd redis.Cmder) (time.Time, bool) {
	c, ok := cmd.(*redis.Cmd)
	if !ok || c.Err() != nil {
		return time.Time{}, false
	}
	a, _ := c.Val().([]any)
	if len(a) == 3 || len(a) == 4 {
		a = a[:2] // peekread.lua's: read.lua's, and the entry's fields (and peekstart.lua's, start's)
	}
	us, ok := readNow(a)
	return time.UnixMicro(us), ok
}

// readNow is the clock in read.lua's reply res, in microseconds.
func readNow(res any) (us int64, ok bool) {
	a, _ := res.([]any)
	if len(a) != 2 {
		return 0, false
	}
	s, _ := a[0].(string)
	us, err := strconv.ParseInt(s, 10, 64)
	return us, err == nil && us > 0
}

// readKeys are read.lua's KEYS for tags.
func (r Records) readKeys(tags []string) []string {
	return append([]string{wire.ClearName(r.Prefix)}, r.names(tags)...)
}

// parseRead decodes read.lua's reply for n tags.
func parseRead(res any, n int) (clear string, vals []string, now int64, err error) {
	a, _ := res.([]any)
	var got []any
	if len(a) == 2 {
		got, _ = a[1].([]any)
	}
	if len(got) != n+1 {
		return "", nil, 0, fmt.Errorf("unexpected reply %#v", res)
	}
	now, _ = readNow(res)
	vals = make([]string, n)
	for i := range n {
		vals[i], _ = got[i+1].(string)
	}
	clear, _ = got[0].(string)
	return clear, vals, now, nil
}
