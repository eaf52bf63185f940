package corral

import (
	"strings"
	"testing"
)

// The version grading, for servers the tests cannot start (Redis 4 and 5),
// and for masters of different versions.
func TestCheckVersionGrades(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		versions []string
		want     Severity
		detail   string
	}{
		{[]string{"7.0.15"}, SeverityOK, "7.0.15"},
		{[]string{"6.2.14"}, SeverityOK, "6.2.14"},
		{[]string{"5.0.14"}, SeverityWarning, "5.0.14: the near cache needs Redis 6"},
		{[]string{"4.0.14"}, SeverityFailure, "4.0.14: corral's scripts need Redis 5.0 or later"},
		{[]string{"7.2.4", "7.0.15", "7.0.9"}, SeverityWarning, "7.0.9, the oldest: the masters run different versions (7.0.15, 7.0.9, 7.2.4)"},
		{[]string{"7.0.15", "4.0.1"}, SeverityFailure, "4.0.1: corral's scripts need"},
		{[]string{""}, SeverityWarning, "version unknown"},
	} {
		k := &checker{r: &Report{}}
		infos := map[string]serverInfo{}
		for i, v := range tc.versions {
			infos[strings.Repeat("n", i)] = serverInfo{version: v}
		}
		k.versionFinding(infos)
		f := k.r.Findings[0]
		if f.Severity != tc.want || !strings.Contains(f.Detail, tc.detail) {
			t.Errorf("%v: %s %q; want %s with %q", tc.versions, f.Severity, f.Detail, tc.want, tc.detail)
		}
	}
}

// rightOf names the right in each of Redis's refusals, and nothing for
// other errors.
func TestCheckRightOf(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"NOPERM this user has no permissions to run the 'evalsha' command":                          "EVALSHA",
		"NOPERM this user has no permissions to run the 'config|get' command":                       "CONFIG GET",
		"NOPERM User app has no permissions to run the 'client|tracking' command":                   "CLIENT TRACKING",
		"NOPERM this user has no permissions to access one of the keys used as arguments":           "keys p:*",
		"NOPERM this user has no permissions to access one of the channels used as arguments":       "channels p:*",
		"ERR The user executing the script can't run this command or subcommand (SET)":              "SET",
		"ERR The user executing the script can't run this command or subcommand script: abc (HSET)": "HSET",
		"ERR The user executing the script can't access at least one of the keys mentioned (GET)":   "keys p:*",
		"MOVED 10570 127.0.0.1:7001": "",
		"ERR unknown command 'CONFIG', with args beginning with: 'GET' 'maxmemory-policy'": "",
	} {
		if got := rightOf(msg, "p"); got != want {
			t.Errorf("rightOf(%q) = %q; want %q", msg, got, want)
		}
	}
}
