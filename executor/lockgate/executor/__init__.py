"""Lockgate executor: PySpark batch writers with two-phase commit.

Where things live:

* edges (the only code that touches ``*_pb2``): :mod:`.servicer` (gRPC
  ``ExecutorService``: validate, fence, delegate), :mod:`.coordinator_client` (the
  coordinator's API as the runtime calls it) and :mod:`.convert` (every proto conversion);
* :mod:`.worker` -- the composition root of the runtime; :mod:`.__main__` -- the process;
* :mod:`.runtime` -- membership, the task state machine, restore, the checkpoint runner,
  the reporter;
* :mod:`.dataplane` -- the data plane protocol, the Spark data plane, the control-only one;
* :mod:`.committer` -- the only commit/abort path of prepared Kafka transactions;
* :mod:`.fencing` -- the fencing rules (pure); :mod:`.errors` -- the executor's typed
  errors.

The protocol's vocabulary (ids, offset ranges, transaction handles and the pipeline spec,
read by the same parser the coordinator validates it with) is :mod:`lockgate.common.model`.
"""
