"""A warning that may fire on every request (a store is down) logged at most every so often."""

from __future__ import annotations

import logging
import math
import time


class ThrottledWarning:
    def __init__(self, logger: logging.Logger, message: str, every_s: float = 10.0) -> None:
        self._logger = logger
        self._message = message  # one `%s`: the exception
        self._every_s = every_s
        self._last = -math.inf

    def __call__(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last >= self._every_s:
            self._last = now
            self._logger.warning(self._message, exc)
