# corral: `make test` works on a fresh Debian machine: it installs
# redis-server when missing (the tests start their own private servers).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test redis-server vet bench demo

# -p 1: one package at a time, so the timing bounds of the failure-case tests
# are not measured on a machine the demo's tests keep busy.
test: redis-server vet
	$(GO) test -race -p 1 -timeout 20m ./...

vet:
	$(GO) vet ./...

redis-server:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { \
		echo "redis-server is missing: installing it with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server; }

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo:
	$(GO) run ./cmd/corral demo
