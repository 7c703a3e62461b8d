"""Integration tests of the executor's data plane (real broker, real PySpark)."""
