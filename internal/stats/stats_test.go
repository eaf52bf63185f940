package stats

import "testing"

// TestSnapshot checks that each counter reaches its own field of Values.
func TestSnapshot(t *testing.T) {
	var c Counters
	c.Joined.Add(1)
	c.Queued.Add(2)
	c.Subscribed()
	c.Unsubscribed()
	c.RedisError()
	c.RedisError()
	v := c.Snapshot()
	if v.Joined != 1 || v.InvalidationsQueued != 2 || v.Subscribes != 1 || v.Unsubscribes != 1 || v.RedisErrors != 2 || v.Loads != 0 {
		t.Errorf("Snapshot = %+v", v)
	}
}
