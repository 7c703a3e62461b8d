"""Lockgate coordinator: leader election, membership, assignment, checkpoints.

Four rooms, each calling only the next: :mod:`.api` (the gRPC servicer: convert, validate,
delegate) -> :mod:`.herder` (the leader: lease, membership, pipelines, the checkpoint
driver, reports, the calls to executors, the work loop) -> :mod:`.domain` (pure decisions:
state machines, assignment, checkpoint and pre-commit rules) and :mod:`.store` (the only
code that speaks SQL or Kafka admin; each write asks :mod:`.domain`). The protocol's
vocabulary (ids, offset ranges, transaction handles, the pipeline spec) is
:mod:`lockgate.common.model`, shared with the executor and the CLI.
"""
