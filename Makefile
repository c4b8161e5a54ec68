# Thin targets; the scripts and go test do the work.
GO      ?= go
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
FUZZTIME ?= 60s

.PHONY: build run demo test test-short lint fuzz bench bench-smoke e2e clean image release man completions \
	drivers test-clients test-client test-lang-suites test-packages bench-clients deps

# Deployment artifacts (docs/operations.md).
DIST      ?= dist
GOARCH_HOST := $(shell $(GO) env GOARCH)
# An image tag may hold [A-Za-z0-9_.-] only.
IMAGE_TAG ?= $(shell printf '%s' '$(VERSION)' | tr -c 'A-Za-z0-9_.-' '-')
IMAGE     ?= ticketing:$(IMAGE_TAG)
PLATFORMS ?= linux/amd64 linux/arm64

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ticketing ./cmd/ticketing

run: build
	bin/ticketing serve

demo:
	scripts/demo.sh

# The README's test command: the client toolchains (deps), vet, every Go
# test under the race detector, then each client's own suite and the
# cross-language matrix.
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) test-lang-suites
	$(MAKE) test-packages
	$(MAKE) test-clients

# ---------------------------------------------------------------------------
# Official clients (docs/clients.md). LANGS=go,python selects languages
# (default: all); a language whose client/<lang>/ci.sh is absent or whose
# `ci.sh toolchain` fails is skipped with the install command.
CLIENT_LANGS := go python js rust java kotlin c cpp ruby csharp
# Second APIs run as their own testkit languages (client/testkit/README.md,
# "Variants"): the base language's driver with TESTKIT_VARIANT set.
CLIENT_VARIANTS := python-asyncio rust-blocking java-async c-queue
comma := ,
SEL_LANGS = $(if $(LANGS),$(subst $(comma), ,$(LANGS)),$(CLIENT_LANGS))
# ci_script LANG: the ci.sh that provides LANG (kotlin/cpp fall back to java/c).
define ci_for
ci=client/$$l/ci.sh; [ -f $$ci ] || case $$l in kotlin) ci=client/java/ci.sh;; cpp) ci=client/c/ci.sh;; esac
endef

# Installs every client's toolchain (client/<lang>/ci.sh install: Debian
# packages as root, registry packages); idempotent, quick when all is there.
# NO_DEPS=1 skips it (a machine set up by hand).
deps:
	@[ -n "$(NO_DEPS)" ] || for ci in client/*/ci.sh; do \
	  echo "== deps: $$ci install"; bash $$ci install || { echo "deps: $$ci install failed"; exit 1; }; \
	done

# Builds the driver of every selected language whose toolchain is present.
drivers:
	@failed=""; built=" "; for l in $(SEL_LANGS); do \
	  l=$${l%%-*}; \
	  if [ $$l = go ]; then echo "== drivers: go"; \
	    CGO_ENABLED=0 $(GO) build -o client/testkit/bin/godriver ./client/testkit/godriver || failed="$$failed go"; continue; fi; \
	  $(ci_for); \
	  if [ ! -f $$ci ]; then echo "== drivers: $$l skipped: no $$ci yet"; continue; fi; \
	  if ! bash $$ci toolchain; then echo "== drivers: $$l skipped: toolchain missing (install command above)"; continue; fi; \
	  case "$$built" in *" $$ci "*) echo "== drivers: $$l (built by $$ci)"; continue;; esac; \
	  echo "== drivers: $$l ($$ci build)"; \
	  if bash $$ci build; then built="$$built$$ci "; else failed="$$failed $$l"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "drivers: build failed for:$$failed"; exit 1; fi

TESTKIT_FLAGS ?=
# The matrix for every selected language (default all; absent ones are shown
# as skipped with why), in every mode; non-zero on any FAIL.
test-clients: build
	@$(MAKE) --no-print-directory drivers LANGS='$(LANGS)' || echo "(a driver failed to build; its cells show it)"
	$(GO) run ./client/testkit/cmd/runner -bin bin/ticketing $(if $(LANGS),-langs $(LANGS)) $(TESTKIT_FLAGS)

# One language: make test-client LANG=python
test-client: build
	@[ -n "$(filter $(CLIENT_LANGS) $(CLIENT_VARIANTS),$(LANG))" ] || { echo "usage: make test-client LANG=<one of: $(CLIENT_LANGS) $(CLIENT_VARIANTS)>"; exit 2; }
	@$(MAKE) --no-print-directory drivers LANGS='$(LANG)'
	$(GO) run ./client/testkit/cmd/runner -bin bin/ticketing -langs $(LANG) $(TESTKIT_FLAGS)

# Each present client's own suite (client/<lang>/ci.sh test). Kotlin's and
# C++'s suites are Java's and C's (one Maven build, one CMake build): each runs once.
test-lang-suites: build
	@failed=""; done_=" "; for l in $(filter-out go $(CLIENT_VARIANTS),$(SEL_LANGS)); do \
	  $(ci_for); \
	  case $$l in kotlin) [ ! -f client/java/ci.sh ] || ci=client/java/ci.sh;; cpp) [ ! -f client/c/ci.sh ] || ci=client/c/ci.sh;; esac; \
	  if [ ! -f $$ci ]; then echo "== test-lang-suites: $$l skipped: no $$ci yet"; continue; fi; \
	  case "$$done_" in *" $$ci "*) continue;; esac; done_="$$done_$$ci "; \
	  if ! bash $$ci toolchain; then echo "== test-lang-suites: $$l skipped: toolchain missing (install command above)"; continue; fi; \
	  echo "== test-lang-suites: $$l ($$ci test)"; \
	  TICKETING_BIN=$(CURDIR)/bin/ticketing bash $$ci test || failed="$$failed $$l"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-lang-suites: FAILED:$$failed"; exit 1; fi; echo "test-lang-suites: ok"

# Each present client's package as its users install it (client/<lang>/ci.sh
# package-check: the artifact built with the ecosystem's tool, installed into
# a fresh project outside the repository, the README's first example against
# a real server; issues 32-34 P3). A ci.sh without the command is listed.
test-packages: build
	@failed=""; done_=" "; for l in $(filter-out go,$(SEL_LANGS)); do \
	  $(ci_for); \
	  case $$l in kotlin) [ ! -f client/java/ci.sh ] || ci=client/java/ci.sh;; cpp) [ ! -f client/c/ci.sh ] || ci=client/c/ci.sh;; esac; \
	  if [ ! -f $$ci ]; then echo "== test-packages: $$l skipped: no $$ci yet"; continue; fi; \
	  case "$$done_" in *" $$ci "*) continue;; esac; done_="$$done_$$ci "; \
	  if ! grep -q '^ *package-check)' $$ci; then echo "== test-packages: $$l: $$ci has no package-check yet"; continue; fi; \
	  if ! bash $$ci toolchain; then echo "== test-packages: $$l skipped: toolchain missing (install command above)"; continue; fi; \
	  echo "== test-packages: $$l ($$ci package-check)"; \
	  TICKETING_BIN=$(CURDIR)/bin/ticketing bash $$ci package-check || failed="$$failed $$l"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-packages: FAILED:$$failed"; exit 1; fi; echo "test-packages: ok"

# Client throughput beside the Go client (scripts/bench-clients.sh).
bench-clients: build
	scripts/bench-clients.sh

test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	gofmt -l . | (! grep .)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

# Every fuzz target for FUZZTIME each (go test allows one target per run).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# CI: every Go benchmark once, as a smoke test (timings on CI machines mean nothing;
# the measurements are scripts/bench-floor.sh and scripts/bench-vs-redis.sh).
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x $(PKGS)

clean:
	rm -rf bin dist

# The container image: FROM scratch around the static binary, non-root,
# built from a temporary context (deploy/Dockerfile); nothing is pulled.
# Tagged $(IMAGE) (ticketing:VERSION) and, unless IMAGE is given, ticketing:latest.
image:
	@set -e; ctx=$$(mktemp -d); trap 'rm -rf "$$ctx"' EXIT; \
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_HOST) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o "$$ctx/ticketing" ./cmd/ticketing; \
	cp -R deploy/rootfs "$$ctx/rootfs"; mkdir "$$ctx/data"; \
	docker build -q -f deploy/Dockerfile -t '$(IMAGE)' $(if $(filter file,$(origin IMAGE)),-t ticketing:latest) \
	  --build-arg VERSION='$(VERSION)' --build-arg COMMIT='$(COMMIT)' --build-arg DATE='$(DATE)' "$$ctx" >/dev/null; \
	echo "image $(IMAGE)"

# Static, stamped binaries for every platform, and their SHA-256 sums.
release:
	@set -e; out='$(DIST)/release'; rm -rf "$$out"; mkdir -p "$$out"; \
	for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  echo "build ticketing-$(VERSION)-$$os-$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
	    -o "$$out/ticketing-$(VERSION)-$$os-$$arch" ./cmd/ticketing; \
	done; \
	cd "$$out" && sha256sum ticketing-* > SHA256SUMS && cat SHA256SUMS

# Man pages (section 1) from the cobra tree.
man: build
	bin/ticketing man --dir $(DIST)/man

# Shell completion scripts.
completions: build
	mkdir -p $(DIST)/completions
	bin/ticketing completion bash > $(DIST)/completions/ticketing.bash
	bin/ticketing completion zsh > $(DIST)/completions/_ticketing
	bin/ticketing completion fish > $(DIST)/completions/ticketing.fish
