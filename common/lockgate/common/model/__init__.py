"""The one protocol vocabulary every Lockgate service speaks (Flink's committable + serializer).

- `ids`: typed identifiers (pipeline, task, executor, checkpoint, generation, epoch, ...).
- `offsets`: a topic-partition and a half-open offset range of one partition.
- `handles`: a prepared Kafka transaction (`TransactionHandle`), what commit and abort need.
- `pipeline_spec`: the one pipeline-spec parser, validator and normaliser; `spec_checker`
  is its reader of one raw field at a time, collecting every violation.
- `limits`: the bounds on every request field (lengths, counts), checked by every gRPC
  server before its servicer runs and by the spec parser.
- `spec_changes`: which fields differ between two normalised specs (`lockgate pipeline apply`).
- `proto`: the one converter of each of these to and from its `lockgate.v1` message. It is
  the only module here that imports `*_pb2`: the values above stay plain, so domain code
  that uses them needs no protobuf.

The coordinator, the executor and the CLI import these; none keeps a copy of its own.
"""
