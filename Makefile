# Convenience targets; the canonical entry points are scripts/run-daemon.sh and
# scripts/test.sh (which CI runs through .ci/run).
GO ?= go
export GOFLAGS ?= -mod=mod
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all build setup fmt vet lint unit test e2e bench clean

all: build

build:
	mkdir -p bin
	$(GO) build -o bin/airlock ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -o bin/airlock-envd ./cmd/airlock-envd

setup:
	bash scripts/setup.sh

fmt:
	gofmt -w $$(find . -name "*.go" -not -path "./.git/*" -not -path "*/node_modules/*")

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/gohttp/...

lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags e2e ./...

unit:
	$(GO) test -count=1 -p 1 -timeout 25m ./...

# Everything: setup, lint, unit tests, daemon, Go and JS end-to-end tests (root).
test:
	bash scripts/test.sh

# End-to-end only, against a daemon scripts/test.sh starts.
e2e:
	AIRLOCK_TEST_SKIP_UNIT=1 bash scripts/test.sh

# Needs a running daemon: export its E2B_API_URL and E2B_API_KEY first.
bench:
	bash bench/run.sh

clean:
	rm -rf bin test/e2e/node_modules
