package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// A lease token's first byte says how its holder announces the end of its
// load, so that a waiter that cannot hear that (it listens on the other kind
// of pub/sub, or neither has channel rights) re-checks on its own. Tokens of
// earlier releases are plain hex, and announce as this process would.
const (
	AnnounceSharded byte = 's' // SPUBLISH
	AnnouncePlain   byte = 'p' // PUBLISH
	AnnounceNone    byte = 'n' // the holder may not publish: no notice comes
)

// NewToken returns a new lease token: 16 random bytes in hex, after mark
// (AnnounceSharded, AnnouncePlain or AnnounceNone), or plain hex when mark
// is 0 (the process does not know yet how it announces). Hex digits include
// none of the marks, so Announces tells the two apart.
func NewToken(mark byte) string {
	var b [16]byte
	rand.Read(b[:])
	if mark == 0 {
		return hex.EncodeToString(b[:])
	}
	t := make([]byte, 1+hex.EncodedLen(len(b)))
	t[0] = mark
	hex.Encode(t[1:], b[:])
	return string(t)
}

// Announces returns how the holder of a lease whose token is lease
// announces (AnnounceSharded, AnnouncePlain or AnnounceNone), or 0 when the
// token does not say (an earlier release's, or none was read).
func Announces(lease string) byte {
	if lease == "" {
		return 0
	}
	switch lease[0] {
	case AnnounceSharded, AnnouncePlain, AnnounceNone:
		return lease[0]
	}
	return 0
}

// Written is the reply of a script that writes and publishes (commit.lua,
// release.lua, delete.lua): {status, notice error[, refusal]}.
type Written struct {
	Status int64
	// NoticeError is why publishing the notice failed (NOPERM without
	// channel rights), or "": the write stands either way.
	NoticeError string
	// Refusal is Redis's error when it refused to write (commit.lua's
	// CommitRefused), or "".
	Refusal string
}

// ParseWritten decodes the reply of a script that writes and publishes.
func ParseWritten(res any) (Written, error) {
	a, _ := res.([]any)
	if len(a) != 2 && len(a) != 3 {
		return Written{}, fmt.Errorf("unexpected reply %#v", res)
	}
	var w Written
	var ok bool
	if w.Status, ok = a[0].(int64); !ok {
		return Written{}, fmt.Errorf("unexpected reply %#v", res)
	}
	w.NoticeError, _ = a[1].(string)
	if len(a) == 3 {
		w.Refusal, _ = a[2].(string)
	}
	return w, nil
}

// Commit is the status of commit.lua's reply.
type Commit int64

const (
	CommitRejected Commit = 0  // the token no longer holds the lease
	CommitStored   Commit = 1  // stored (now, or by an earlier try, known by field t)
	CommitEvicted  Commit = 2  // stored, although the lease was missing (evicted)
	CommitRefused  Commit = -1 // Redis refuses writes (OOM, READONLY): see Written.Refusal
)

// Renewal is renew.lua's reply.
type Renewal int64

const (
	Renewed      Renewal = 1  // extended
	RenewRetaken Renewal = 2  // extended, after finding the lease missing (evicted)
	RenewLost    Renewal = 0  // the token no longer holds the lease
	RenewLate    Renewal = -1 // reached the server after its deadline: dropped
)
