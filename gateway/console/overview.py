"""The overview (live) and the operator's supervision page."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors.supervisor import ActorSnapshot
from gateway.console import data
from gateway.console.figures import instance_figures
from gateway.console.http import Page
from gateway.console.routing import PREFIX, html, route
from gateway.inference.deployments import deployment_statistics
from gateway.server.asgi import Send
from protocol.timefmt import now_us, to_iso

if TYPE_CHECKING:
    from gateway.console.app import Console


async def _overview_values(console: Console, page: Page, *, live: bool) -> dict[str, Any]:
    org = await console.org_of(page)
    values = await console.common(page, "overview", org, take_flash=not live)
    values["figures"] = await data.overview(console.runtime.storage, org.id) if org else None
    assert page.session is not None
    values["instance"] = (
        instance_figures(console.runtime.metrics.render()) if page.session.operator else None
    )
    values["updated"] = to_iso(now_us())
    return values


@route("GET", PREFIX + "/overview")
async def overview(console: Console, page: Page, send: Send) -> None:
    await html(
        send, console.render("overview.html", **await _overview_values(console, page, live=False))
    )


@route("GET", PREFIX + "/overview/live")
async def overview_live(console: Console, page: Page, send: Send) -> None:
    values = await _overview_values(console, page, live=True)
    await html(send, console.render("overview_live.html", **values))


@dataclass(frozen=True)
class _Node:
    depth: int
    node: ActorSnapshot


def _flatten(node: ActorSnapshot, depth: int = 0) -> list[_Node]:
    out = [_Node(depth, node)]
    for child in node.children:
        out += _flatten(child, depth + 1)
    return out


@route("GET", PREFIX + "/supervision", operator_only=True)
async def supervision(console: Console, page: Page, send: Send) -> None:
    runtime = console.runtime
    values = await console.common(page, "supervision", None)
    values.update(
        nodes=_flatten(runtime.supervisor.snapshot()),
        pid=os.getpid(),
        worker=console.worker,
        hostname=console.hostname,
        upstreams=runtime.upstreams.statistics(),
        deployments=deployment_statistics(runtime.registry),
        gauges=instance_figures(
            runtime.metrics.render(), ("gateway_cache", "gateway_guardrail", "gateway_plugin")
        ).gauges,
    )
    await html(send, console.render("supervision.html", **values))
