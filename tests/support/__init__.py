"""What every test tier shares: waiting for a condition, and starting and stopping the
services as processes.

``waits``: :func:`~tests.support.waits.wait_for`, the one way a test waits (a condition polled
against a deadline, never a sleep). ``processes``: the service processes a test starts itself
(a child process with its log in a file, the schema registry). ``specs``: hypothesis
strategies of every pipeline config the model's parser accepts. ``topics``: ``FixedTopics``, Kafka
metadata without Kafka for a herder built in a test. ``metrics``: scraping a service's
``/metrics`` over HTTP and reading a series. Free ports and the services'
command lines are not here but in ``lockgate.localcluster`` (``ports``, ``commands``), which the
local cluster and the benchmarks use too. The pytest fixtures built on these live in
``tests/fixtures``.
"""
