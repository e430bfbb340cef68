"""What an API area gives the app once opened: its routes, which of them end in a
`completion.*` event, and (in a subclass of its own) whatever another area or a test needs
from it, e.g. the files area's FileStore.

Each area package has an `area.py` with one `open_<area>(core, …)`, given the shared core
(gateway/core.py) and the other areas it needs:

- a plain function when the area only builds routes (keys, credits, inference);
- an `async def` when it also starts actors: it starts them under `core.supervisor`, which
  stops them with every other actor when the runtime ends;
- an async context manager when it owns a resource that must be closed (the files area's blob
  store). The runtime leaves it after the supervisor's nursery has ended, so no actor still
  uses the resource: such a manager must not hold a cancel scope or a nursery across its
  `yield` (run tasks as actors instead).

Gauges are registered by the area that owns what they read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from gateway.web import Routes


@dataclass(frozen=True, kw_only=True)
class Area:
    routes: Routes
    # Paths whose finished requests become completion.* events (gateway/inference/
    # completion_events.py).
    completion_routes: frozenset[str] = frozenset()


A = TypeVar("A", bound=Area)


class Areas:
    """The opened areas in serving order (the order of their routes in /openapi.json)."""

    def __init__(self, areas: tuple[Area, ...]) -> None:
        self._areas = areas

    def __iter__(self) -> Iterator[Area]:
        return iter(self._areas)

    def get(self, kind: type[A]) -> A:
        """The one opened area of type `kind` (e.g. `FineTuningArea`)."""
        found = [a for a in self._areas if isinstance(a, kind) and type(a) is kind]
        if len(found) != 1:
            raise LookupError(f"{len(found)} areas of type {kind.__name__}")
        return found[0]

    def __repr__(self) -> str:
        return f"Areas({', '.join(type(area).__name__ for area in self._areas)})"
