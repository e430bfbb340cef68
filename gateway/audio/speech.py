"""POST /v1/audio/speech: checked, priced per 1,000 input characters, and relayed as the
provider produces it (with or without `stream`: the bytes are never held whole). The charge is
settled once the response began, even if the client leaves mid-way: the provider did the work
and the units (characters) were known from the start (docs/decisions.md, "Audio")."""

from __future__ import annotations

import trio

from actors.upstream import UpstreamClient, mapped_errors
from gateway.inference.admission import admit_model, reserve_units
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.sse_response import cancel_on_disconnect
from gateway.plugins import flow
from gateway.web.request import Request
from protocol.audio.speech import check_voice, parse_speech, upstream_body
from protocol.errors import UpstreamError


class Speech:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        body = await http.body()
        request = parse_speech(body)
        model, price = await admit_model(call, deps, request.model, capability="speech")
        checked = await flow.checked_body(deps.plugins, call, "speech", model, request.model, body)
        if checked is not body:  # a guardrail redacted the input
            request = parse_speech(checked)
        check_voice(model.upstream, request.voice)
        unit_price = price.usd_per_1k_chars if price is not None else None
        units = request.thousand_chars
        client = deps.upstreams.get(model.provider.name)
        body = upstream_body(request, model.upstream)
        await reserve_units(call, deps, unit_price, capability="speech", units=units)
        try:
            failure = await relay(call, client, body, request.content_type)
            if failure is not None:
                raise failure  # the boundary maps it (gateway/web/errors.py)
        finally:
            if http.started:  # relayed, even in part (the client left, the provider broke)
                call.charge_units(units, unit_price)
            call.close_bill()


async def relay(
    call: Call, client: UpstreamClient, body: bytes, content_type: str
) -> UpstreamError | None:
    """Relay the provider's audio to the client chunk by chunk (back-pressure: the next chunk
    is read once the previous one was handed to the server). The failure when the provider
    failed before the response began (the caller answers it); once begun, a failure just ends
    the response early. A client that leaves cancels the relay, and leaving the upstream
    response early closes its connection, which stops the provider."""
    http = call.request
    failure: UpstreamError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_on_disconnect, http.receive, nursery.cancel_scope)
        try:
            async with client.stream(
                "audio/speech", body, accept=content_type, api_key=call.own_key
            ) as response:
                http.started = True
                headers = [(b"content-type", content_type.encode()), *http.headers]
                await http.send({"type": "http.response.start", "status": 200, "headers": headers})
                with mapped_errors(client.name):
                    while chunk := await response.next_chunk():
                        await http.send(
                            {"type": "http.response.body", "body": chunk, "more_body": True}
                        )
                await http.send({"type": "http.response.body", "body": b"", "more_body": False})
        except UpstreamError as exc:
            if not http.started:
                failure = exc
        nursery.cancel_scope.cancel()
    return failure
