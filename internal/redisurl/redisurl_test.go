package redisurl

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Redact hides every password of a --redis value, and shows no part that
// does not parse.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379":                          "redis://127.0.0.1:6379",
		"rediss://app:s3cret@h:6380/0":                    "rediss://app:xxxxx@h:6380/0",
		"redis://:s3cret@h1:1,h2:2,redis://u:s3cret@h3:3": "redis://:xxxxx@h1:1,h2:2,redis://u:xxxxx@h3:3",
		"redis://u:s3cret@h:1?addr=h2:2":                  "redis://u:xxxxx@h:1?addr=h2:2",
		"redis://u:s3cret@h:bad":                          "(unparsable URL)",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q; want %q", raw, got, want)
		}
	}
}

// Parse takes Cluster addresses both ways, and its errors never hold the
// password.
func TestParse(t *testing.T) {
	ctx := context.Background()
	for raw, addrs := range map[string]string{
		"redis://u:pw@h1:1?addr=h2:2&addr=h3:3": "h1:1 h2:2 h3:3",
		"redis://u:pw@h1:1,h2:2, redis://h3:3":  "h1:1 h2:2 h3:3",
	} {
		o, err := Parse(ctx, raw)
		if err != nil || strings.Join(o.Addrs, " ") != addrs || o.Username != "u" || o.Password != "pw" {
			t.Errorf("Parse(%q) = %v %q/%q, %v; want %s", raw, o.Addrs, o.Username, o.Password, err, addrs)
		}
	}
	for _, raw := range []string{"redis://u:s3cret@h:bad", "http://u:s3cret@h:1"} {
		_, err := Parse(ctx, raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q) = %v; want an error without the password", raw, err)
		}
	}
}
