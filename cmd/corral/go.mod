module github.com/corralhq/corral/cmd/corral

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/corralhq/corral v0.0.0
	github.com/corralhq/corral/corralhttp v0.0.0
	github.com/corralhq/corral/corralprom v0.0.0
	github.com/creack/pty v1.1.24
	github.com/jedib0t/go-pretty/v6 v6.8.3
	github.com/lib/pq v1.12.3
	github.com/prometheus/client_golang v1.25.0
	github.com/pterm/pterm v0.12.84
	github.com/redis/go-redis/v9 v9.23.0
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	go.uber.org/goleak v1.3.0
	golang.org/x/term v0.44.0
	modernc.org/ql v1.7.0
)

require (
	atomicgo.dev/cursor v0.2.0 // indirect
	atomicgo.dev/keyboard v0.2.10 // indirect
	atomicgo.dev/schedule v0.1.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/clipperhouse/uax29/v2 v2.7.0 // indirect
	github.com/containerd/console v1.0.5 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/edsrzf/mmap-go v1.2.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lithammer/fuzzysearch v1.1.8 // indirect
	github.com/mattn/go-runewidth v0.0.24 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/b v1.1.0 // indirect
	modernc.org/db v1.4.0 // indirect
	modernc.org/file v1.1.4 // indirect
	modernc.org/fileutil v1.4.0 // indirect
	modernc.org/golex v1.1.0 // indirect
	modernc.org/internal v1.1.12 // indirect
	modernc.org/lldb v1.0.8 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/sortutil v1.2.1 // indirect
	modernc.org/strutil v1.2.1 // indirect
	modernc.org/zappy v1.0.9 // indirect
)
