"""GET /openapi.json tells the truth: it validates as OpenAPI 3.2, every operation lists what
the layers around it answer (405, 408, 413, 431, 500, ...), events are described one at a time
(`itemSchema`), and answers the gateway really gives — file downloads of any stored type,
speech in every format, transcripts as text, a replaced provider key, a cancel without a body,
streams of every kind, refusals by the router and the request layer — are each the status and
media type the document declares for them, their events the schema it gives."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import schemathesis
from PIL import Image

from gateway.web.openapi import ALWAYS, VERSION
from protocol.errors import ErrorBody
from protocol.openai_schema import ChatCompletionChunk
from protocol.sse import SSEDecoder
from tests.gateway.audio.support import AUDIO_TOML, FORM_TYPE, field, file_part, form, wav
from tests.inference import Rig, inference_rig

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, extra_toml=AUDIO_TOML) as r:
        yield r


async def document(rig: Rig) -> dict[str, Any]:
    r = await rig.gateway.client.get("/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def documented(doc: dict[str, Any], method: str, path: str, response: Any) -> dict[str, Any]:
    """The response object `path`'s `method` declares for `response`'s status, after checking
    the answer's media type is one it declares (wildcards as OpenAPI reads them)."""
    responses = doc["paths"][path][method.lower()]["responses"]
    status = str(response.status_code)
    assert status in responses, f"{method} {path} answered {status}, documented {list(responses)}"
    declared: dict[str, Any] = responses[status]
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    kinds = list(declared.get("content", {}))
    assert any(
        kind == "*/*" or kind == media or (kind.endswith("/*") and media.startswith(kind[:-1]))
        for kind in kinds
    ), f"{method} {path} answered {status} as {media!r}, documented {kinds}"
    return declared


def component(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    found: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


# --- the document as a whole --------------------------------------------------------------------


async def test_the_document_validates_as_openapi(rig: Rig) -> None:
    # Schemathesis (a dev dependency: the suite's fuzz run) checks it against the official
    # OpenAPI schema of its version; schema objects are JSON Schema 2020-12 (msgspec's).
    doc = await document(rig)
    assert doc["openapi"] == VERSION == "3.2.0"
    schemathesis.openapi.from_dict(doc).validate()


async def test_every_operation_declares_what_the_layers_around_it_answer(rig: Rig) -> None:
    doc = await document(rig)
    error = {"$ref": "#/components/schemas/ErrorBody"}
    assert component(doc, error)["required"] == ["error"]
    count = 0
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            assert method in METHODS
            count += 1
            where = f"{method.upper()} {path}"
            responses = operation["responses"]
            declared = {int(status) for status in responses if int(status) >= 400}
            assert set(ALWAYS) <= declared, where  # 400 405 408 431 500
            if "requestBody" in operation:
                assert 413 in declared, where
            if "security" in operation:
                assert {401, 503} <= declared, where
            if "{" in path:
                assert 404 in declared, where
            for status in declared:
                assert responses[str(status)]["content"] == {"application/json": {"schema": error}}
            assert responses["405"]["headers"]["Allow"]["required"] is True
            if "requestBody" in operation:
                content = operation["requestBody"]["content"]
                assert len(content) == 1 and all("schema" in m for m in content.values()), where
            ok = [responses[s] for s in responses if int(s) < 300]
            assert ok and all(r["description"] for r in ok), where
    assert count >= 55


async def test_events_are_described_one_at_a_time(rig: Rig) -> None:
    doc = await document(rig)
    streams = {
        ("post", "/v1/chat/completions"): "ChatCompletionChunk",
        ("post", "/v1/responses"): "StreamEvent",
        ("get", "/v1/fine_tuning/jobs/{job_id}/events"): "JobEvent",
    }
    found = {
        (method, path)
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if "text/event-stream"
        in operation["responses"][next(iter(operation["responses"]))].get("content", {})
    }
    assert found == set(streams)
    for (method, path), name in streams.items():
        ok = doc["paths"][path][method]["responses"]["200"]
        media = ok["content"]["text/event-stream"]
        assert set(media) == {"itemSchema"}  # `schema` would describe the whole stream
        event = media["itemSchema"]
        assert event["required"] == ["data"] and event["properties"]["event"] == {"type": "string"}
        done, json_data = event["properties"]["data"]["anyOf"]
        assert done == {"const": "[DONE]"}
        assert json_data["contentMediaType"] == "application/json"
        assert json_data["contentSchema"]["anyOf"] == [
            {"$ref": f"#/components/schemas/{name}"},
            {"$ref": "#/components/schemas/ErrorBody"},
        ]
        assert "application/json" in ok["content"]  # the same route answers JSON too


# --- answers the gateway gives, against the document --------------------------------------------


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (3, 3), (10, 20, 30)).save(out, format="PNG")
    return out.getvalue()


async def test_file_downloads_of_any_stored_type_are_documented(rig: Rig) -> None:
    doc = await document(rig)
    gw = rig.gateway
    path = "/v1/files/{file_id}/content"
    content = doc["paths"][path]["get"]["responses"]["200"]["content"]
    assert list(content) == ["*/*"]
    assert component(doc, content["*/*"]["schema"])["format"] == "binary"
    line = b'{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}\n'
    uploads = [
        ("vision", "p.png", png(), "image/png"),
        ("fine-tune", "t.jsonl", line, "application/jsonl"),
        ("user_data", "r.pdf", b"%PDF-1.4 not really", "application/pdf"),
        ("user_data", "a.zip", b"PK\x03\x04", "application/zip"),
        ("user_data", "noext", b"\x00\x01", "application/octet-stream"),
    ]
    for purpose, name, data, media in uploads:
        up = await gw.client.post(
            "/v1/files",
            headers=gw.auth(),
            data={"purpose": purpose},
            files={"file": (name, data, "application/octet-stream")},
        )
        documented(doc, "POST", "/v1/files", up)
        assert up.status_code == 200, up.text
        got = await gw.client.get(f"/v1/files/{up.json()['id']}/content", headers=gw.auth())
        assert got.status_code == 200 and got.headers["content-type"] == media
        documented(doc, "GET", path, got)


async def test_speech_and_transcripts_in_every_format_are_documented(rig: Rig) -> None:
    doc = await document(rig)
    gw = rig.gateway
    for fmt in ("mp3", "opus", "aac", "flac", "wav", "pcm"):
        r = await gw.client.post(
            "/v1/audio/speech",
            headers=gw.auth(rig.key),
            json={"model": "tts", "input": "hello", "voice": "alloy", "response_format": fmt},
        )
        assert r.status_code == 200, r.text
        documented(doc, "POST", "/v1/audio/speech", r)
    for fmt in ("json", "text", "srt", "vtt", "verbose_json"):
        body = form(field("response_format", fmt), file_part(wav(1)), field("model", "whisper"))
        r = await gw.client.post(
            "/v1/audio/transcriptions",
            content=body,
            headers={**gw.auth(rig.key), "content-type": FORM_TYPE},
        )
        assert r.status_code == 200, r.text
        documented(doc, "POST", "/v1/audio/transcriptions", r)


async def test_statuses_of_the_router_the_request_layer_and_other_answers(rig: Rig) -> None:
    doc = await document(rig)
    client, auth = rig.gateway.client, rig.gateway.auth()
    # 405 on every path, with Allow.
    for path, method in (("/v1/credits", "DELETE"), ("/v1/keys/{key_id}", "POST")):
        r = await client.request(method, path.replace("{key_id}", "key_x"), headers=auth)
        assert r.status_code == 405 and r.headers["allow"]
        for operation in doc["paths"][path].values():
            assert "405" in operation["responses"]
    # 413 on a body over the route's limit.
    r = await client.post("/v1/keys", headers=auth, content=b"{" + b" " * 1_100_000 + b"}")
    documented(doc, "POST", "/v1/keys", r)
    assert r.status_code == 413
    # A provider key stored (201), then replaced (200).
    for status in (201, 200):
        r = await client.post(
            "/v1/provider_keys", headers=auth, json={"provider": "sim", "api_key": "sk-byok-1234"}
        )
        assert r.status_code == status, r.text
        documented(doc, "POST", "/v1/provider_keys", r)
    # Bodies that may be omitted are documented as optional.
    hook = await client.post(
        "/v1/webhooks", headers=auth, json={"url": "https://93.184.216.34/h", "events": ["*"]}
    )
    r = await client.post(f"/v1/webhooks/{hook.json()['id']}/rotate_secret", headers=auth)
    assert r.status_code == 200, r.text
    documented(doc, "POST", "/v1/webhooks/{webhook_id}/rotate_secret", r)
    for path, method in (
        ("/v1/webhooks/{webhook_id}/rotate_secret", "post"),
        ("/v1/webhooks/{webhook_id}/deliveries/{event_id}/redeliver", "post"),
        ("/v1/fine_tuning/jobs/{job_id}/cancel", "post"),
    ):
        assert doc["paths"][path][method]["requestBody"]["required"] is False
    assert doc["paths"]["/v1/keys"]["post"]["requestBody"]["required"] is True
    # The provider's 422 is passed through, and documented wherever a provider is called.
    rig.upstream.behavior.fail_status = 422
    r = await rig.chat({"model": "small", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 422, r.text
    documented(doc, "POST", "/v1/chat/completions", r)
    # An unknown model on rerank is 400 (the API's rerank table), documented too.
    assert "422" in doc["paths"]["/v1/rerank"]["post"]["responses"]


def events(body: bytes) -> list[Any]:
    return [event for event in SSEDecoder().feed(body)]


async def test_streamed_events_match_the_documented_item(rig: Rig) -> None:
    doc = await document(rig)
    chat = await rig.chat(
        {"model": "small", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    documented(doc, "POST", "/v1/chat/completions", chat)
    sent = events(chat.content)
    assert sent[-1].data == "[DONE]"
    for event in sent[:-1]:
        msgspec.json.decode(event.data, type=ChatCompletionChunk)
    # A stream that breaks: its error frame is the documented error shape.
    rig.upstream.behavior.break_after_chunks = 2
    broken = await rig.chat(
        {"model": "small", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    frames = events(broken.content)
    assert frames[-1].data == "[DONE]"
    assert msgspec.json.decode(frames[-2].data, type=ErrorBody).error.type == "upstream_error"
    rig.upstream.behavior.break_after_chunks = None
    streamed = await rig.gateway.client.post(
        "/v1/responses",
        headers=rig.gateway.auth(rig.key),
        json={"model": "small", "input": "hi", "stream": True},
    )
    documented(doc, "POST", "/v1/responses", streamed)
    item = component(doc, {"$ref": "#/components/schemas/StreamEvent"})
    assert set(item["required"]) == {"type", "sequence_number"}
    responses_events = events(streamed.content)
    assert responses_events[-1].data == "[DONE]"
    for event in responses_events[:-1]:
        payload = msgspec.json.decode(event.data)
        assert event.event == payload["type"] and isinstance(payload["sequence_number"], int)
