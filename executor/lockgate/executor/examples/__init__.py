"""Example `transform.python` functions; every executor allows this package's modules."""
