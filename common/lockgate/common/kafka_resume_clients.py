"""The commit path's connections to a sink cluster: kafka-python network clients kept open
between commits, with the transaction coordinator each transactional id was found on.

The resume path (``kafka_transactions``: FindCoordinator + EndTxn, ListTransactions) used to
build a client per handle: a bootstrap, a FindCoordinator and a second connection to the
coordinator, with TLS and SASL handshakes on a secured cluster, before each EndTxn. Kept
open here (``RESUME_CLIENTS``, a ``kept_clients.KeptClients``), a handle's commit is one
EndTxn on an open connection (README, issue 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.net.compat import KafkaNetClient

from lockgate.common.kafka_config import kafka_python_settings
from lockgate.common.kept_clients import KeptClients

_CLIENT_ID = "lockgate-txn-resume"
_IO_TIMEOUT_MS = 10_000


@dataclass
class ResumeClient:
    """A kept-open network client of one sink cluster and the transaction coordinators it
    found, by transactional id (looked up again when the broker says it moved)."""

    net: KafkaNetClient
    coordinators: dict[str, Any] = field(default_factory=dict)


def new_resume_client(bootstrap_servers: str, properties: Mapping[str, str]) -> ResumeClient:
    """A kafka-python network client of the sink cluster, not connected yet (the first use
    bootstraps it): it speaks the cluster's ``security.protocol`` (TLS, SASL PLAIN and
    SCRAM) from ``properties``, the resolved librdkafka properties (mapped by
    :func:`kafka_python_settings`)."""
    servers = [a.strip() for a in bootstrap_servers.split(",") if a.strip()]
    if not servers:
        raise ValueError("bootstrap_servers must name at least one host:port")
    return ResumeClient(
        KafkaNetClient(
            bootstrap_servers=servers,
            **{"client_id": _CLIENT_ID, **kafka_python_settings(properties)},
            request_timeout_ms=_IO_TIMEOUT_MS,
        )
    )


#: The commit path's clients, kept open between commits (``kept_clients.py``): a handle's
#: commit is then one EndTxn on an open connection, where it was a bootstrap, a
#: FindCoordinator and a second connection each time (README, issue 13). One user at a
#: time per client: kafka-python's network client is driven by the thread polling it.
RESUME_CLIENTS: KeptClients[ResumeClient] = KeptClients(
    new_resume_client, close=lambda client: client.net.close(), shared=False
)


__all__ = ["RESUME_CLIENTS", "ResumeClient", "new_resume_client"]
