"""Lockgate schema registry: Avro schemas and their evolution."""
