"""Streams at their edges, over real HTTP with the bench upstream: a client that closes the
moment it read `data: [DONE]` had a whole, successful stream (logged 200, a success event,
billed as usual); a stream still running when the graceful drain runs out ends with the
error frame and `[DONE]`, is logged as cut by shutdown, and is billed for what was relayed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.billing import charge_micros
from storage.events import Event
from storage.open import Storage, open_database
from tests.inference import (
    PRICE_IN,
    PRICE_OUT,
    Rig,
    chunks,
    inference_rig,
    ledger,
    send_raw_chat,
)
from tests.waiting import wait_until, wait_until_async

MESSAGES = [{"role": "user", "content": "hi"}]
STREAM = {
    "model": "small",
    "messages": MESSAGES,
    "max_tokens": 5,
    "stream": True,
    "stream_options": {"include_usage": True},
}
SAMPLE_ALL = "\n[webhooks]\ncompletion_success_sample_rate = 1.0\n"
CREDIT = 100_000_000  # the rig's top-up, micro-USD
GRACE = 0.6  # graceful_timeout_s of the drain tests


def charge_of(usage: dict[str, Any]) -> int:
    cost = (usage["prompt_tokens"] * PRICE_IN + usage["completion_tokens"] * PRICE_OUT) / 10**6
    return charge_micros(cost, Decimal("4"))  # the free plan's fee


def access_lines(caplog: pytest.LogCaptureFixture, route: str) -> list[dict[str, Any]]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    return [line for line in lines if line["route"] == route]


def sse_text(response: bytes) -> str:
    """The body of a raw chunked HTTP/1.1 response (as far as it was read)."""
    head, _, rest = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head, head
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        body += rest[:size]
        rest = rest[size + 2 :]
    return body.decode()


async def completion_events(rig: Rig) -> list[Event]:
    await rig.gateway.runtime.event_writer.flush()
    stored = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=10_000)
    return [e for e in stored if e.type.startswith("completion.")]


async def read_to_done_and_close(rig: Rig, body: dict[str, Any], out: list[bytes]) -> None:
    """A raw HTTP/1.1 client: send a streamed chat request, read until `data: [DONE]`, close
    the socket at once (as SDKs do: they stop at the end marker)."""
    stream = await send_raw_chat(rig, body)
    received = b""
    with trio.fail_after(10):
        while b"data: [DONE]\n\n" not in received:
            data = await stream.receive_some()
            assert data, received
            received += data
    await stream.aclose()
    out.append(received)


async def test_a_client_that_closes_right_after_done_had_a_successful_stream(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The race: the client sees `[DONE]` and closes while the server still has the stream's
    end to do. Content frames 10 ms apart leave the relay's channel empty when the last ones
    come, which is when the end used to be written separately, after the client could leave
    (about a third of these streams were logged 499 with a `completion.error`)."""
    caplog.set_level("INFO", logger="gateway.access")
    n = 40
    async with inference_rig(database_url, tmp_path, extra_toml=SAMPLE_ALL) as rig:
        rig.upstream.behavior.chunk_interval_s = 0.01
        bodies: list[bytes] = []
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(read_to_done_and_close, rig, STREAM, bodies)

        async def all_events() -> bool:  # billed: written with the usage rows by the accountant
            return len(await completion_events(rig)) >= n

        await wait_until_async(all_events)
        events = await completion_events(rig)
        balance, rows = await ledger(rig, settled=n)
        await wait_until(lambda: len(access_lines(caplog, "/v1/chat/completions")) >= n)
    logged = access_lines(caplog, "/v1/chat/completions")
    assert [line["status"] for line in logged] == [200] * n
    assert [(e.type, e.data["status"]) for e in events] == [("completion.success", 200)] * n
    # Billed as any stream: the upstream's reported usage, once per request.
    usages = []
    for body in bodies:
        (usage,) = [c["usage"] for c in chunks(sse_text(body)) if c.get("usage")]
        usages.append(usage)
    assert sorted(-row.amount_micros for row in rows) == sorted(charge_of(u) for u in usages)
    assert balance == CREDIT - sum(charge_of(u) for u in usages)


@dataclass
class Drained:
    """What a stream cut by the end of a drain left: the client's data frames, the request's
    access log line, and, read after the instance stopped, its usage rows, the balance and its
    completion events."""

    frames: list[str]
    line: dict[str, Any]
    charges: list[int]
    balance: int
    events: list[Event]
    ended_after: float  # seconds from the drain's start to the stream's end


async def stream_through_a_drain(
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
) -> Drained:
    """Open a long stream (1,000 tokens 50 ms apart: 50 s), start the drain once 3 frames
    came, and read the stream to its end."""
    caplog.set_level("INFO", logger="gateway.access")
    stop = trio.Event()
    frames: list[str] = []
    async with inference_rig(
        database_url, tmp_path, graceful_timeout_s=GRACE, stop=stop, extra_toml=SAMPLE_ALL
    ) as rig:
        org_id = rig.gateway.org_id
        rig.upstream.behavior.chunk_interval_s = 0.05
        rig.upstream.behavior.completion_tokens = 1000
        auth = rig.gateway.auth(rig.key)
        with trio.fail_after(10):
            async with rig.gateway.client.stream("POST", path, json=body, headers=auth) as r:
                assert r.status_code == 200
                async for text in r.aiter_lines():  # to the body's end: no protocol error
                    if text.startswith("data: "):
                        frames.append(text.removeprefix("data: "))
                        if len(frames) == 3:
                            stop.set()  # the drain begins
                            drain_began = trio.current_time()
        ended_after = trio.current_time() - drain_began
    (line,) = access_lines(caplog, path)
    async with open_database(database_url) as db:  # the instance has stopped
        storage = Storage.over(db)
        rows, _ = await storage.ledger.list(org_id, type="usage", limit=10, offset=0)
        account = await storage.ledger.account(org_id)
        stored = await storage.events.list_for_org(org_id, limit=100)
    events = [e for e in stored if e.type.startswith("completion.")]
    charges = [-row.amount_micros for row in rows]
    return Drained(frames, line, charges, account.balance_micros, events, ended_after)


def assert_cut_by_shutdown(drained: Drained, error: dict[str, Any], relayed: int) -> None:
    """The stream ended within the grace with `error` and `[DONE]`; logged 503
    `server_shutting_down` with `relayed` completion tokens, billed for them, one
    `completion.error` carrying the error the client got."""
    assert drained.ended_after < GRACE  # cut within the graceful timeout, not after it
    assert drained.frames[-1] == "[DONE]"
    assert error["type"] == "server_error" and error["code"] == "server_shutting_down"
    assert "shutting down" in error["message"]
    assert 3 <= relayed < 1000
    line = drained.line
    assert line["status"] == 503 and line["code"] == "server_shutting_down"
    assert line["completion_tokens"] == relayed  # what was relayed, as for a client that left
    usage = {k: line[k] for k in ("prompt_tokens", "completion_tokens")}
    assert drained.charges == [charge_of(usage)]
    assert drained.balance == CREDIT - charge_of(usage)
    (event,) = drained.events
    assert event.type == "completion.error" and event.data["status"] == 503
    assert event.data["error"] == {k: error[k] for k in ("type", "code", "message")}


async def test_a_chat_stream_cut_at_the_end_of_the_drain_ends_with_an_error_frame_and_done(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"model": "small", "messages": MESSAGES, "stream": True, "max_tokens": 1000}
    drained = await stream_through_a_drain(
        database_url, tmp_path, caplog, "/v1/chat/completions", body
    )
    error = json.loads(drained.frames[-2])["error"]
    assert error["param"] is None
    content = [
        c
        for c in map(json.loads, drained.frames[:-2])
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert_cut_by_shutdown(drained, error, len(content))


async def test_a_responses_stream_cut_at_the_end_of_the_drain_ends_failed_and_done(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"model": "small", "input": "hi", "stream": True, "max_output_tokens": 1000}
    drained = await stream_through_a_drain(database_url, tmp_path, caplog, "/v1/responses", body)
    failed = json.loads(drained.frames[-2])
    assert failed["type"] == "response.failed"
    # The Responses error vocabulary has no such code (as for upstream failures): its client
    # reads `server_error` and the message; the log and the event keep the precise code.
    shown = failed["response"]["error"]
    assert shown["code"] == "server_error"
    error = {"type": "server_error", "code": "server_shutting_down", "message": shown["message"]}
    deltas = [f for f in drained.frames if '"response.output_text.delta"' in f]
    assert_cut_by_shutdown(drained, error, len(deltas))


async def test_a_stream_broken_upstream_is_charged_for_its_content_frames_only(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error frame and `[DONE]` that end a broken stream are not relayed tokens."""
    caplog.set_level("INFO", logger="gateway.access")
    async with inference_rig(database_url, tmp_path) as rig:
        rig.upstream.behavior.break_after_chunks = 3
        r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": True})
        assert r.status_code == 200
        balance, rows = await ledger(rig, settled=1)
        await wait_until(lambda: len(access_lines(caplog, "/v1/chat/completions")) == 1)
    content = [c for c in chunks(r.text)[:-1] if c["choices"][0]["delta"].get("content")]
    assert len(content) == 3
    (line,) = access_lines(caplog, "/v1/chat/completions")
    assert line["status"] == 200 and line["completion_tokens"] == 3
    usage = {k: line[k] for k in ("prompt_tokens", "completion_tokens")}
    assert [-row.amount_micros for row in rows] == [charge_of(usage)]
    assert balance == CREDIT - charge_of(usage)
