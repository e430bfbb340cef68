"""The console's route table: each page module registers its handlers here (`route`), and
the console (app.py) looks a request up in `ROUTES`. Also the small helpers every page uses."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.console.http import Page, PageError, send_page
from gateway.server.asgi import Send
from storage.orgs import Org

if TYPE_CHECKING:
    from gateway.console.app import Console

PREFIX = "/console"
Handler = Callable[["Console", Page, Send], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    template: str  # the route as logged and counted
    handler: Handler
    signed_in: bool = True
    operator_only: bool = False


ROUTES: list[Route] = []


def route(
    method: str, path: str, *, signed_in: bool = True, operator_only: bool = False
) -> Callable[[Handler], Handler]:
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[A-Za-z0-9_.\-]{1,80})", path)

    def add(handler: Handler) -> Handler:
        ROUTES.append(
            Route(
                method,
                re.compile(f"^{regex}$"),
                path,
                handler,
                signed_in=signed_in,
                operator_only=operator_only,
            )
        )
        return handler

    return add


def usd(value: float) -> str:
    """Cents for amounts from a dollar (and zero), micro-dollars below: a request costs
    fractions of a cent."""
    amount = float(value)
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:.6f}"


async def html(send: Send, body: bytes, status: int = 200) -> None:
    await send_page(send, status, body)


async def need_org(console: Console, page: Page, form: dict[str, str] | None = None) -> Org:
    org = await console.org_of(page, form)
    if org is None:
        raise PageError(400, "Choose an organization first.")
    return org
