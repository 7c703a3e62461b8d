"""Shared pytest configuration: the real-process fixtures live in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.postgres",
    "tests.fixtures.schema_registry",
]
