"""POST /v1/rerank: check the request against the model's limits, hold one search unit per
document, ask the provider in its own format (protocol/rerank/), check and sort its answer,
charge what was billed."""

from __future__ import annotations

import logging
from decimal import Decimal

import msgspec

from actors.throttled_log import ThrottledWarning
from gateway.inference.admission import admit_model, reserve_units
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.plugins import flow
from gateway.web.request import Request
from protocol.errors import UpstreamMalformed
from protocol.ids import new_id
from protocol.rerank import adapter_for
from protocol.rerank.ranking import answer
from protocol.rerank.request import check_request, decode_request

log = logging.getLogger("gateway.rerank")
bad_answer = ThrottledWarning(log, "malformed rerank answer: %s")


class Rerank:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        body = await http.body()
        request = decode_request(body)
        # The API's rerank error table: an invalid model is 400, unknown ones included.
        model, price = await admit_model(
            call, deps, request.model, capability="rerank", unknown_model_status=400
        )
        checked = await flow.checked_body(deps.plugins, call, "rerank", model, request.model, body)
        if checked is not body:  # a guardrail redacted the query or documents
            request = decode_request(checked)
        limits = model.price
        ranking = check_request(request, limits.max_document_tokens if limits else None)
        adapter = adapter_for(model.provider.kind)
        pairs = len(ranking.texts)  # one search unit per (query, document) pair
        unit_price = price.usd_per_search_unit if price is not None else None
        await reserve_units(call, deps, unit_price, capability="rerank", units=Decimal(pairs))
        try:
            client = deps.upstreams.get(model.provider.name)
            body = adapter.request_body(ranking, model.upstream)
            content, _ = await client.post_json(
                adapter.path, body, api_key=call.own_key, trace=call.trace_headers
            )
            try:
                upstream = adapter.parse_answer(content, pairs)
            except UpstreamMalformed as exc:
                failure = exc.named(model.provider.name)
                bad_answer(failure)
                raise failure from None  # the boundary answers it (gateway/web/errors.py)
            # The provider's own count when it gives one (Cohere may count less), never more
            # than was held: the hold is the most the client agreed to pay.
            units = pairs if upstream.search_units is None else min(upstream.search_units, pairs)
            call.charge_units(Decimal(units), unit_price)
        finally:
            call.close_bill()
        out = answer(
            ranking,
            upstream.scores,
            answer_id=new_id("rerank"),
            model=model.id,
            search_units=units,
        )
        await call.answer_json(msgspec.json.encode(out))
