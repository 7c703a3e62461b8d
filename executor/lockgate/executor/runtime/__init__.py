"""The executor's runtime: what one executor process does between its two edges.

* :mod:`.values` -- the plain values exchanged with the edges (assignments, reports, ...);
* :mod:`.coordinator` -- what the runtime needs from the coordinator (a Protocol);
* :mod:`.membership` -- register, heartbeat, notice a lost session;
* :mod:`.tasks` -- the task state machine and the board of tasks (one lock);
* :mod:`.restore` -- a (re)assigned task's restore before it runs;
* :mod:`.checkpoint_runner` -- trigger -> pre-commit on the data plane -> report, and the
  commit/abort of decided checkpoints (the exactly-once races are written down there);
* :mod:`.reporter` -- reports to the coordinator, retried until their deadline.

:mod:`lockgate.executor.worker` composes them. Nothing here imports ``*_pb2``: the gRPC
servicer and the coordinator client convert at the edges (:mod:`lockgate.executor.convert`).
"""
