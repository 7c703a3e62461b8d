"""Lockgate executor: PySpark batch writers with two-phase commit."""
