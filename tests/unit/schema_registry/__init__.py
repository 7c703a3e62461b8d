"""Unit tests of the schema registry (no network)."""
