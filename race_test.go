//go:build race

package corral_test

// raceFlags are the build flags of the test binary that matter to a build
// the tests start: with the race detector, the packages it builds are the
// ones `make test` has already compiled with it, so the build reuses them.
var raceFlags = []string{"-race"}
