#!/usr/bin/env bash
# The Python tests of make test ("unit or integration"), test-unit, test-integration and
# test-e2e, in two passes:
#   1. every test but the `serial` ones on LOCKGATE_TEST_WORKERS pytest-xdist processes
#      (default 2; most tests wait on JVMs, sessions and leases, not on the CPU), each test
#      file on one process (--dist loadfile: a module's fixtures start once, as without xdist),
#      handed out in collection order, where tests/conftest.py puts the slowest tier first
#      (--no-loadscope-reorder: by default xdist hands out the files with most tests first,
#      which started the four-minute e2e files last, one process running them while the
#      other idled);
#   2. the `serial` ones alone: their assertion is a time bound (a failover within the lease,
#      a shutdown within its bound), which a CPU shared with the first pass would break.
# $1: a marker expression choosing tiers (unit, integration, e2e, or e.g. "unit or
# integration"); none: every test.
# Both passes run, each printing its slowest 25; the exit status is the first failing one's.
set -uo pipefail
cd "$(dirname "$0")/../.."
pytest=.venv/bin/pytest
tier=${1:-}
workers=${LOCKGATE_TEST_WORKERS:-2}

selection() { # $1: the pass's own marker expression, within the tier
  if [ -n "$tier" ]; then echo "($tier) and $1"; else echo "$1"; fi
}

echo "== pytest on $workers processes: $(selection 'not serial')"
"$pytest" -q --durations=25 -n "$workers" --dist loadfile --no-loadscope-reorder \
  -m "$(selection 'not serial')"
parallel=$?
echo "== pytest alone: $(selection 'serial')"
"$pytest" -q --durations=25 -n 0 -m "$(selection 'serial')"
alone=$?
# 5: nothing selected (a tier without a serial test), not a failure.
[ "$alone" -eq 5 ] && alone=0
[ "$parallel" -ne 0 ] && exit "$parallel"
exit "$alone"
