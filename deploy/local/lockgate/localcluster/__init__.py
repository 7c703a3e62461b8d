"""Local cluster and test processes: Kafka broker, PostgreSQL, services, without Docker."""
