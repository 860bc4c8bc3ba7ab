# hostcron — see README.md. `make dev` runs the platform, `make test` the tests.
SHELL    := /bin/bash
GO       ?= go
BIN      ?= bin
DIST     ?= dist

# Static binaries: they run inside the test nodes and on web nodes.
STATIC   := CGO_ENABLED=0
CMDS     := core-api node-agent cron-outcome cron-run hostcronctl

.PHONY: all build dev packages test test-unit test-e2e fuzz vet rules clean

all: build

build:
	@mkdir -p $(BIN)
	$(STATIC) $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ $(addprefix ./,$(wildcard $(CMDS:%=cmd/%)))

# Run the platform: PostgreSQL, embedded Temporal, core API, three nodes.
dev:
	scripts/dev.sh

# Debian packages with nfpm (pinned; run from the module cache; v2.46+
# needs modules the Go proxy does not serve).
NFPM    := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.0
VERSION ?= 0.1.0
packages: build
	@mkdir -p $(DIST)
	for p in node-agent core-api; do \
	  sed 's|src: bin/|src: $(abspath $(BIN))/|; s|src: packaging/|src: $(CURDIR)/packaging/|' packaging/nfpm-$$p.yaml >$(DIST)/nfpm-$$p.yaml && \
	  VERSION=$(VERSION) $(GO) run $(NFPM) pkg --packager deb --config $(DIST)/nfpm-$$p.yaml --target $(DIST)/ || exit 1; \
	done

vet:
	$(GO) vet ./...

# Prometheus alert rules: syntax and their unit tests (promtool, from
# Debian's prometheus package; scripts/ensure-deps.sh installs it).
rules:
	promtool check rules packaging/monitoring/alerts.yml
	cd packaging/monitoring && promtool test rules alerts_test.yml

# Unit and store tier: pure Go, systemd-analyze (differential and verify
# tests), the alert rules, and a throwaway PostgreSQL cluster for the
# store and API tests.
test-unit: vet rules
	scripts/with-pg.sh $(GO) test -count=1 ./...

# Short fuzzing of the cron parser; `make fuzz FUZZTIME=5m` for longer.
# A count, not a duration: Go 1.26's fuzz coordinator can report a bare
# "context deadline exceeded" failure at the end of a -fuzztime duration
# on a loaded machine (golang/go#75804, fixed in Go 1.27); a count has no
# deadline to race. 200,000 runs take about 15 s here.
FUZZTIME ?= 200000x
fuzz:
	$(GO) test ./internal/schedule -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)

# End-to-end tiers, each on its own three booted systemd nodes, run side by
# side: tests/e2e (node side), tests/flow (API, Temporal, Loki),
# tests/faults (fault injection), tests/faults/control (control-plane
# outages: its own PostgreSQL and Temporal, which it stops; about 20
# minutes) and tests/acceptance (300 slots, outages;
# about 35 minutes). Needs root; the rootfs and the Loki binary are cached under $${HOSTCRON_CACHE:-/var/cache/hostcron}.
test-e2e:
	scripts/nodes.sh rootfs
	scripts/loki.sh build
	# Each tier's harness builds temporal-dev; on a cold build cache five
	# builds side by side would each compile the Temporal server, so one
	# build fills the cache first (a second or two when it is warm).
	cd devtools/temporal && $(GO) build -o /dev/null .
	scripts/with-pg.sh $(GO) test -count=1 -p 5 -tags e2e -timeout 80m -v ./tests/e2e/ ./tests/flow/ ./tests/faults/ ./tests/faults/control/ ./tests/acceptance/

test: test-unit fuzz test-e2e

clean:
	rm -rf $(BIN) $(DIST)
