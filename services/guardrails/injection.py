# TEMP STUB
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InjectionMatch:
    category: str
    start: int
    end: int


_R = re.compile(r"ignore (all )?previous instructions", re.I)


def detect_injection(text: str) -> InjectionMatch | None:
    m = _R.search(text)
    return None if m is None else InjectionMatch("jailbreak", m.start(), m.end())
