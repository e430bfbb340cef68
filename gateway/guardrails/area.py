"""The guardrails area: its API over the organizations' opt-in choices (the request path reads
them from the plugins' snapshot, gateway/plugins/build.py)."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.guardrails.routes import routes
from gateway.inference.area import InferenceArea
from storage.org_guardrails import OrgGuardrailRepository


def open_guardrails(core: Core, inference: InferenceArea) -> Area:
    plugins = inference.deps.plugins
    opt_ins = plugins.opt_ins if plugins is not None else None
    repo = OrgGuardrailRepository(core.storage.db)
    return Area(routes=routes(core.config.guardrails, repo, opt_ins))
