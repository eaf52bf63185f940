package wire

import (
	"reflect"
	"testing"
	"time"
)

// TestArgs checks the units the scripts' headers give: TTLs rounded up to
// whole milliseconds and never 0, durations to the microsecond, 0 as none.
func TestArgs(t *testing.T) {
	if MS(0) != 1 || MS(time.Microsecond) != 1 || MS(1500*time.Microsecond) != 2 || MS(time.Second) != 1000 {
		t.Error("MS does not round up to whole ms, at least 1")
	}
	if FractionalMS(1500*time.Microsecond) != "1.5" || FractionalMS(0) != "0" {
		t.Error("FractionalMS")
	}
	if OptionalMS(0) != "" || OptionalMS(42) != "42" {
		t.Error("OptionalMS")
	}
	if got := FetchArgv("t", time.Second, 0.5, 0, "", 0, Group{}, ""); !reflect.DeepEqual(got, []any{"t", int64(1000), "0.5", LargeReply, "", "", ""}) {
		t.Errorf("FetchArgv = %v", got)
	}
	if got := FetchArgv("t", time.Second, 0.5, 0, "", 0, Group{}, "e"); !reflect.DeepEqual(got, []any{"t", int64(1000), "0.5", LargeReply, "", "", "", "", "", "e"}) {
		t.Errorf("FetchArgv with an echo channel = %v", got)
	}
	if got := ReleaseArgv("t", "PUBLISH", "r", 0, false); !reflect.DeepEqual(got, []any{"t", "PUBLISH", "r", int64(0), 0}) {
		t.Errorf("ReleaseArgv = %v", got)
	}
	if got := ReleaseArgv("t", "", "", time.Millisecond/2, true); !reflect.DeepEqual(got, []any{"t", "", "", int64(1), 1}) {
		t.Errorf("ReleaseArgv with a hold = %v", got)
	}
	if ParseRenewal(int64(RenewRetaken)) != RenewRetaken || ParseRenewal("junk") != RenewLost {
		t.Error("ParseRenewal")
	}
	a := CommitArgs{Token: "t", Soft: time.Second, Hard: 2 * time.Second, Took: time.Millisecond, Seen: 7, Born: 5, Tags: "a"}.Argv()
	if len(a) != 15 || a[13] != "5" || a[14] != "a" || a[3] != int64(1000) || a[4] != int64(2000) || a[5] != "1" || a[10] != "" || a[11] != "7" {
		t.Errorf("CommitArgs.Argv = %v", a)
	}
}
