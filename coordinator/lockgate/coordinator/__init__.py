"""Lockgate coordinator: leader election, membership, assignment, checkpoints."""
