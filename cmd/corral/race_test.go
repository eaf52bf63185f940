//go:build race

package main

// raceEnabled says the tests run with the race detector: the corral
// binary they start is then built with it too.
const raceEnabled = true
