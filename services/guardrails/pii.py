# TEMP STUB (replaced by the pii helper's module)
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ENTITIES = ("email", "phone", "credit_card", "iban", "national_id", "ip_address", "secret")
TAGS = {e: f"[{e.upper()}]" for e in ENTITIES}
MAX_MATCH_CHARS = 128
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


@dataclass(frozen=True, slots=True)
class PiiMatch:
    entity: str
    start: int
    end: int


def find_pii(text: str, entities: frozenset[str] = frozenset(ENTITIES)) -> list[PiiMatch]:
    if "email" not in entities:
        return []
    return [PiiMatch("email", m.start(), m.end()) for m in _EMAIL.finditer(text)]


def redact(text: str, matches: Sequence[PiiMatch]) -> str:
    return text
