"""Unit tests of the executor's data plane (pure logic, no sockets)."""
