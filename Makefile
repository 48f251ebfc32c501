# make test: install what the tests need when it is missing, then vet and run every test.
GO ?= go

.PHONY: test tests main-tests deps vet unit docs race modules bench bench-vet fmt image image-test deps-image chart-test ci-deploy fuzz soak

# make test builds every package once, with the settings deploy/Dockerfile builds the image
# with (IMAGE_BUILD): go vet, the tests, the binary the end-to-end tests start and the nested
# modules all share one compiled copy, so the tested build is the shipped build and a cold
# cache compiles each dependency once. The race detector is a second build of everything:
# make race runs every test under it, and CI (.ci/run) runs make race after make test.
# After vet, the main module's tests (unit, then docs) and the nested modules' tests run
# side by side: the nested modules compile what only they use (gin, echo, Prometheus's
# parser, envoyproxy/ratelimit) while the main module's tests leave a core idle (waiting on
# Redis, on a process, on the slowest package). Their lines interleave, each naming its
# package; each phase's header says when it starts. A failure in either fails make test.
test: deps vet
	@$(MAKE) --no-print-directory -j2 --output-sync=line tests
tests: main-tests modules
main-tests:
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory docs

# The Dockerfile's build settings. cmd/sluice's sluiceBinary and TestImageBinary build the
# binary with them too.
IMAGE_BUILD := CGO_ENABLED=0 GOFLAGS=-trimpath

# The nested modules keep peer libraries and web frameworks out of the main go.mod: the
# gin and echo examples vet and test their adapters; deploy/test checks the Grafana
# dashboard's and the alert rules' PromQL with Prometheus's parser against a running sluice serve (its
# chart test runs in make chart-test); bench/conformance sends the same Envoy requests and
# configuration files to sluice and to envoyproxy/ratelimit and compares the answers, and
# bench/cmd/overload tests its own accounting. The rest of bench/ (the benchmarks and every
# peer library they compare with) has no tests: make bench-vet compiles and vets it, and CI
# runs that after make test (it would add a minute to a cold make test).
# -mod=mod lets them pick up dependencies the main module gained since their go.sum.
NESTED_TESTED := examples/gin examples/echo
modules:
	@for d in $(NESTED_TESTED); do \
		echo "== $$d: go vet, go test"; \
		(cd $$d && $(IMAGE_BUILD) $(GO) vet -mod=mod ./... && $(IMAGE_BUILD) $(GO) test -mod=mod -count=1 ./...) || exit 1; \
	done
	@echo "== deploy/test: the dashboard's and alerts' PromQL against a running sluice serve (memory, Redis)"; \
		cd deploy/test && $(IMAGE_BUILD) $(GO) vet . ./internal/... ./promql && $(IMAGE_BUILD) $(GO) test -count=1 ./promql
	@echo "== bench/conformance: sluice against envoyproxy/ratelimit, requests and configuration files (go-installs it on first use)"; \
		cd bench && $(IMAGE_BUILD) $(GO) vet -mod=mod ./conformance ./cmd/overload && $(IMAGE_BUILD) $(GO) test -mod=mod -count=1 ./conformance ./cmd/overload

# bench-vet compiles and vets every benchmark (CI runs it after make test).
bench-vet:
	cd bench && $(IMAGE_BUILD) $(GO) vet -mod=mod ./...

# deps installs redis-server (the Redis store, failure and service tests) and chromium (the
# simulator report test) from the OS packages when they are missing: with apt-get as root,
# or through sudo when it needs no password. Otherwise it says what to install and stops.
deps:
	@echo "== deps: redis-server and chromium"
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server redis-tools"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then sudo=""; \
		elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
		else echo "make test needs:$$missing. Install them (Debian/Ubuntu: sudo apt-get install$$missing) or run make deps as root." >&2; exit 1; fi; \
		if ! command -v apt-get >/dev/null 2>&1; then echo "make test needs:$$missing, and there is no apt-get here: install them with this system's package manager." >&2; exit 1; fi; \
		echo "installing:$$missing"; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@redis-server --version

vet:
	@echo "== go vet ./... (compiles every package and its dependencies first: minutes from an empty cache, with nothing printed meanwhile)"
	$(IMAGE_BUILD) $(GO) vet ./...
	@echo "== gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	@echo "== go test ./... (compiles the tests, then runs them; each package's line appears as it finishes)"
	$(IMAGE_BUILD) $(GO) test -count=1 -timeout 12m -skip '^TestDocumentedCommands$$' ./...

# docs runs every command of README.md, docs/*.md and the --help examples against the
# built binary (cmd/sluice TestDocumentedCommands); -v lists each, and every command
# marked "untested: REASON" as a SKIP with its reason.
docs:
	@echo "== documented commands: README.md, docs/*.md and every --help example, as written"
	$(IMAGE_BUILD) $(GO) test -count=1 -run '^TestDocumentedCommands$$' -v ./cmd/sluice

# race runs every test of the main module under the race detector (it needs cgo): a second
# build of every package, so not part of make test; CI runs it after make test. The
# allocation tests are built only without it (//go:build !race): the detector allocates.
race: deps
	@echo "== go test -race ./..."
	$(GO) test -race -count=1 -timeout 15m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# fuzz runs every native fuzz target (func FuzzXxx in a _test.go file) for FUZZTIME each,
# one after the other. make test runs only their seed corpora (f.Add and
# testdata/fuzz/<target>), as go test does. A failing input is written to the package's
# testdata/fuzz/<target>: commit it with the fix, as a seed.
# The first run of a package builds it with coverage instrumentation, which takes minutes.
FUZZTIME ?= 10s
fuzz:
	@set -e; for f in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
		dir=./$$(dirname $$f); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$dir $$t ($(FUZZTIME))"; \
			$(GO) test $$dir -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME); \
		done; \
	done

# soak runs sluice serve on a real Redis under mixed load with injected faults for
# SOAK_DURATION (default 10m) and prints a summary table; it fails when a bound is broken.
# Not part of make test. See bench/cmd/soak.
SOAK_DURATION ?= 10m
soak: deps
	cd bench && $(GO) run -mod=mod ./cmd/soak -duration $(SOAK_DURATION)

fmt:
	gofmt -w $$(git ls-files '*.go')

# image builds deploy/Dockerfile with docker, podman or buildah (deploy/image.sh says which
# is chosen). image-test builds the image from a binary built on the host exactly as the
# Dockerfile builds it (no base image is pulled) and checks it; it installs podman from the
# OS packages when there is no image builder.
image:
	deploy/image.sh build

image-test: deps-image
	deploy/image.sh test

deps-image:
	@if ! { command -v podman || command -v buildah || { command -v docker && docker info; }; } >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then sudo=""; \
		elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
		else echo "make image-test needs podman (or docker). Install it (Debian/Ubuntu: sudo apt-get install podman) or run make deps-image as root." >&2; exit 1; fi; \
		echo "installing: podman"; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends podman; \
	fi

# chart-test lints the Helm chart and renders it with helm pinned at HELM_VERSION, built
# from its Go module with go install (it never enters a go.mod) into the user's cache on
# first use; deploy/test/chart's TestChart then checks every rendered manifest.
HELM_VERSION := v3.22.0
TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sluice-tools
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)/helm

$(HELM):
	@echo "building helm $(HELM_VERSION) from its Go module (once)"
	GOBIN=$(dir $(HELM)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

chart-test: $(HELM)
	$(HELM) lint --strict deploy/helm/sluice --set image.repository=registry.example.com/sluice
	cd deploy/test && $(GO) vet ./chart && HELM=$(HELM) $(GO) test -count=1 ./chart

# ci-deploy: what .ci/run adds to make test besides make bench-vet (see README, "Deploy").
ci-deploy: chart-test image-test
