package redisproc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redisproc"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRestartKeepsAddressLosesData: a killed server refuses connections; a
// restarted one answers on the same address, empty.
func TestRestartKeepsAddressLosesData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisproc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr
	s.Kill()
	if s.Running() {
		t.Error("Running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("a killed server answered PING")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || !s.Running() || s.URL() != "redis://"+addr {
		t.Errorf("after Restart: addr %s (was %s), running %v, URL %s", s.Addr, addr, s.Running(), s.URL())
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after restart = %v, want redis.Nil (an empty server)", err)
	}
	s.Stop()
	s.Stop() // a second Stop does nothing
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := redisproc.Start(context.Background(), t.TempDir()); !errors.Is(err, redisproc.ErrNotInstalled) {
		t.Errorf("Start without redis-server = %v, want ErrNotInstalled", err)
	}
}
