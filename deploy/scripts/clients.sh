#!/usr/bin/env bash
# The generated clients in other languages (clients/go, clients/java, clients/typescript).
# Each language folder has an executable `build.sh` answering four verbs; this script runs one
# verb for every language present, in a fixed order, and stops at the first failure:
#   install   fetch the toolchain's dependencies from its registry (Go modules, Maven Central,
#             npm) and the code generators, pinned                  (make install)
#   generate  regenerate the committed/derived code from protos/lockgate/v1  (make protos)
#   check     fail if the committed generated code differs from what the protos give
#             today (regenerates into a temporary directory and compares)  (make lint)
#   test      the language's own test runner against real services started by
#             `python -m lockgate.localcluster.testbed`                    (make test)
set -euo pipefail
cd "$(dirname "$0")/../.."
verb=${1:?usage: clients.sh install|generate|check|test}
case "$verb" in install|generate|check|test) ;; *) echo "clients.sh: unknown verb $verb" >&2; exit 2;; esac
for lang in go java typescript; do
  script="clients/$lang/build.sh"
  [ -x "$script" ] || continue
  echo "== clients/$lang: $verb"
  "$script" "$verb"
done
