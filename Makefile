# make test: install what the tests need when it is missing, then vet and run every test.
GO ?= go
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test deps vet unit modules bench fmt

test: deps vet unit modules

# The nested modules keep peer libraries and web frameworks out of the main go.mod: the
# gin and echo examples run their tests; bench/ is vetted, which compiles every benchmark.
# -mod=mod lets them pick up dependencies the main module gained since their go.sum.
NESTED_TESTED := examples/gin examples/echo
modules:
	@for d in $(NESTED_TESTED); do \
		echo "== $$d"; \
		(cd $$d && $(GO) vet -mod=mod ./... && $(GO) test -mod=mod -race -count=1 ./...) || exit 1; \
	done
	@echo "== bench"; cd bench && $(GO) vet -mod=mod ./...

# deps installs redis-server (the Redis store, failure and service tests) and chromium (the
# simulator report test) from the OS packages when they are missing.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server redis-tools"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@redis-server --version

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 12m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
