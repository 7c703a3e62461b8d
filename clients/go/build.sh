#!/usr/bin/env bash
# The Go client's four verbs, run by deploy/scripts/clients.sh (see there):
#   install   the pinned code generators into clients/go/.bin, and the module's dependencies
#   generate  gen/lockgate/v1 from protos/lockgate/v1 (buf generate, committed: Go modules
#             are consumed as source)
#   check     fail if gen/ differs from what the protos give today; go vet
#   test      go test against real services (python -m lockgate.localcluster.testbed)
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
protos="$here/../../protos"

# The generators, pinned: protoc-gen-go is the protobuf module's own (the same version as
# the runtime in go.mod), protoc-gen-go-grpc is released on its own.
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

export GOBIN="$here/.bin"
# buf comes from the venv (buf-bin on PyPI); make puts .venv/bin on PATH.
buf="$here/../../.venv/bin/buf"
[ -x "$buf" ] || buf=buf
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

need_go() {
  if ! command -v go >/dev/null; then
    echo "clients/go: 'go' is not on PATH; install Go 1.26 or later" >&2
    exit 1
  fi
}

need_generators() {
  if [ ! -x .bin/protoc-gen-go ] || [ ! -x .bin/protoc-gen-go-grpc ]; then
    echo "clients/go: the code generators are missing; run 'make install' (or clients/go/build.sh install)" >&2
    exit 1
  fi
}

# version_of BINARY prints the module version a Go binary was built from.
version_of() {
  go version -m "$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

install() {
  need_go
  mkdir -p .bin
  for pinned in "$PROTOC_GEN_GO" "$PROTOC_GEN_GO_GRPC"; do
    binary=".bin/$(basename "${pinned%@*}")"
    if [ -x "$binary" ] && [ "$(version_of "$binary")" = "${pinned#*@}" ]; then
      continue
    fi
    nice go install "$pinned"
  done
  go mod download
  (cd ../../bench/loadgen && go mod download)
}

generate_into() {
  need_generators
  "$buf" generate "$protos" --template buf.gen.yaml -o "$1"
}

case "${1:-}" in
  install)
    install
    ;;
  generate)
    rm -rf gen/lockgate
    generate_into .
    ;;
  check)
    need_go
    fresh=$(mktemp -d)
    trap 'rm -rf "$fresh"' EXIT
    generate_into "$fresh"
    if ! diff -r "$fresh/gen" gen >/dev/null; then
      diff -r "$fresh/gen" gen | head -20 >&2 || true
      echo "clients/go: gen/ differs from what protos/lockgate/v1 generate; run 'make protos' and commit clients/go/gen" >&2
      exit 1
    fi
    unformatted=$(gofmt -l . ../../bench/loadgen)
    if [ -n "$unformatted" ]; then
      echo "clients/go: not gofmt-formatted (run gofmt -w): $unformatted" >&2
      exit 1
    fi
    nice go vet ./...
    (cd ../../bench/loadgen && nice go vet ./...)
    ;;
  test)
    need_go
    # The integration tests start python -m lockgate.localcluster.testbed ($LOCKGATE_PYTHON
    # or the python on PATH, the venv's under make).
    nice go test -count=1 -timeout 5m ./...
    ;;
  *)
    echo "usage: clients/go/build.sh install|generate|check|test" >&2
    exit 2
    ;;
esac
