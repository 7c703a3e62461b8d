"""Alembic migrations of the coordinator's tables (run by `migrate.upgrade_to_head`)."""
