"""GET /v1/models and GET /v1/models/{id}: the models configured in `[[models]]`, as far as
the caller's key may use them."""

from __future__ import annotations

import msgspec

from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.model_registry import ResolvedModel, model_not_found
from gateway.web.request import Request


class ModelObject(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[ModelObject]


def _allowed(call: Call, model: ResolvedModel) -> bool:
    key = call.principal.key
    return (
        key is None
        or key.allowed_models is None
        or bool(set(model.names()) & set(key.allowed_models))
    )


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
        await call.answer_json(msgspec.json.encode(ModelList("list", data)))

    async def retrieve(self, http: Request) -> None:
        call = Call(http)
        model_id = http.path_params["model_id"]
        for alias, model in self._deps.registry.configured():
            if model_id in (alias, model.id) and _allowed(call, model):
                obj = ModelObject(model_id, "model", 0, model.provider.name)
                await call.answer_json(msgspec.json.encode(obj))
                return
        raise model_not_found(model_id)
