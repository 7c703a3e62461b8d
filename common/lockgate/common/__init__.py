"""What every Lockgate service shares.

:mod:`.model` is the one protocol vocabulary (ids, offset ranges, the transaction handle,
the pipeline spec, and their proto converters); :mod:`.errors` the domain errors and
:mod:`.grpc_server`/:mod:`.grpc_client` their one mapping to gRPC statuses and back;
:mod:`.kafka_transactions` ends a prepared Kafka transaction from any process;
:mod:`.failpoints` and :mod:`.telemetry` serve every process alike.
"""
