package redisurl

import (
	"context"
	"errors"
	"net/url"
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
		"redis://u:s3c/ret@h:1":                           "(unparsable URL)",
		"redis://u:s3c,ret@h1:1":                          "(unparsable URL)",
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
	for raw, want := range map[string]string{
		"redis://u:s3cret@h:bad":  `invalid port ":bad" after host`,
		"http://u:s3cret@h:1":     `not a Redis URL: its scheme is "http"`,
		"redis://u:s3cret@h:1/x":  `invalid database number: "x"`,
		"redis://u:s3cret@h:1?x=": "unexpected option: x",
		"redis://h:1?a@b=1":       ErrUnparsable.Error(),
	} {
		_, err := Parse(ctx, raw)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q) = %v; want an error with %q, without the password", raw, err, want)
		}
	}
}

// specialPasswords are passwords with characters a URL's user information
// must have percent-encoded; each piece between them is distinct.
var specialPasswords = []string{
	"Kx9vQ2mZ7pLw/Rt4", "Ab3dEf6h#Jk8mNp", "Qr5tUv7w?Xy2zB", "7351/Wq8eRt", "7351#Wq8eRt", "7351?Wq8eRt",
	"Hq3pLm9s,Zt4vNk6", "Bn7c%zzDf2g", "Pw4e@Ty7u/Io9p", "Gh6j Kl3m", "Mn8b/Vc5x#Za1s?Lk4j", "Yt5r:Ee2w/Qq9p",
}

// secretPieces returns the pieces of pw between its special characters.
func secretPieces(pw string) []string {
	return strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("/#?,%@ :", r) })
}

// urlsWith returns --redis values with pw in their user information,
// unencoded, in each form Parse takes.
func urlsWith(pw string) []string {
	return []string{
		"redis://app:" + pw + "@redis.internal:6380",
		"rediss://app:" + pw + "@redis.internal:6380/0",
		"redis://:" + pw + "@127.0.0.1:1",
		"redis://app:" + pw + "@h1:1?addr=h2:2",
		"redis://app:" + pw + "@h1:1,h2:2",
		"redis://h0:1,redis://app:" + pw + "@h1:1",
		"app:" + pw + "@redis.internal:6380",
	}
}

// A password with a /, #, ?, comma, % or space unencoded: Parse fails with
// ErrUnparsable, and neither its error nor Redact shows any piece of the
// password (net/url's errors quoted "invalid port \":Kx9vQ2mZ7pLw\"").
// Percent-encoded, the same password parses.
func TestParseSpecialPasswords(t *testing.T) {
	ctx := context.Background()
	for _, pw := range specialPasswords {
		for _, raw := range urlsWith(pw) {
			o, err := Parse(ctx, raw)
			shown := Redact(raw)
			if err != nil {
				shown += " " + err.Error()
			} else if o.Password != pw {
				t.Errorf("Parse(%q) = password %q, nil; want an error or the password", raw, o.Password)
			}
			for _, piece := range secretPieces(pw) {
				if strings.Contains(shown, piece) {
					t.Errorf("Parse or Redact of %q shows %q: %s", raw, piece, shown)
				}
			}
		}
		raw := "redis://app:" + url.PathEscape(pw) + "@127.0.0.1:1,127.0.0.1:2"
		if o, err := Parse(ctx, raw); err != nil || o.Password != pw || o.Username != "app" {
			t.Errorf("Parse(%q) = %q/%q, %v; want app/%q", raw, o.Username, o.Password, err, pw)
		}
	}
	if _, err := Parse(ctx, "redis://app:Kx9vQ2mZ7pLw/Rt4@redis.internal:6380"); !errors.Is(err, ErrUnparsable) ||
		!strings.Contains(err.Error(), "/ as %2F, # as %23, ? as %3F, @ as %40") {
		t.Errorf("Parse with a / in the password = %v; want ErrUnparsable, advising percent-encoding", err)
	}
}

// A bare host:port is not a URL: the error says so and names the fix.
func TestParseNoScheme(t *testing.T) {
	for _, raw := range []string{"127.0.0.1:6379", "localhost:6379", "redis.internal:6380,h2:6379"} {
		_, err := Parse(context.Background(), raw)
		first, _, _ := strings.Cut(raw, ",")
		if !errors.Is(err, ErrNoScheme) || !strings.Contains(err.Error(), "write redis://"+first) {
			t.Errorf("Parse(%q) = %v; want ErrNoScheme naming redis://%s", raw, err, first)
		}
	}
}

// A URL of another scheme (http://, a typo) gets a message naming the fix,
// redis:// before the same host; one with user information quotes nothing
// but the scheme.
func TestNotRedisScheme(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:6379":          `its scheme is "http"; write redis://127.0.0.1:6379 (rediss://127.0.0.1:6379 for TLS)`,
		"tcp://cache:6379,h2:6379":       `its scheme is "tcp"; write redis://cache:6379`,
		"https://user:s3cret@cache:6379": `its scheme is "https" (no other part is shown`,
	} {
		_, err := Parse(context.Background(), raw)
		if !errors.Is(err, ErrNotRedis) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q) = %v; want ErrNotRedis saying %q, and no password", raw, err, want)
		}
	}
	for _, raw := range []string{"REDIS://127.0.0.1:1", "rediss://127.0.0.1:1", "unix:///tmp/redis.sock"} {
		if _, err := Parse(context.Background(), raw); errors.Is(err, ErrNotRedis) {
			t.Errorf("Parse(%q) = %v; a Redis scheme", raw, err)
		}
	}
}
