# oomguard. `make demo` and `make test` work on a fresh Debian 12 machine.
SHELL := /bin/bash
GO ?= go
BIN := bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Static, reproducible binaries: no cgo, no paths, no VCS stamps, no build id.
GOBUILD := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags='-s -w -buildid='

CMDS := oomguard-hook=./hook oomguard-init=./initshim oomguard-nri=./nri-plugin imagepatch=./imagepatch/cmd/imagepatch oomguard-doctor=./doctor
# The shim goes into images of either architecture (imagepatch embeds both).
SHIM_ARCHES := amd64 arm64

.PHONY: all build shims test e2e bench demo lint deps clean

all: build

build:
	@mkdir -p $(BIN)
	@set -e; for c in $(CMDS); do \
		name=$${c%%=*}; pkg=$${c#*=}; \
		$(GOBUILD) -o $(BIN)/$$name $$pkg; echo "built $(BIN)/$$name"; \
	done
	@set -e; for a in $(SHIM_ARCHES); do \
		GOOS=linux GOARCH=$$a $(GOBUILD) -o $(BIN)/oomguard-init-linux-$$a ./initshim; echo "built $(BIN)/oomguard-init-linux-$$a"; \
	done

# The shims imagepatch embeds; a test checks they match a fresh build.
shims: build
	cp $(BIN)/oomguard-init-linux-amd64 $(BIN)/oomguard-init-linux-arm64 imagepatch/shim/

# Everything that needs neither root, runc, qemu nor a registry.
test:
	$(GO) test ./...

# Real containers (runc), as root. Installs what it needs first.
e2e: deps
	$(GO) test -tags e2e -count=1 -run 'E2E' ./...

bench: deps build
	$(GO) run ./bench

demo: deps
	$(GO) run ./demo

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	cd test/containerd && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# The Debian packages the demo, the e2e tests and the benchmarks run.
deps:
	@./scripts/deps.sh

clean:
	rm -rf $(BIN) build
