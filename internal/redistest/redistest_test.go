package redistest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerKillRestart(t *testing.T) {
	s := Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatal("a restarted server kept data")
	}
}

func TestProxy(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}

	p.CutOnReply([]byte("hello"))
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("the cut reply arrived")
	}
	if v := c.Get(ctx, "k").Val(); v != "hello" {
		t.Fatalf("after the cut, Get = %q (the cut is once only)", v)
	}

	held, release := p.HoldReply([]byte("hello"))
	got := make(chan string, 1)
	go func() { got <- c.Get(ctx, "k").Val() }()
	<-held
	select {
	case v := <-got:
		t.Fatalf("the held reply arrived: %q", v)
	default:
	}
	release()
	if v := <-got; v != "hello" {
		t.Fatalf("once released, Get = %q", v)
	}

	p.Blackhole(true)
	start := time.Now()
	if err := c.Get(ctx, "k").Err(); err == nil || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("black hole answered: %v after %v", err, time.Since(start))
	}
	p.Blackhole(false)
	p.Reset()
	if v := c.Get(ctx, "k").Val(); v != "hello" {
		t.Fatalf("after the black hole, Get = %q", v)
	}

	if err := p.Refuse(true); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("while refusing, Get = %v; want connection refused", err)
	}
	if err := p.Refuse(false); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "k").Val(); v != "hello" {
		t.Fatalf("after refusing, Get = %q", v)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3, 1)
	cc := c.Client()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := c.MasterOf("a")
	r := c.ReplicaOf(m)
	if r == m {
		t.Fatal("a master is its own replica")
	}
}

func TestSentinel(t *testing.T) {
	s := StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Sentinel.Addr}})
	defer c.Close()
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}
