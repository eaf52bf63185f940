//go:build !race

package corral_test

// raceFlags are the build flags of the test binary that matter to a build
// the tests start (none without the race detector).
var raceFlags []string
