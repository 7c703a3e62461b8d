"""The coordinator's state in SQL (SQLite or PostgreSQL), and Kafka admin: the only code that
speaks either. One engine (`engine.py`: the fenced `transaction(fence=...)` and the read
snapshot) and one sub-store per kind of state, as Kafka Connect splits its backing stores:
`lease_store.py`, `replica_store.py` (the coordinator replicas), `membership_store.py`,
`pipeline_store.py` (pipelines and tasks), `checkpoint_store.py`, `offset_store.py`;
`SqlStore` holds them. A write reads a snapshot, asks a pure function of
`coordinator.domain`, and applies its plan. `kafka_topics.py` asks Kafka which of a
pipeline's topics exist and their partitions."""

from lockgate.coordinator.store.sql_store import SqlStore, open_store

__all__ = ["SqlStore", "open_store"]
