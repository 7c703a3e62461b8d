#!/usr/bin/env bash
# The TypeScript client's four verbs, run by deploy/scripts/clients.sh (make install, protos,
# lint, test):
#   install   npm ci from the committed package-lock.json (exact versions)
#   generate  src/gen/ from protos/lockgate/v1 (and google/rpc/error_details.proto, the
#             status details the services send) with protoc-gen-es through `buf generate`
#   check     regenerate into a temporary directory and compare with src/gen/; tsc --noEmit
#   test      compile, then `node --test`; the integration tests start one
#             `python -m lockgate.localcluster.testbed` ($LOCKGATE_PYTHON, else python)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
verb=${1:?usage: build.sh install|generate|check|test}
python=${LOCKGATE_PYTHON:-python}

need_node_modules() {
  if [ ! -x node_modules/.bin/tsc ] || [ ! -x node_modules/.bin/protoc-gen-es ]; then
    echo "clients/typescript: node_modules is missing; run \`make install\` (or $0 install)" >&2
    exit 1
  fi
}

# generate_into DIR: write the generated TypeScript under DIR/src/gen.
generate_into() {
  local out=$1 rpc
  need_node_modules
  if ! command -v buf >/dev/null; then
    echo "clients/typescript: buf is not on PATH; run \`make install\` (it installs buf-bin in .venv)" >&2
    exit 1
  fi
  # google.rpc's error details come from the googleapis-common-protos that pyproject.toml
  # pins (the same definitions the services encode with), not from a copy kept here.
  rpc=$(mktemp -d)
  mkdir -p "$rpc/google/rpc"
  "$python" - "$rpc/google/rpc" <<'PY'
import pathlib, shutil, sys
import google.rpc.error_details_pb2 as details
shutil.copy(pathlib.Path(details.__file__).with_name("error_details.proto"), sys.argv[1])
PY
  buf generate ../../protos --template buf.gen.yaml -o "$out"
  buf generate "$rpc" --template buf.gen.yaml -o "$out"
  rm -rf "$rpc"
}

case "$verb" in
  install)
    nice npm ci --no-audit --no-fund
    ;;
  generate)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate_into "$tmp"
    rm -rf src/gen
    mkdir -p src
    cp -r "$tmp/src/gen" src/gen
    echo "clients/typescript: regenerated src/gen"
    ;;
  check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate_into "$tmp"
    if ! diff -r src/gen "$tmp/src/gen" >"$tmp/diff"; then
      head -40 "$tmp/diff" >&2
      echo "clients/typescript/src/gen differs from what protos/lockgate/v1 generate:" \
        "run \`make protos\` and commit the result" >&2
      exit 1
    fi
    nice node_modules/.bin/tsc -p tsconfig.json --noEmit
    echo "clients/typescript: generated code current, types check"
    ;;
  test)
    need_node_modules
    rm -rf dist
    nice node_modules/.bin/tsc -p tsconfig.json
    LOCKGATE_PYTHON=$python nice node --test --test-reporter=spec dist/test/*.test.js
    ;;
  *)
    echo "build.sh: unknown verb $verb (install, generate, check or test)" >&2
    exit 2
    ;;
esac
