//go:build !unix

package corral_test

import "time"

// processCPU is the CPU time this process has used: not measured here
// (getrusage is Unix's), so BenchmarkStampedeWaiters reports 0.
func processCPU() time.Duration { return 0 }
