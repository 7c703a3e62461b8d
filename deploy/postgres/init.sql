-- Run once by the postgres image on an empty data directory (deploy/compose.yaml): the
-- coordinators' database is POSTGRES_DB (lockgate_coordinator); the schema registry keeps its
-- own, on the same server.
CREATE DATABASE lockgate_schema_registry OWNER lockgate;
