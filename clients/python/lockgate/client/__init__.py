"""Python client and the lockgate CLI."""
