package slots

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The vectors of the Redis Cluster specification ("Keys distribution
// model", "Hash tags").
func TestOfSpecVectors(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf(`crc16("123456789") = %#04x, want 0x31C3`, got)
	}
	if got := Of("123456789"); got != 12739 {
		t.Fatalf(`Of("123456789") = %d, want 12739 (0x31C3 %% 16384)`, got)
	}
	if a, b := Of("{user1000}.following"), Of("{user1000}.followers"); a != b || a != Of("user1000") {
		t.Fatalf("{user1000}.following in %d, {user1000}.followers in %d, user1000 in %d: want one slot", a, b, Of("user1000"))
	}
	for _, c := range []struct{ key, hashed string }{
		{"foo{}{bar}", "foo{}{bar}"}, // an empty tag: the whole key
		{"foo{{bar}}zap", "{bar"},    // from the first '{' to the first '}'
		{"foo{bar}{zap}", "bar"},     // the first tag only
		{"foo{bar", "foo{bar"},       // no '}': the whole key
		{"foo}bar{", "foo}bar{"},     // no '}' after the '{'
		{"", ""},
	} {
		if got, want := Of(c.key), int(crc16(c.hashed))%Count; got != want {
			t.Errorf("Of(%q) = %d, want %d (the slot of %q)", c.key, got, want, c.hashed)
		}
	}
	// Well-known answers of CLUSTER KEYSLOT.
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "hello": 866} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every slot has a tag of letters and digits of at most three characters
// that maps back to it, and the table is the same on every call.
func TestTagMapsBack(t *testing.T) {
	for s := range Count {
		tag := Tag(s)
		if tag == "" || len(tag) > 3 || strings.Trim(tag, alphabet) != "" {
			t.Fatalf("Tag(%d) = %q, want 1 to 3 letters or digits", s, tag)
		}
		if got := Of("{" + tag + "}"); got != s {
			t.Fatalf("Tag(%d) = %q, in slot %d", s, tag, got)
		}
		if got := Of("prefix:{" + tag + "}:suffix"); got != s {
			t.Fatalf("a key tagged %q is in slot %d, want %d", tag, got, s)
		}
	}
	// The first candidates, which the fixed order makes part of the
	// contract: "0" is the first string of alphabet, and so its slot's tag.
	if got := Tag(Of("0")); got != "0" {
		t.Errorf("Tag(Of(\"0\")) = %q, want \"0\"", got)
	}
}

func TestTagPanicsOutOfRange(t *testing.T) {
	for _, s := range []int{-1, Count, Count + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Tag(%d) did not panic", s)
				}
			}()
			Tag(s)
		}()
	}
}

// Of agrees with a real Redis Cluster's CLUSTER KEYSLOT, for random keys
// (braces and binary bytes included) and for the tags of random slots.
func TestOfMatchesRedis(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	node := c.Nodes[0].Client()
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var keys []string
	for range 2000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			switch rng.IntN(6) {
			case 0:
				b[i] = '{'
			case 1:
				b[i] = '}'
			default:
				b[i] = byte(rng.IntN(256))
			}
		}
		keys = append(keys, string(b))
	}
	for range 200 {
		keys = append(keys, "{"+Tag(rng.IntN(Count))+"}")
	}

	cmds := make([]*redis.IntCmd, len(keys))
	if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ClusterKeySlot(ctx, k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, want := Of(k), int(cmds[i].Val()); got != want {
			t.Errorf("Of(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

func BenchmarkOf(b *testing.B) {
	for _, key := range []string{"user:1000", "corral:{user1000}:profile:v2"} {
		b.Run(key, func(b *testing.B) {
			for b.Loop() {
				Of(key)
			}
		})
	}
}
