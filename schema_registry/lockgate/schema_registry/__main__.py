"""``python -m lockgate.schema_registry``: run the registry process."""

from lockgate.schema_registry.server import main

raise SystemExit(main())
