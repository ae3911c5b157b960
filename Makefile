# One entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
HOLD    ?=

.PHONY: help build test lint unit e2e demo tools clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

build: ## build bin/leader-elector (static)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/leader-elector .

test: lint unit e2e ## everything CI runs: lint, unit tests, e2e tests on a real control plane

lint: ## gofmt, go vet, go mod tidy check
	@out="$$(gofmt -l . )"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

unit: ## unit tests with the race detector
	$(GO) test -race -count=1 . ./election/... ./httpapi/...

e2e: tools ## e2e tests: real etcd + kube-apiserver, real leader-elector processes
	$(GO) test -count=1 -timeout 30m -v ./test/cluster/ ./test/e2e/ 2>&1 | tee e2e.out | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|MEASURED|control plane ready|building|built' ; exit $${PIPESTATUS[0]}

tools: ## build (or reuse from the cache) etcd and kube-apiserver at the pinned versions
	bash test/tools/build.sh

demo: ## local demo: control plane + three candidates, graceful handover and crash failover (HOLD=1 keeps it running)
	$(GO) run ./test/demo $(if $(HOLD),-hold)

clean: ## remove build outputs (the tool cache stays)
	rm -rf bin e2e.out

# Benchmarks (bench/): leader-elector against a plain client-go baseline on a
# real control plane. `make bench` is the full run whose table the README
# shows (about 12 minutes); `make bench-smoke` is a short run with small
# counts and timings that only proves the benchmark still works (CI).
.PHONY: bench bench-smoke
test: bench-smoke

bench: tools ## benchmarks, full run at the default timings (~12 min); the table also goes to bench.out
	$(GO) run ./bench --output bench.out

bench-smoke: tools ## benchmarks, short run with small counts and timings, to prove they still work (~2 min)
	$(GO) run ./bench --lease-duration=4s --renew-deadline=2s --retry-period=500ms \
		--handovers=3 --crashes=2 --idle-warmup=2s --idle-window=10s --http-duration=2s --output bench-smoke.out
