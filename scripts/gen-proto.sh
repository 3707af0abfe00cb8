#!/bin/sh
# Regenerates Go code from proto/*.proto into sdk/go/airlock/proto: the public
# Go SDK owns the generated packages; the agent, internal/guest and the daemon
# import them from there.
set -eu
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:$PATH"
command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
[ -f /usr/include/google/protobuf/timestamp.proto ] || { echo "google/protobuf/timestamp.proto missing: apt-get install libprotobuf-dev" >&2; exit 1; }
command -v protoc-gen-go >/dev/null || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
command -v protoc-gen-connect-go >/dev/null || go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
protoc -I proto -I /usr/include \
  --go_out=. --go_opt=module=github.com/airlock-sandbox/airlock \
  --connect-go_out=. --connect-go_opt=module=github.com/airlock-sandbox/airlock \
  proto/process/process.proto proto/filesystem/filesystem.proto
