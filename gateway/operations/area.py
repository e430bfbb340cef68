"""The operations area: health, metrics, the actor tree, /openapi.json. Unlike the others it
is opened per app (gateway/app.py), since its routes describe that app: all its operations,
and which worker process serves it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from gateway.area import Area
from gateway.core import Core
from gateway.inference.deployments import deployment_statistics
from gateway.operations.routes import ALONE, Worker, routes
from gateway.web import Operation


def open_operations(
    core: Core, all_operations: Callable[[], Sequence[Operation]], worker: Worker = ALONE
) -> Area:
    return Area(
        routes=routes(
            core.readiness,
            core.supervisor,
            core.metrics,
            all_operations,
            worker,
            services={
                "upstreams": core.upstreams.statistics,
                "deployments": partial(deployment_statistics, core.registry),
            },
        )
    )
