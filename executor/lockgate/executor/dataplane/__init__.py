"""The executor's data planes: what runs one task's pre-commit of a checkpoint.

* :mod:`.protocol` -- the :class:`~.protocol.DataPlane` the runtime drives, and the plain
  values it takes and returns (:class:`~.protocol.PrecommitWork`,
  :class:`~.protocol.PrecommitOutput`, in the model's offset ranges, transaction handles
  and pipeline spec);
* :mod:`.spark` -- the real one: a long-lived SparkSession, the Kafka source and the
  two-phase-commit Kafka sink (``--data-plane spark``);
* :mod:`.control_only` -- empty pre-commits without Spark, for tests of the control path
  (``--data-plane none``).

A data plane only prepares output; ending its transactions is the committer's
(:mod:`lockgate.executor.committer`).
"""
