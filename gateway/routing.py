"""Routes declared once: the same declaration registers the Quart view and documents it in
/openapi.json (request and response types are the msgspec structs that validate and encode)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from quart import Blueprint

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # Quart form: /v1/keys/<key_id>
    summary: str
    tag: str
    request: type | None = None
    response: type | None = None
    response_content_type: str = "application/json"
    success_status: int = 200
    auth: str | None = "bearer"  # None: no credential needed
    scope: str | None = None  # the scope a secret key needs
    errors: tuple[int, ...] = ()
    query: tuple[tuple[str, str, str], ...] = ()  # (name, JSON type, description)


@dataclass
class Routes:
    """A blueprint plus the operations declared on it."""

    blueprint: Blueprint
    operations: list[Operation] = field(default_factory=list)

    def operation(self, op: Operation) -> Callable[[F], F]:
        def register(view: F) -> F:
            self.operations.append(op)
            endpoint = f"{op.method.lower()}_{view.__name__}"
            self.blueprint.add_url_rule(op.path, endpoint, view, methods=[op.method])
            return view

        return register
