# oomguard. `make demo` and `make test` work on a fresh Debian 12 machine.
SHELL := /bin/bash
GO ?= go
BIN := bin
BUILD := build
GOBUILD := ./scripts/gobuild
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

PROGRAMS := oomguard-hook oomguard-init oomguard-nri oomguard-doctor imagepatch
# What --version says; the same commit gives the same stamp (and bytes). Not
# in oomguard-init: imagepatch embeds it, and images would change with every
# commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
STAMP := -X github.com/oomguard/oomguard/internal/version.Version=$(VERSION) -X github.com/oomguard/oomguard/internal/version.Commit=$(COMMIT)
# The shim goes into images of either architecture (imagepatch embeds both).
SHIM_ARCHES := amd64 arm64
# Packages with goroutines run under the race detector.
RACE_PKGS := ./nri-plugin/... ./internal/oomkills/... ./imagepatch/... ./doctor/... ./test/nriruntime/... ./internal/podevents/... ./internal/kubeapi/...
# Fuzz targets of the parsers of untrusted input, run briefly by make test
# (a count, not a duration: a duration ends in "context deadline exceeded"
# when a worker is slow to stop on a loaded machine);
# their corpora are in each package's testdata/fuzz.
FUZZ := ./config:FuzzParse ./internal/glob:FuzzCheck ./internal/glob:FuzzMatch ./internal/glob:FuzzMatchProg ./internal/facts:FuzzBundles ./internal/policy:FuzzAnnotations ./internal/policy:FuzzProgram ./internal/policy:FuzzPodUID ./hook:FuzzOCIInput ./imagepatch:FuzzParseSpec \
	./internal/kernel:FuzzParseStat ./internal/kernel:FuzzParseProcTables ./internal/kernel:FuzzStatusKB \
	./doctor:FuzzParseCPUList ./doctor:FuzzParseProcTables \
	./internal/escape:FuzzTerminal ./internal/cri:FuzzDecodeList ./internal/cri:FuzzDecodeRuntime ./internal/execwatch:FuzzParse ./internal/execwatch:FuzzParseTaskOffsets ./internal/kmsg:FuzzParse ./internal/kmsg:FuzzParserRepeats \
	./imagepatch/admission:FuzzReview ./internal/score:FuzzParseInputs
FUZZTIME ?= 20000x
# End-to-end tiers: real runtimes and a registry on this host, then the VM.
# The host tier: every package with e2e-tagged tests (go list shows them
# as ignored without the tag), but the VM's.
HOST_E2E_PKGS = $(shell $(GO) list -f '{{if .IgnoredGoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v '/test/vm/scenarios$$')
HOST_E2E_TIMEOUT := 20m
VM_E2E_TIMEOUT := 50m

.PHONY: all build shims test-bins components images test fuzz e2e e2e-host e2e-matrix e2e-vm bench bench-smoke bench-kit bench-kit-smoke demo lint deps clean image image-bin release

all: build

build:
	@mkdir -p $(BIN)
	@set -e; for p in $(PROGRAMS); do \
		stamp="$(STAMP)"; [ $$p = oomguard-init ] && stamp=; \
		LDFLAGS="$$stamp" $(GOBUILD) $(BIN)/$$p ./cmd/$$p; echo "built $(BIN)/$$p"; \
	done
	@set -e; for a in $(SHIM_ARCHES); do \
		GOOS=linux GOARCH=$$a $(GOBUILD) $(BIN)/oomguard-init-linux-$$a ./cmd/oomguard-init; echo "built $(BIN)/oomguard-init-linux-$$a"; \
	done

# The shims imagepatch embeds; a test checks they match a fresh build.
shims: build
	cp $(BIN)/oomguard-init-linux-amd64 $(BIN)/oomguard-init-linux-arm64 imagepatch/shim/

# The release image: an OCI layout in build/image (and pushed when
# IMAGE=registry/repo:tag is given), the same digest for the same commit.
IMAGE ?=
IMAGE_PROGRAMS := oomguard-nri oomguard-doctor oomguard-hook imagepatch
CREATED ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image: image-bin
	$(GO) run ./cmd/mkrelease --image-only --bin $(BUILD)/image-bin --out $(BUILD)/image --release $(VERSION) --commit $(COMMIT) --created $(CREATED) $(if $(IMAGE),--push-image $(IMAGE))

# The release in build/release: the image (OCI layout), the chart packaged
# and pinned to its digest, the image's SBOM (SPDX) and SHA256SUMS, the same
# bytes for the same commit. Pushed only when asked:
#   make release IMAGE=registry.example/oomguard:v1 CHART_REPO=oci://registry.example/charts
CHART_REPO ?=
release: image-bin
	$(GO) run ./cmd/mkrelease --bin $(BUILD)/image-bin --chart deploy/helm/oomguard --out $(BUILD)/release \
		--release $(VERSION) --commit $(COMMIT) --created $(CREATED) $(if $(IMAGE),--push-image $(IMAGE)) $(if $(CHART_REPO),--push-chart $(CHART_REPO)) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY))

# The image's programs for each platform, stamped with the release.
image-bin:
	@set -e; for a in $(SHIM_ARCHES); do for p in $(IMAGE_PROGRAMS); do \
		GOOS=linux GOARCH=$$a LDFLAGS="$(STAMP)" $(GOBUILD) $(BUILD)/image-bin/$$a/$$p ./cmd/$$p; \
	done; done

# Binaries only the tests use: the VM's workload and its agent.
test-bins:
	@mkdir -p $(BUILD)/test-bin
	$(GOBUILD) $(BUILD)/test-bin/ ./test/vm/guest ./test/vm/agent ./test/vm/nrirun ./test/vm/nriother

# The real components the end-to-end tests run, from pinned Go modules under test/.
components:
	./scripts/components.sh $(BUILD)/components

# Everything that needs neither root, runc, qemu nor a registry.
test:
	$(GO) test $$($(GO) list ./... | grep -v -e /nri-plugin -e /internal/oomkills -e /imagepatch -e /doctor -e /test/nriruntime -e /internal/podevents -e /internal/kubeapi)
	$(GO) test -race $(RACE_PKGS)
	@$(MAKE) --no-print-directory fuzz

fuzz:
	@set -e; for t in $(FUZZ); do \
		echo "fuzz $${t#*:} ($(FUZZTIME))"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $${t%%:*} 2>&1) || { echo "$$out"; exit 1; }; \
	done

# Real containers, a real registry and the VM, as root. Installs and builds
# what they need first, outside the tests' timeouts.
e2e: deps build image test-bins components images e2e-host e2e-vm

# Every runtime, kubelet and kernel combination the VM tier knows, not only
# the newest and the oldest (CI's).
e2e-matrix: deps build image test-bins
	OOMGUARD_E2E_MATRIX=1 ./scripts/components.sh $(BUILD)/components
	OOMGUARD_E2E_MATRIX=1 $(GO) test -tags e2e -count=1 -timeout 90m -parallel 2 -run 'E2E' -v ./test/vm/scenarios/

# The real images the image tests patch (debootstrap and buildah, once per recipe).
images: deps
	$(GO) run ./test/imagebuild/cmd/buildimages

e2e-host:
	$(GO) test -tags e2e -count=1 -timeout $(HOST_E2E_TIMEOUT) -run 'E2E' $(HOST_E2E_PKGS)
	cd test/helm && $(GO) test -tags e2e -count=1 -timeout 5m ./...

e2e-vm:
	$(GO) test -tags e2e -count=1 -timeout $(VM_E2E_TIMEOUT) -parallel 2 -run 'E2E' -v ./test/vm/scenarios/

bench: deps build image test-bins components
	$(GO) run ./bench

demo: deps build test-bins
	$(GO) run ./demo

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	cd test/containerd && $(GO) vet ./...
	cd test/helm && $(GO) vet -tags e2e ./...
	$(GO) run $(STATICCHECK) ./...

# The Debian packages the demo, the e2e tests and the benchmarks run.
deps:
	@./scripts/deps.sh

clean:
	rm -rf $(BIN) $(BUILD)

# Every benchmark section once, small, no goal judged: CI's check that they still run.
bench-smoke:
	$(GO) run ./bench --smoke

# The bench kit: the bench and every program it runs, prebuilt, and the
# files it reads, in build/bench-kit-ARCH.tar.gz, to run on a node without
# Go or a network (bench/README.md). KIT_ARCH is this machine's architecture,
# or others (KIT_ARCH="amd64 arm64"): their programs and components built
# for them. KIT_SECTIONS=hook,nri,… makes a smaller kit, of those alone.
HOST_ARCH = $(shell $(GO) env GOARCH)
KIT_ARCH ?= $(HOST_ARCH)
KIT_SECTIONS ?=
bench-kit: build image test-bins
	@set -e; for a in $(KIT_ARCH); do \
		VERSION="$(VERSION)" STAMP="$(STAMP)" KIT_SECTIONS="$(KIT_SECTIONS)" ./scripts/benchkit.sh $$a; \
	done

# The kit for this machine, unpacked in a temporary directory and run once,
# small (-smoke): CI's check that the benchmarks still run, from the kit.
# After make build image test-bins, whose outputs it takes as they are.
bench-kit-smoke:
	@VERSION="$(VERSION)" STAMP="$(STAMP)" KIT_SECTIONS= ./scripts/benchkit.sh $(HOST_ARCH)
	@set -e; d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
		tar -xzf $(BUILD)/bench-kit-$(HOST_ARCH).tar.gz -C "$$d"; \
		"$$d/oomguard-bench-kit-$(HOST_ARCH)/run-bench" -smoke
