# Thin targets; the scripts and go test do the work.
GO      ?= go
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
FUZZTIME ?= 60s

.PHONY: build run demo test test-short lint fuzz bench bench-smoke e2e clean image release man completions

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

# The README's test command: vet, then every test under the race detector.
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

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
