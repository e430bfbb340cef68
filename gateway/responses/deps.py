"""What the Responses routes are given: the inference deps (registry, upstreams, relays,
limiter, accountant, provider keys) and the response store."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.inference.deps import InferenceDeps
from services.responses import ResponseStore


@dataclass(frozen=True)
class ResponsesDeps:
    inference: InferenceDeps
    store: ResponseStore
