#!/usr/bin/env bash
# make lint: the contracts (buf lint, buf breaking against main), ruff, mypy --strict, the
# shape of the code (deploy/scripts/check_shape.py: module and function sizes), the deployment
# manifests (deploy/scripts/deploy_tools.sh check) and the generated clients.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=.venv/bin

echo "== buf lint"
(cd protos && "../$bin/buf" lint)
# Breaking-change check against main's protos (WIRE_JSON), once main has them.
if git rev-parse --verify -q main >/dev/null && git cat-file -e main:protos/buf.yaml 2>/dev/null; then
  echo "== buf breaking (against main)"
  "$bin/buf" breaking protos --against '.git#branch=main,subdir=protos'
fi
echo "== ruff"
"$bin/ruff" check .
"$bin/ruff" format --check .
echo "== mypy --strict"
"$bin/mypy" common/lockgate coordinator/lockgate executor/lockgate schema_registry/lockgate \
  clients/python/lockgate/client deploy/local/lockgate
echo "== shape: no module over 700 lines, no function over 80"
"$bin/python" deploy/scripts/check_shape.py
# The Dockerfile (hadolint), compose.yaml (compose-spec schema), the Helm chart (helm lint, kubeconform).
bash deploy/scripts/deploy_tools.sh check
echo "== generated clients match the protos"
PATH="$PWD/$bin:$PATH" bash deploy/scripts/clients.sh check
echo "== lint: clean"
