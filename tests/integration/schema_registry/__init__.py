"""Integration tests of the schema registry (real processes, broker, PostgreSQL)."""
