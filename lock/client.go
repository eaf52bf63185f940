package lock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"reflect"
	"time"

	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The protocol is in the .lua files; client.go and lock.go send them.
var (
	//go:embed scripts/obtain.lua
	obtainSrc string
	//go:embed scripts/refresh.lua
	refreshSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/ttl.lua
	ttlSrc string

	obtainScript  = redis.NewScript(obtainSrc)
	refreshScript = redis.NewScript(refreshSrc)
	releaseScript = redis.NewScript(releaseSrc)
	ttlScript     = redis.NewScript(ttlSrc)
)

// Client obtains locks on one Redis deployment: a single server, a master
// managed by Sentinel, or a Cluster. It is safe for concurrent use and owns
// nothing that needs closing.
type Client struct {
	rdb  redis.UniversalClient
	opts Options
}

// New returns a Client that obtains locks through rdb. opts may be nil for
// all defaults.
func New(rdb redis.UniversalClient, opts *Options) (*Client, error) {
	if rdb == nil {
		return nil, ErrNilClient
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, ErrNilClient // a typed nil, such as (*redis.Client)(nil)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{rdb: rdb, opts: o}, nil
}

// names are the Redis names of one lock key (see the package doc).
type names struct {
	lock, counter string
}

func (c *Client) names(key string) names {
	tag := wire.SlotTag(key)
	return names{
		lock:    c.opts.Prefix + ":l:{" + tag + "}:" + key,
		counter: c.opts.Prefix + ":f:{" + tag + "}:" + key,
	}
}

// abandonTimeout bounds the clean-up after an Obtain whose try failed with
// an error: that try may have taken the lock all the same.
const abandonTimeout = time.Second

// Obtain takes the lock named key for ttl and returns it with a fencing
// token larger than any earlier holder's (see the package doc for when that
// holds). While another holder has the lock, Obtain follows Options.Retry:
// it waits and tries again, or gives up with an error that wraps
// ErrNotObtained, also when ctx ends first (the error then matches ctx.Err()
// too). Redis errors are returned at once, wrapped. A try that failed, or
// that was on its way when ctx ended, may have taken the lock all the same:
// Obtain then releases it before returning, which takes at most a second
// more (past ctx's end too), or it expires after ttl.
//
// ttl must be at least MinTTL; it is rounded down to whole milliseconds.
// A key may be any non-empty string, binary included, up to Redis's limit
// (512 MB), and errors quote at most its first 64 bytes. A nil ctx panics,
// here and in Lock's methods. Locks are not reentrant: a second Obtain of a
// held key waits like any other, whoever asks.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	mustContext(ctx)
	if key == "" {
		return nil, ErrInvalidKey
	}
	if ttl < MinTTL {
		return nil, fmt.Errorf("%w: %v (at least %v)", ErrInvalidTTL, ttl, MinTTL)
	}
	n := c.names(key)
	token := newToken()
	for tries := 1; ; tries++ {
		if err := ctx.Err(); err != nil {
			return nil, notObtained(key, tries-1, err)
		}
		sent := time.Now()
		res, err := obtainScript.Run(ctx, c.rdb, []string{n.lock, n.counter}, token, ttl.Milliseconds()).Int64Slice()
		if err == nil && (len(res) == 0 || res[0] == 1 && len(res) < 3 || res[0] == 0 && len(res) < 2) {
			err = fmt.Errorf("unexpected reply %v from obtain.lua", res)
		}
		if err != nil {
			c.abandon(ctx, n, token)
			if ctx.Err() != nil {
				return nil, notObtained(key, tries, ctx.Err())
			}
			return nil, fmt.Errorf("lock: obtain %s: %w", quote(key), err)
		}
		if res[0] == 1 {
			return c.newLock(key, n, token, res[1], ttl, sent), nil
		}
		wait, again := c.opts.Retry(tries)
		if !again {
			return nil, fmt.Errorf("%w: %s is held by another holder (%d tries)", ErrNotObtained, quote(key), tries)
		}
		if res[1] >= 0 { // the holder's lock expires in res[1] ms (rounded down)
			wait = min(wait, time.Duration(res[1]+1)*time.Millisecond) // free then, unless refreshed
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, notObtained(key, tries, ctx.Err())
		}
	}
}

// mustContext panics on a nil ctx, as the standard library does, with a
// message that says where.
func mustContext(ctx context.Context) {
	if ctx == nil {
		panic("lock: nil Context")
	}
}

func notObtained(key string, tries int, cause error) error {
	return fmt.Errorf("%w: %s: gave up after %d tries: %w", ErrNotObtained, quote(key), tries, cause)
}

// abandon releases the lock if a failed try took it after all, so it does
// not stay held, by nobody, until its TTL runs out.
func (c *Client) abandon(ctx context.Context, n names, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_ = releaseScript.Run(ctx, c.rdb, []string{n.lock}, token).Err()
}

// newToken returns a random 128-bit token in hex: the holder's identity,
// which no other holder can guess.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
