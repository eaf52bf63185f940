package main

import (
	"context"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// TestRequestScanner feeds a client's bytes in pieces of every size: the
// commands counted are the same however the writes cut them.
func TestRequestScanner(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	stream := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" +
		"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$" + "1048576\r\n" + big + "\r\n" +
		"PING\r\n" +
		"*5\r\n$7\r\nEVALSHA\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n$1\r\n1\r\n$1\r\nk\r\n$0\r\n\r\n" +
		"*1\r\n$4\r\nPING\r\n" +
		"*2\r\n$10\r\nSSUBSCRIBE\r\n$4\r\n\r\n\r\n\r\n" // an argument made of CRLFs
	want := map[string]int64{"get": 1, "set": 1, "ping": 2, "evalsha": 1, "ssubscribe": 1}
	for _, size := range []int{1, 2, 3, 7, 64, 4096, len(stream)} {
		var s requestScanner
		got := map[string]int64{}
		for b := []byte(stream); len(b) > 0; {
			n := min(size, len(b))
			s.feed(b[:n], got)
			b = b[n:]
		}
		if !maps.Equal(got, want) {
			t.Errorf("pieces of %d bytes: %v, want %v", size, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var s requestScanner
		got := map[string]int64{}
		for b := []byte(stream); len(b) > 0; {
			n := min(1+r.IntN(100), len(b))
			s.feed(b[:n], got)
			b = b[n:]
		}
		if !maps.Equal(got, want) {
			t.Fatalf("random pieces: %v, want %v", got, want)
		}
	}
}

// TestWireCount counts what go-redis and rueidis clients send to a real
// redis-server: a pipeline counts each of its commands, a script call one
// (INFO commandstats counts the commands the script runs inside too), and a
// SUBSCRIBE on a pub/sub connection counts, and so does a CONFIG GET a
// system sends (the server's count leaves CONFIG out: the harness's own).
func TestWireCount(t *testing.T) {
	ctx := context.Background()
	srv, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	wc := &wireCount{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: wc.dial})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sent := commandStats(wc.snapshot())
	before, err := srv.commandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rdb.Get(ctx, "k")
	rdb.ConfigGet(ctx, "maxmemory-policy") // a system's own CONFIG GET (corral's policy check) counts on the wire
	pipe := rdb.Pipeline()
	pipe.Set(ctx, "a", "1", 0)
	pipe.Set(ctx, "b", strings.Repeat("v", 100_000), 0)
	pipe.Get(ctx, "a")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(`redis.call('SET', KEYS[1], 'x'); redis.call('INCR', KEYS[2]); return 1`)
	if err := script.Run(ctx, rdb, []string{"c", "d"}).Err(); err != nil { // EVALSHA, then EVAL (NOSCRIPT)
		t.Fatal(err)
	}
	ps := rdb.Subscribe(ctx, "ch")
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	_ = ps.Close()

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DialCtxFn: wc.dialRueidis, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Do(ctx, rc.B().Set().Key("e").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	rc.Close()

	got, total := commandStats(wc.snapshot()).sub(sent, setUp)
	want := map[string]int64{"get": 2, "set": 3, "evalsha": 1, "eval": 1, "subscribe": 1, "config": 1}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s sent %d times, want %d (all: %v)", name, got[name], n, got)
		}
	}
	if total < 9 {
		t.Errorf("total %d, want at least 9: %v", total, got)
	}
	after, err := srv.commandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	server, _ := after.sub(before, notCounted)
	if server["incr"] != 1 || server["set"] != 4 {
		t.Errorf("commandstats: the script's SET and INCR should count there: %v", server)
	}
	if got["incr"] != 0 {
		t.Errorf("the script's INCR was counted as sent: %v", got)
	}
}
