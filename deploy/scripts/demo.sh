#!/usr/bin/env bash
# make demo: bring the local cluster up (Kafka broker, schema registry, coordinators c1..c3,
# executors e1..e2), then copy 200,000 records over 4 partitions through the copy pipeline
# (examples/copy.yaml) exactly once while executor e2 is SIGKILLed halfway, and check the
# output with a read_committed consumer. The cluster stays up afterwards so you can look
# around (`make cluster-status`, `.venv/bin/lockgate cluster status`); `make cluster-down`
# stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python -m lockgate.localcluster.cluster up
.venv/bin/python -m lockgate.localcluster.demo --bootstrap-servers 127.0.0.1:9092 "$@"
echo
echo "The cluster is still up: 'make cluster-status' lists it, 'make cluster-down' stops it."
