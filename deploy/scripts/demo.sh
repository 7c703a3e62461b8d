#!/usr/bin/env bash
# make demo: bring the local cluster up, then run the demo against it. The cluster stays up
# afterwards so you can look around (`make cluster-status`); `make cluster-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python -m lockgate.localcluster.cluster up
.venv/bin/python -m lockgate.localcluster.demo_resume --bootstrap-servers 127.0.0.1:9092
echo
echo "The cluster is still up: 'make cluster-status' lists it, 'make cluster-down' stops it."
