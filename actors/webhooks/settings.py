"""The delivery side's settings, as plain values (the runtime maps `[webhooks]` onto them)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from protocol.netguard import Network


@dataclass(frozen=True)
class WebhookSettings:
    allowed_private_networks: tuple[Network, ...] = ()
    allow_http: bool = False
    allowed_ports: tuple[int, ...] = ()  # besides 443 (80 with allow_http): sender.py
    poll_interval_s: float = 0.5  # leases, new actors, wakes for new outbox events
    lease_ttl_s: float = 15.0
    attempt_timeout_s: float = 10.0
    retention_days: float = 30.0
    idle_poll_s: float = 5.0  # an idle actor looks at the outbox this often without a wake
    stats_interval_s: float = 5.0  # queue depths for the statistics
    janitor_interval_s: float = 600.0
    ssl_context: ssl.SSLContext | None = None  # None: the system store (honours SSL_CERT_FILE)
