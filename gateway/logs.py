"""Logging: access lines are JSON on their own; everything else is one plain line per event."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    root.handlers.clear()
    plain = logging.StreamHandler(sys.stderr)
    plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(plain)
    root.setLevel(level)

    access = logging.getLogger("gateway.access")
    access.handlers.clear()
    json_lines = logging.StreamHandler(sys.stdout)
    json_lines.setFormatter(logging.Formatter("%(message)s"))
    access.addHandler(json_lines)
    access.propagate = False
