# corral: `make test` works on a fresh Debian machine: it installs
# redis-server when missing (the tests start their own private servers).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test redis-server vet fuzz soak bench bench-check serve-bench gobench demo tidy

# make test runs the fuzz targets and the soak briefly; `make fuzz` and
# `make soak` run them longer (FUZZTIME=..., SOAKTIME=...). It ends with the
# bench module's own checks, so that module keeps building with corral.
FUZZTIME ?= 1000000x
SOAKTIME ?= 2m
TEST_FUZZTIME := 20000x
TEST_SOAKTIME := 10s

# Every package of every module of the workspace (go.work: the core, the
# adapters, the CLI and the bench module). In workspace mode ./... stops at
# the module it starts in; an import path pattern spans the workspace, so
# one go command builds, vets and tests them all, packages of every module
# in parallel.
ALL := github.com/corralhq/corral/...

# The modules, by directory, and where the ones others require live.
MODULES  := . corralprom corralotel corralhttp cmd/corral bench
WORKMODS := github.com/corralhq/corral=$(CURDIR) \
	github.com/corralhq/corral/corralhttp=$(CURDIR)/corralhttp \
	github.com/corralhq/corral/corralprom=$(CURDIR)/corralprom

# The big batches (10,000 and 50,000 keys across two processes, at the
# default LeaseTTL and at 1 s) run once more without the race detector,
# alone after the suite: the sizes and the lease the issue names, as a
# service runs them. So does the check that a stampede's waiters keep their
# goroutine's first stack, which the race detector's larger frames hide.
# make test builds everything in one flavour, with the race detector: vet,
# the tests, the binaries the tests build, the soak and the bench module's
# checks share one set of compiled packages, so a cold run compiles each
# package once. Packages run in parallel (go test's default -p, the number of
# CPUs) and, inside a package, up to TESTPARALLEL of its parallel tests: the
# tests assert what holds on a busy machine, never a tight time bound.
# go test's own vet (a subset of go vet's checks) is off: make vet has just
# run every check over the same packages, their tests included.
RACE         := -race
# A program built with -race sleeps 1 s as it exits (atexit_sleep_ms,
# 1000 by default), so that a goroutine still running can report a race.
# Every test binary, and every process a test starts (the CLI's binary, a
# child cache), paid it: about half a minute of a cold run on 2 cores. The
# tests leave no goroutine running at exit (goleak checks), so 20 ms is
# enough. A GORACE of your own is kept.
export GORACE ?= atexit_sleep_ms=20
TESTPARALLEL ?= 4
test: redis-server vet
	$(GO) test $(RACE) -vet=off -parallel $(TESTPARALLEL) -timeout 20m $(ALL)
	$(GO) test -vet=off -count=1 -timeout 10m -run '^(TestFetchMany_BigBatchesAcrossProcesses|TestStampede_WaitersKeepTheirFirstStack)$$' .
	$(MAKE) fuzz FUZZTIME=$(TEST_FUZZTIME)
	$(MAKE) soak SOAKTIME=$(TEST_SOAKTIME) SOAKFLAGS=$(RACE)
	$(MAKE) bench-check BENCHCHECKFLAGS=$(RACE) BENCHTESTFLAGS='-vet=off -parallel $(TESTPARALLEL) -timeout 20m'

vet:
	$(GO) vet $(RACE) $(ALL)

redis-server:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { \
		echo "redis-server is missing: installing it with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server; }

# The fuzz targets live in internal/wire (key naming, notice and fetch reply
# decoding), which imports only the standard library, so the instrumented
# build is quick. Each runs for a count, not a duration: a duration can trip
# a race in the Go fuzzing coordinator (golang/go#75804). A failure leaves
# its input in internal/wire/testdata/fuzz.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzNames$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseNotice$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseFetch$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzEntryName$$' -fuzztime $(FUZZTIME) ./internal/wire

# Worker processes hammer corral while the soak kills and replaces them,
# restarts its own redis-server and deletes keys; it fails on any broken
# invariant (`go run ./cmd/corral soak --help` lists them).
SOAKFLAGS ?=
soak: redis-server
	$(GO) run $(SOAKFLAGS) ./cmd/corral soak --duration $(SOAKTIME) --processes 4 --no-progress

# make bench runs corral beside its peers (the bench/ module, which has its
# own go.mod so the peers never enter corral's module graph) on a private
# redis-server and writes BENCHMARKS.md, bench/results.json and
# bench/charts/*.png: about 10 minutes on 2 cores. Publish only what a quiet machine produced.
# BENCHFLAGS adds flags, e.g. BENCHFLAGS='-label "development run"'.
BENCHFLAGS ?=
bench: redis-server
	cd bench && $(GO) run . -out .. -command 'make bench' $(BENCHFLAGS)

# The bench module's own quick checks (results.json shape, BENCHMARKS.md
# rendering, the command count on a real redis-server). BENCHCHECKFLAGS are
# build flags (vet and test), BENCHTESTFLAGS test flags: make test passes
# its own, so the tests its first go test ran answer from go's test cache.
BENCHCHECKFLAGS ?=
BENCHTESTFLAGS ?=
bench-check:
	cd bench && $(GO) vet $(BENCHCHECKFLAGS) ./... && $(GO) test $(BENCHCHECKFLAGS) $(BENCHTESTFLAGS) ./...

# make serve-bench load-tests `corral serve` on loopback (bench/serveload):
# one origin with 50 ms latency, a private redis-server and 3 sidecars,
# against the origin directly; about half a minute. It prints a Markdown
# table (docs/benchmarks.md keeps one run's). SERVEFLAGS adds flags, e.g.
# SERVEFLAGS='-workers 128 -duration 30s'.
SERVEFLAGS ?=
serve-bench: redis-server
	@tmp=$$(mktemp -d) && $(GO) build -o $$tmp/corral ./cmd/corral && \
		(cd bench && $(GO) run ./serveload -bin $$tmp/corral $(SERVEFLAGS)); \
		status=$$?; rm -rf $$tmp; exit $$status

# The Go benchmarks of every module (go test -bench): the core's, and what
# an Observer costs a hit in corralprom's and corralotel's.
gobench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem $(ALL)

demo:
	$(GO) run ./cmd/corral demo

# go mod tidy ignores go.work, and the modules require each other at v0.0.0,
# which only go.work resolves: make tidy tidies each module with temporary
# replaces to this clone's modules, then drops them (a replace in a
# published go.mod would break `go install ...@version`).
tidy:
	@for m in $(MODULES); do \
		echo "go mod tidy in $$m"; \
		(cd $$m && self=$$(sed -n 's/^module //p' go.mod) && \
		for r in $(WORKMODS); do [ "$${r%%=*}" = "$$self" ] || $(GO) mod edit -replace "$$r"; done && \
		GOWORK=off GOFLAGS=-mod=mod $(GO) mod tidy; status=$$?; \
		for r in $(WORKMODS); do [ "$${r%%=*}" = "$$self" ] || $(GO) mod edit -dropreplace "$${r%%=*}"; done; \
		exit $$status) || exit 1; \
	done
