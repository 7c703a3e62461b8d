"""The coordinator's herder: the leader's decisions and its work loop.

`herder.py` composes the parts: `lease_keeper.py` (lease, role, fence: the one leader
check; and this replica's presence row), `membership.py` (executor sessions, liveness,
assignment), `pipelines.py` (configs, target states, restarts, offsets, the Kafka checks),
`checkpoints.py` (the checkpoint driver: trigger, commit, abort, timeouts, recovery),
`reports.py` (executors' pre-commit and failure reports), `requests.py` (mutating calls run
once per request_id) and `executors.py` (the edge that calls executors).
"""

from lockgate.coordinator.herder.herder import Herder
from lockgate.coordinator.herder.settings import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    CoordinatorSettings,
)

__all__ = ["DEFAULT_HEARTBEAT_INTERVAL_MS", "CoordinatorSettings", "Herder"]
