# inorder: run `make help` for the targets.
GO ?= go
PKGS := ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# VERSION is what `inorder version` says and the image's tag: the tag the commit is at, else the latest
# release in CHANGELOG.md followed by the commits since (as git describe would), "-dirty" when the work
# tree has changes (.ci/version).
VERSION ?= $(shell .ci/version 2>/dev/null || echo devel)
# IMAGE_PLATFORMS are the platforms make image builds, one image each in one OCI index.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64

.PHONY: version
version: ## Print the version a build is stamped with.
	@echo $(VERSION)

.PHONY: image
image: ## Write the image (linux/amd64 and linux/arm64, an SPDX document each) as an OCI layout in bin/image, tagged with the version, with no Docker daemon.
	@set -e; pids=; for p in $(IMAGE_PLATFORMS); do \
	  echo "build inorder for $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" \
	    -o bin/inorder-$${p%/*}-$${p#*/} ./cmd/inorder & pids="$$pids $$!"; \
	done; for pid in $$pids; do wait $$pid; done
	rm -rf bin/image
	cd deploy && $(GO) run ./cmd/image -version $(VERSION) -out ../bin/image $(foreach p,$(IMAGE_PLATFORMS),-binary $(p)=../bin/inorder-$(subst /,-,$(p)))

.PHONY: build
build: ## Build the inorder binary into bin/, its version stamped (inorder version).
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/inorder ./cmd/inorder

.PHONY: test
test: ## Vet, check formatting and run every test with the race detector against a real Postgres.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	@# The deploy module is vetted by its tests' own build (-vet=all: every analyzer go vet runs), so that
	@# Helm and the Kubernetes types compile once, with -race, not a second time for go vet; go vet covers
	@# its packages without tests.
	@# The tests run with a temporary directory of their own, which must be empty afterwards: a test that
	@# leaves a file there (a binary, a cluster) leaves it on every run of every engineer. Run as root, the
	@# harness starts Postgres as the postgres user, who must be able to reach its directory in it.
	@tmp=$$(mktemp -d -t inorder-test.XXXXXX); chmod 755 $$tmp; rc=0; \
	  TMPDIR=$$tmp $(GO) test -race -count=1 -timeout 8m $(PKGS) || rc=$$?; \
	  if [ $$rc = 0 ]; then \
	    echo "deploy module: compile, vet and test (Helm and the Kubernetes types: minutes the first time)"; \
	    (cd deploy && TMPDIR=$$tmp $(GO) test -race -vet=all -count=1 -timeout 5m ./... && $(GO) vet ./cmd/... ./internal/...) || rc=$$?; \
	  fi; \
	  left=$$(ls -A $$tmp); \
	  if [ -n "$$left" ]; then echo "the tests left in the temporary directory:" $$left; [ $$rc != 0 ] || rc=1; fi; \
	  rm -rf $$tmp; exit $$rc

.PHONY: test-matrix
test-matrix: ## Run the suites that touch SQL on PostgreSQL 14, 16, 17 and 18 with -race (npm's server binaries, installed into .pg/ when missing): cursor, store, source and migrations on each, the processor on 14 and 18, the CLI and the fault suite's short form on 18 (CI's time); PG_VERSIONS="17 18" picks some.
	GO=$(GO) .ci/test-matrix

.PHONY: flakes
flakes: ## Run every test three times with the race detector; a test that fails one run in ten is a bug.
	$(GO) test -race -count=3 -timeout 20m $(PKGS)

.PHONY: faults
faults: ## Run the fault suite in full (kills, cut connections, server restarts, frozen owners; minutes).
	@out=$$(mktemp -t inorder-faults.XXXXXX); \
	{ INORDER_FAULTS=full $(GO) test -race -count=1 -v -run . -timeout 20m ./internal/harness/fault/ 2>&1; \
	  echo $$? >$$out.rc; } | tee $$out | grep -E --line-buffered '^faults:|^(ok|FAIL|panic:)|^ *--- '; \
	rc=$$(cat $$out.rc); rm -f $$out.rc; \
	if [ "$$rc" = 0 ]; then rm -f $$out; else echo "full output: $$out"; fi; exit $$rc

# BENCH picks the measures make bench runs, a pattern of go test -bench: BENCH=BigRows runs the big rows alone.
BENCH ?= .

.PHONY: bench
bench: ## Measure records/s beside the Postgres limits measured in the same run (BENCH=BigRows: the big rows alone).
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 -timeout 45m ./internal/harness/bench/

.PHONY: bench-long
bench-long: ## Measure inorder under snapshots held for minutes as pg_dump holds them: bursts after 5 minutes, inorder's tables over 10 (about 22 minutes).
	INORDER_BENCH_LONG=1 $(GO) test -run '^$$' -bench 'BenchmarkSnapshotLong' -benchtime 1x -count 1 -timeout 60m ./internal/harness/bench/

.PHONY: demo
demo: ## Run the main job on embedded defaults: a throwaway Postgres, bookings, inorder run (Ctrl-C stops).
	@# Built, then run, rather than `go run`: go run turns the demo's clean stop on Ctrl-C into exit status 1.
	@$(GO) build -o bin/inorder-demo ./cmd/demo && ./bin/inorder-demo

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')
