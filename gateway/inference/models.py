"""GET /v1/models and GET /v1/models/{id}: the models configured in `[[models]]`, then the
caller's organization's fine-tuned models (`owned_by` the organization's id), as far as the
caller's key may use them. Another organization's fine-tuned model is a 404 like any unknown
model."""

from __future__ import annotations

import msgspec

from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.fine_tuned import FT_PREFIX, plausible_name
from gateway.inference.model_registry import ResolvedModel, may_use, model_not_found
from gateway.web.request import Request
from storage.fine_tuned_models import FineTunedModel


class ModelObject(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[ModelObject]


def _allowed(call: Call, model: ResolvedModel | FineTunedModel) -> bool:
    key = call.principal.key
    names = model.names() if isinstance(model, ResolvedModel) else (model.id,)
    return key is None or may_use(names, key.allowed_models)


def _fine_tuned_object(model: FineTunedModel) -> ModelObject:
    return ModelObject(model.id, "model", model.created_at // 1_000_000, model.org_id)


class Models:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def list(self, http: Request) -> None:
        call = Call(http)
        data = [
            ModelObject(alias, "model", 0, model.provider.name)
            for alias, model in self._deps.registry.configured()
            if _allowed(call, model)
        ]
        tuned = await self._deps.fine_tuned_models.list(call.principal.org_id)
        data += [_fine_tuned_object(m) for m in tuned if _allowed(call, m)]
        await call.answer_json(msgspec.json.encode(ModelList("list", data)))

    async def retrieve(self, http: Request) -> None:
        call = Call(http)
        model_id = http.path_params["model_id"]
        if model_id.startswith(FT_PREFIX):
            tuned = None
            if plausible_name(model_id):
                tuned = await self._deps.fine_tuned_models.get(call.principal.org_id, model_id)
            if tuned is None or not _allowed(call, tuned):
                raise model_not_found(model_id)
            await call.answer_json(msgspec.json.encode(_fine_tuned_object(tuned)))
            return
        for alias, model in self._deps.registry.configured():
            if model_id in (alias, model.id) and _allowed(call, model):
                obj = ModelObject(model_id, "model", 0, model.provider.name)
                await call.answer_json(msgspec.json.encode(obj))
                return
        raise model_not_found(model_id)
