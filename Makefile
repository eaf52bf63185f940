# corral: `make test` works on a fresh Debian machine: it installs
# redis-server when missing (the tests start their own private servers).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test redis-server vet fuzz soak bench demo

FUZZTIME ?= 20000x

# -p 1: one package at a time, so the timing bounds of the failure-case tests
# are not measured on a machine the demo's tests keep busy.
test: redis-server vet
	$(GO) test -race -p 1 -timeout 20m ./...
	$(MAKE) fuzz
	$(MAKE) soak

vet:
	$(GO) vet ./...

redis-server:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { \
		echo "redis-server is missing: installing it with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server; }

# Each fuzz target runs briefly (a count, not a duration: a duration can trip
# a race in the Go fuzzing coordinator, golang/go#75804); a failure leaves
# its input in testdata/fuzz.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzNames$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseNotice$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseFetch$$' -fuzztime $(FUZZTIME) .

# A 20 s soak: 4 worker processes hammer corral while the soak kills and
# replaces them, restarts its own redis-server and deletes keys; it fails on
# any broken invariant (`go run ./cmd/corral soak --help` lists them).
soak: redis-server
	$(GO) run ./cmd/corral soak --duration 20s --processes 4 --no-progress

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo:
	$(GO) run ./cmd/corral demo
