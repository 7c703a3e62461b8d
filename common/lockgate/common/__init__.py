"""Shared runtime pieces every Lockgate service uses."""
