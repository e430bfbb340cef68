"""GET /v1/guardrails lists the instance's guardrails with whether each applies to the
caller's organization; PUT /v1/guardrails/{name} turns an opt-in one on or off for it.

Management keys only, as the cache purge: a guardrail is the organization's policy for every
key. Guardrails without `opt_in` are the operator's and apply to everyone: turning one off is
400 `guardrail_not_optional`. An unknown name is 404 `guardrail_not_found`. The change is
stored, applied at once on this instance, and on the others within their refresh interval
(actors/opt_in_refresh.py)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.config.policies import GuardrailConfig
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.decoding import decode_json
from protocol.guardrails_api import GuardrailItem, GuardrailList, GuardrailSwitch
from services.guardrails.opt_ins import OptIns
from storage.org_guardrails import OrgGuardrailRepository

_TAG = "Guardrails"


def _item(config: GuardrailConfig, enabled: bool) -> GuardrailItem:
    return GuardrailItem(
        name=config.name,
        kind=config.kind,
        stages=list(config.stages),
        action=config.action,
        models=list(config.models),
        on_error=config.on_error,
        opt_in=config.opt_in,
        enabled=enabled,
    )


def routes(
    guardrails: Sequence[GuardrailConfig], repo: OrgGuardrailRepository, opt_ins: OptIns | None
) -> Routes:
    by_name = {g.name: g for g in guardrails}
    r = Routes()

    @r.operation(
        Operation(
            "GET",
            "/v1/guardrails",
            "The gateway's guardrails, and whether each applies to the organization",
            _TAG,
            response=GuardrailList,
            auth=Auth.MANAGEMENT,
            errors=(401, 403),
        )
    )
    async def list_guardrails(request: Request) -> Response:
        assert request.principal is not None
        on = await repo.enabled(request.principal.org_id)
        data = [_item(g, not g.opt_in or g.name in on) for g in guardrails]
        return json_response(GuardrailList(data=data))

    @r.operation(
        Operation(
            "PUT",
            "/v1/guardrails/{name}",
            "Turn an opt-in guardrail on or off for the organization",
            _TAG,
            request=GuardrailSwitch,
            response=GuardrailItem,
            auth=Auth.MANAGEMENT,
            errors=(400, 401, 403, 404),
        )
    )
    async def switch_guardrail(request: Request) -> Response:
        assert request.principal is not None
        org_id = request.principal.org_id
        name = request.path_params["name"]
        body = decode_json(await request.body(), GuardrailSwitch)  # a bad body is 400 first
        config = by_name.get(name)
        if config is None:
            raise errors.not_found(
                f"No guardrail named {name!r} is configured.", code="guardrail_not_found"
            )
        if not config.opt_in:
            raise errors.invalid_request(
                f"The guardrail {name!r} applies to every organization; it cannot be turned"
                " on or off.",
                param="enabled",
                code="guardrail_not_optional",
            )
        await repo.set(org_id, name, enabled=body.enabled)
        if opt_ins is not None:
            opt_ins.set(name, org_id, enabled=body.enabled)
        return json_response(_item(config, body.enabled))

    return r
