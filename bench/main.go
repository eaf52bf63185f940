// Command bench measures corral beside its peers and writes BENCHMARKS.md,
// bench/results.json and PNG charts under bench/charts. `make bench` runs
// it from the repository root; every number in those files comes from the
// run.
//
// # Method
//
// The benchmark starts its own redis-server on a free loopback port
// (corral's internal/redistest; a missing redis-server is an error), and
// one synthetic origin: a load waits the scenario's origin latency, then
// returns the key's value, pseudo-random bytes that are the same for every
// load of the key, so every answer is checked. The origin counts its loads
// and their peak concurrency.
//
// Each system (systems.go) makes one Instance per app instance, with its
// own Redis client and connection pool, as separate processes would. A trial
// is one system's run of a scenario: FLUSHALL, the instances are made and
// connected, the scenario's requests run, and the instances are closed.
// Every client dials through a counting connection (wire.go) that reads the
// commands it writes: the trial's Redis commands are what the clients sent,
// less connection set-up, with a script call counting one. INFO
// commandstats is read before and after the trial too; Redis 7 counts the
// commands a Lua script runs inside there, so that count (redis_server_calls
// in results.json) is the server's work, not the clients' requests.
//
// Scenarios (scenarios.go) are bursts (every goroutine released at once on
// cold keys), steady traffic (goroutines loop for a duration), and the hit
// path (one goroutine's hits on warm keys, timed like testing.B). In the
// outage scenarios Redis is killed before the traffic starts; in
// redis-outage-warm every instance is first warmed on every key (warm.go),
// and the origin's counts start again after the warm-up. In each
// scenario the systems' trials are interleaved, round after round, in an
// order rotated each round. Latency goes into HDR histograms
// (github.com/HdrHistogram/hdrhistogram-go); rounds are merged.
//
// Scenarios a system cannot run stay in the tables, saying so.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	out        string // the repository root: BENCHMARKS.md goes there, the rest under bench/
	quick      bool
	scenarios  string
	systems    string
	label      string
	command    string
	noProgress bool
	logFile    string
	render     string
}

func run() error {
	var cfg config
	flag.StringVar(&cfg.out, "out", "..", "repository root: writes BENCHMARKS.md there, bench/results.json and bench/charts/*.png under it")
	flag.BoolVar(&cfg.quick, "quick", false, "small sizes and one round: a check in about a minute, not for publishing")
	flag.StringVar(&cfg.scenarios, "scenarios", "", "comma-separated scenarios to run (default all)")
	flag.StringVar(&cfg.systems, "systems", "", "comma-separated systems to run (default all)")
	flag.StringVar(&cfg.label, "label", "", `label printed on every output, e.g. "development run on a busy machine"`)
	flag.StringVar(&cfg.command, "command", "", "the command to name as the producer of the outputs (default: this command line)")
	flag.BoolVar(&cfg.noProgress, "no-progress", false, "no progress bar on stderr")
	flag.StringVar(&cfg.logFile, "log", "", "file for the systems' log output (default: a temporary file, named at the end)")
	flag.StringVar(&cfg.render, "render", "", "run nothing: render BENCHMARKS.md and the charts again from this results.json")
	flag.Parse()

	if cfg.render != "" {
		return render(cfg)
	}

	scs, syss, err := selection(cfg)
	if err != nil {
		return err
	}
	command := cfg.command
	if command == "" {
		command = "go run . " + strings.Join(os.Args[1:], " ")
	} else if extra := setFlags("out", "command"); extra != "" {
		command += " BENCHFLAGS='" + extra + "'"
	}
	label := cfg.label
	if label == "" && (cfg.quick || cfg.scenarios != "" || cfg.systems != "") {
		label = "partial run (" + strings.TrimSpace(strings.Join(os.Args[1:], " ")) + ")"
	}

	logPath := cfg.logFile
	var logW io.WriteCloser
	if logPath == "" {
		f, err := os.CreateTemp("", "corral-bench-*.log")
		if err != nil {
			return err
		}
		logW, logPath = f, f.Name()
	} else if logW, err = os.Create(logPath); err != nil {
		return err
	}
	defer logW.Close()
	logger := slog.New(slog.NewTextHandler(logW, &slog.HandlerOptions{Level: slog.LevelWarn}))
	redis.SetLogger(goRedisLogger{logger}) // go-redis's own messages (failed dials) go to the log too

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	srv, err := startServer(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()

	started := time.Now()
	res := &Results{
		Machine: machine(),
		Redis:   srv.version,
		Command: command,
		Go:      runtime.Version(),
		Commit:  commit(),
		Label:   label,
		Started: started.UTC().Format(time.RFC3339),
		LoadAvg: LoadAvg{Start: loadAvg()},
	}
	steps := 0
	for _, sc := range scs {
		steps += sc.Rounds * len(runnableSystems(sc, syss))
	}
	var bar *progress
	if !cfg.noProgress {
		bar = newProgress(os.Stderr, steps)
	}
	r := &runner{srv: srv, logger: logger, progress: bar}
	if err := r.warmUp(ctx, scs, syss); err != nil {
		return err
	}
	for _, sc := range scs {
		sr, err := r.runScenario(ctx, sc, syss)
		if err != nil {
			return err
		}
		res.Scenarios = append(res.Scenarios, sr)
	}
	bar.step("done")
	bar.finish()
	res.DurationS = float64(time.Since(started).Round(time.Second) / time.Second)
	res.LoadAvg.End = loadAvg()

	if err := writeJSON(filepath.Join(cfg.out, "bench", "results.json"), res); err != nil {
		return err
	}
	if err := writeReport(cfg.out, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: done in %v; the systems' log is %s\n", time.Since(started).Round(time.Second), logPath)
	return nil
}

// writeReport writes BENCHMARKS.md in out and the charts in out/bench/charts.
func writeReport(out string, res *Results) error {
	charts, err := writeCharts(res, filepath.Join(out, "bench", "charts"), "bench/charts")
	if err != nil {
		return err
	}
	md := filepath.Join(out, "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte(markdown(res, charts)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %d charts in %s\n", md, countCharts(charts), filepath.Join(out, "bench", "charts"))
	return nil
}

// render writes BENCHMARKS.md and the charts again from a results.json,
// without running anything: for changes to the report's text.
func render(cfg config) error {
	b, err := os.ReadFile(cfg.render)
	if err != nil {
		return err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", cfg.render, err)
	}
	return writeReport(cfg.out, &res)
}

// setFlags lists the flags set on the command line, but those named in
// except, as -name=value.
func setFlags(except ...string) string {
	var out []string
	flag.Visit(func(f *flag.Flag) {
		for _, e := range except {
			if f.Name == e {
				return
			}
		}
		v := f.Value.String()
		if strings.ContainsAny(v, " \"'") {
			v = strconv.Quote(v)
		}
		out = append(out, "-"+f.Name+"="+v)
	})
	return strings.Join(out, " ")
}

// selection returns the scenarios and systems cfg asks for.
func selection(cfg config) ([]*Scenario, []System, error) {
	all := scenarios(cfg.quick)
	scs := all
	if cfg.scenarios != "" {
		scs = nil
		for _, name := range strings.Split(cfg.scenarios, ",") {
			found := false
			for _, sc := range all {
				if sc.Name == strings.TrimSpace(name) {
					scs, found = append(scs, sc), true
				}
			}
			if !found {
				return nil, nil, fmt.Errorf("unknown scenario %q", name)
			}
		}
	}
	syss := systems
	if cfg.systems != "" {
		syss = nil
		for _, name := range strings.Split(cfg.systems, ",") {
			s, ok := lookupSystem(strings.TrimSpace(name))
			if !ok {
				return nil, nil, fmt.Errorf("unknown system %q", name)
			}
			syss = append(syss, s)
		}
	}
	if len(scs) == 0 || len(syss) == 0 {
		return nil, nil, errors.New("nothing to run")
	}
	return scs, syss, nil
}

func countCharts(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// commit names the git commit of the working tree the run measures, with
// "+dirty" when it has uncommitted changes; "" outside a git checkout.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

// machine describes this machine: CPU model and count, memory, OS.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
				}
			}
		}
	}
	kernel := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel += " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d x %s%s, %s", runtime.NumCPU(), cpu, mem, kernel)
}

// loadAvg is the 1-minute load average, 0 where unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// goRedisLogger sends go-redis's internal messages to the run's log.
type goRedisLogger struct{ l *slog.Logger }

func (g goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	g.l.WarnContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
