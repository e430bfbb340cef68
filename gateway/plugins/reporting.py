"""What a guardrail's finding leaves behind: a `guardrail.triggered` event (for a block, and
for a redaction where the guardrail says so; its `data` names the rule and the request, never
the matched text), a log line, and a count per guardrail, category and action for /metrics."""

from __future__ import annotations

import logging
from collections import Counter

from actors.event_writer import EventWriter
from services.plugins.interface import Blocked, Exchange
from storage.events import new_event

log = logging.getLogger("gateway.guardrails")


class GuardrailReports:
    def __init__(self, writer: EventWriter) -> None:
        self._writer = writer
        self.findings: Counter[tuple[str, str, str]] = Counter()  # (guardrail, category, action)

    def __call__(self, exchange: Exchange, finding: Blocked, action: str, event: bool) -> None:
        self.findings[(finding.plugin, finding.category, action)] += 1
        log.info(
            "guardrail %s: %s (%s, %s stage) on request %s",
            finding.plugin,
            action,
            finding.category,
            finding.stage,
            exchange.request_id,
        )
        if not event:
            return
        data = {
            "guardrail": finding.plugin,
            "kind": finding.kind,
            "category": finding.category,
            "action": action,
            "stage": finding.stage,
            "key_id": exchange.key_id,
            "model": exchange.model,
            "request_id": exchange.request_id,
        }
        self._writer.offer(new_event(exchange.org_id, "guardrail.triggered", data), urgent=True)
