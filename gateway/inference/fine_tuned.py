"""Fine-tuned models as models: resolving an `ft:` name for the caller's organization, and
DELETE /v1/models/{model_id}.

An `ft:` name is looked up in storage on every request that names one (one primary-key read;
no per-instance cache, so a registration or a deletion on any instance applies at once on
all). Names other than `ft:…` never come here: the regular path stays free of any await.
Unknown, deleted and other organizations' models are the same 404 `model_not_found` as an
unknown model, and so are names no registration can have (too long, control characters),
which are refused before any query.
"""

from __future__ import annotations

from urllib.parse import quote

import msgspec

from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.model_registry import ResolvedModel, model_not_found
from gateway.provider_keys.gateway_key import require_gateway_key
from gateway.web.request import Request
from protocol.errors import APIError, UpstreamStatusError, forbidden

FT_PREFIX = "ft:"
MAX_NAME_CHARS = 512
# Provider kinds that speak OpenAI's fine-tuning API (DELETE /v1/models/{id}).
_DELETES_AT_PROVIDER = frozenset({"openai"})


class ModelDeleted(msgspec.Struct):
    id: str
    object: str
    deleted: bool


def plausible_name(name: str) -> bool:
    """Whether `name` could be a registered fine-tuned model's (cheap; no I/O)."""
    return name.startswith(FT_PREFIX) and len(name) <= MAX_NAME_CHARS and name.isprintable()


async def resolve_fine_tuned(deps: InferenceDeps, org_id: str, name: str) -> ResolvedModel:
    """The organization's live fine-tuned model `name`, routed to the provider that trained it;
    APIError 404 `model_not_found` otherwise (also when its provider is gone from the config).
    Cancellation abandons the read."""
    if plausible_name(name):
        record = await deps.fine_tuned_models.get(org_id, name)
        if record is not None:
            model = deps.registry.fine_tuned(record)
            if model is not None:
                return model
    raise model_not_found(name)


def keep_affinity(call: Call, model: ResolvedModel, own: str | None) -> str | None:
    """The key a fine-tuned model is called with: the one whose provider account trained it
    (it exists nowhere else). Trained with the org's own key that is gone: 400
    `provider_key_required`. Trained with the gateway's: the gateway's, even when the org has
    its own key for the provider now (returns None, and the request is billed)."""
    if model.trained_with_own_key:
        if own is None:
            raise APIError(
                400,
                f"The model {model.id!r} was trained with this organization's own key for the"
                f" provider {model.provider.name!r} and exists only in that account; add the key"
                " again with POST /v1/provider_keys.",
                type="invalid_request_error",
                code="provider_key_required",
                param="model",
            )
        return own
    if own is not None:  # the org's key cannot reach a model in the gateway's account
        call.own_key = None
        call.ctx.own_key = None
    return None


class DeleteModel:
    """DELETE /v1/models/{model_id}: an organization's fine-tuned model, at the provider first
    (when it speaks OpenAI's fine-tuning API; its 404 means already gone there), then here. A
    provider failure is the client's 502/504 and the model stays, so a retry finishes the job
    and no model is left behind at the provider. Configured models cannot be deleted: 403."""

    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        name = http.path_params["model_id"]
        org_id = call.principal.org_id
        if not name.startswith(FT_PREFIX):
            try:
                deps.registry.resolve(name)
            except APIError:
                raise model_not_found(name) from None
            raise forbidden(
                f"The model {name!r} is configured by the gateway; only fine-tuned models can"
                " be deleted.",
                code="model_not_deletable",
            )
        model = await resolve_fine_tuned(deps, org_id, name)
        call.ctx.model = model.id
        call.check_model_allowed(model)
        if model.provider.kind in _DELETES_AT_PROVIDER and (
            model.provider.supports is None or "fine_tuning" in model.provider.supports
        ):
            own = await call.find_own_key(deps.provider_keys, model.provider.name)
            if model.trained_with_own_key is not None:
                own = keep_affinity(call, model, own)
            if own is None:
                require_gateway_key(model.provider)
            client = deps.upstreams.get(model.provider.name)
            try:
                await client.delete_json(
                    f"models/{quote(model.upstream, safe='')}", api_key=call.own_key
                )
            except UpstreamStatusError as exc:
                if exc.status != 404:
                    raise  # the boundary maps it (gateway/web/errors.py)
        if await deps.fine_tuned_models.delete(org_id, name) is None:
            raise model_not_found(name)  # a concurrent delete won
        await call.answer_json(msgspec.json.encode(ModelDeleted(name, "model", True)))
