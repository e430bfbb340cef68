"""The stream guard (services/plugins/stream_guard.py) over chat chunk frames: a finding split
across frames is caught before any of it is sent, redactions rewrite the frames, a classifier
window holds frames until judged, and failing checks follow on_error."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest
import trio

from protocol.openai_chat import error_frame
from protocol.sse import DONE, KEEPALIVE
from services.plugins.interface import (
    ALL_HOOKS,
    Blocked,
    Exchange,
    Outcome,
    PluginUnavailable,
    Replacement,
    Stored,
)
from services.plugins.pipeline import Pipeline
from services.plugins.stream_guard import GuardedStream

SECRET = re.compile(r"SECRET\d+")


class Sink:
    """The client's stream, in memory."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.finished = False

    async def open(self) -> bool:
        return True

    async def write(self, data: bytes) -> bool:
        self.writes.append(data)
        return True

    async def finish(self, before_last: Callable[[], Awaitable[None]] | None = None) -> None:
        self.finished = True

    @property
    def body(self) -> bytes:
        return b"".join(self.writes)


def chunk(text: str) -> bytes:
    event = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


def text_of(body: bytes) -> str:
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            event = msgspec.json.decode(line[6:])
            if "choices" in event:
                out.append(event["choices"][0]["delta"].get("content") or "")
    return "".join(out)


class Pattern:
    """An output check finding SECRET<digits>: block or redact."""

    def __init__(self, action: str = "block", window: int = 0, look_behind: int = 16) -> None:
        self.action = action
        self.window = window
        self.look_behind = look_behind
        self.calls: list[str] = []

    async def check(self, text: str, *, final: bool) -> Sequence[Replacement]:
        self.calls.append(text)
        found = [m for m in SECRET.finditer(text) if final or m.end() < len(text)]
        if not found:
            return ()
        if self.action == "block":
            raise Blocked("test", "secret", stage="output", at=found[0].start())
        return [Replacement(m.start(), m.end(), "[SECRET]") for m in found]


def cut(message: str, code: str, type: str) -> list[bytes]:
    return [error_frame(message, code=code, type=type), DONE]


def guarded(sink: Sink, *checks: Any, blocks: list[Blocked] | None = None) -> GuardedStream:
    found = blocks if blocks is not None else []
    return GuardedStream(sink, "chat", list(checks), cut, found.append, record_limit=10_000)


async def feed(stream: GuardedStream, pieces: list[str]) -> bool:
    for piece in pieces:
        if not await stream.write(chunk(piece)):
            return False
    await stream.finish()
    return True


async def test_a_value_split_across_frames_is_cut_before_any_of_it() -> None:
    sink, blocks = Sink(), []
    stream = guarded(sink, Pattern(), blocks=blocks)
    pieces = ["hello there, ", "the code is SEC", "RET12", "34 and then ", "more text after"]
    assert not await feed(stream, pieces)
    body = sink.body
    assert text_of(body) == "hello there, "  # what came before the frame that held the value
    assert b"SEC" not in body and b"after" not in body
    assert b'"code":"guardrail_blocked"' in body and body.endswith(DONE)
    assert [b.category for b in blocks] == ["secret"]
    assert stream.sent_deltas == 1 and stream.recorded is None
    assert not await stream.write(chunk("late"))  # the relay stops; nothing more goes out


async def test_redactions_rewrite_the_frames_across_their_boundary() -> None:
    sink = Sink()
    stream = guarded(sink, Pattern("redact"))
    pieces = ["a SEC", "RET9", "9 b ", "SECRET1 c", " done"]
    assert await feed(stream, pieces)
    assert text_of(sink.body) == "a [SECRET] b [SECRET] c done"
    assert stream.recorded == sink.body


async def test_frames_wait_for_the_look_behind_and_keepalives_do_not() -> None:
    sink = Sink()
    stream = guarded(sink, Pattern(look_behind=10))
    await stream.write(chunk("0123456789"))
    assert sink.writes == []  # held: the next 10 characters could complete a finding
    await stream.write(KEEPALIVE)
    assert sink.writes == [KEEPALIVE]
    await stream.write(chunk("abcdefghij"))
    assert text_of(sink.body) == "0123456789"
    await stream.finish()
    assert text_of(sink.body) == "0123456789abcdefghij" and sink.finished


async def test_a_classifier_window_judges_text_in_slices_before_it_goes() -> None:
    sink = Sink()
    check = Pattern(window=20, look_behind=0)
    stream = guarded(sink, check)
    for piece in ["0123456789", "abcdefghij", "klmnop"]:
        await stream.write(chunk(piece))
    assert check.calls == ["0123456789abcdefghij"]
    assert text_of(sink.body) == "0123456789abcdefghij"
    await stream.finish()
    assert check.calls[-1] == "klmnop" and text_of(sink.body).endswith("klmnop")


class Failing:
    look_behind = 0
    window = 0

    def __init__(self, error: BaseException | None = None, sleep_s: float = 0.0) -> None:
        self.error = error
        self.sleep_s = sleep_s

    async def check(self, text: str, *, final: bool) -> Sequence[Replacement]:
        if self.sleep_s:
            await trio.sleep(self.sleep_s)
        if self.error is not None:
            raise self.error
        return ()


class Plugin:
    """A test plugin: an output check, a before hook's answer."""

    def __init__(self, name: str, on_error: str, check: Any = None, stored: Stored | None = None):
        self.name = name
        self.on_error = on_error
        self.timeout_s = 1.0
        self.hooks = ALL_HOOKS
        self._check = check
        self._stored = stored
        self.finished_with: list[Outcome] = []

    def applies(self, route: str, model: str) -> bool:
        return model != "other"

    async def before(self, exchange: Exchange) -> Stored | None:
        if isinstance(self._check, Failing) and self._check.error is not None:
            raise self._check.error
        return self._stored

    def output_check(self, exchange: Exchange) -> Any:
        return self._check

    async def after(self, exchange: Exchange, answer: bytes) -> bytes:
        return answer

    def finished(self, exchange: Exchange, outcome: Outcome) -> None:
        self.finished_with.append(outcome)


def exchange(model: str = "m") -> Exchange:
    return Exchange("chat", model, "org_1", "key_1", "req_1", True, b"{}")


@pytest.mark.parametrize("on_error", ["fail_open", "fail_closed"])
async def test_a_failing_check_follows_on_error(on_error: str) -> None:
    reports: list[tuple[str, bool]] = []
    plugin = Plugin("flaky", on_error, Failing(RuntimeError("down")))
    pipeline = Pipeline([plugin], lambda e, b, action, event: reports.append((action, event)))
    run = pipeline.start(exchange())
    assert run is not None
    sink = Sink()
    stream = run.stream(sink, cut, record_limit=0)
    whole = await feed(stream, ["some text"])
    assert pipeline.stats["flaky"].failures >= 1
    if on_error == "fail_open":
        assert whole and text_of(sink.body) == "some text"
    else:
        assert not whole and b'"code":"plugin_unavailable"' in sink.body
        assert text_of(sink.body) == ""
        assert isinstance(stream.cut, PluginUnavailable)
    assert reports == []  # a failure is not a finding


async def test_a_check_past_its_timeout_has_failed(autojump_clock: trio.abc.Clock) -> None:
    plugin = Plugin("slow", "fail_closed", Failing(sleep_s=5.0))
    pipeline = Pipeline([plugin], lambda *a: None)
    run = pipeline.start(exchange())
    assert run is not None
    sink = Sink()
    began = trio.current_time()
    assert not await feed(run.stream(sink, cut, record_limit=0), ["x"])
    assert trio.current_time() - began == pytest.approx(plugin.timeout_s)
    assert b"plugin_unavailable" in sink.body
    assert pipeline.stats["slow"].failures == 1


async def test_before_hooks_run_in_order_until_one_answers_and_blocks_are_reported() -> None:
    reports: list[tuple[str, str, bool]] = []
    stored = Stored("json", b"{}", 1, 2)
    first, second, third = (
        Plugin("a", "fail_open"),
        Plugin("b", "fail_open", stored=stored),
        Plugin("c", "fail_open"),
    )
    pipeline = Pipeline(
        [first, second, third],
        lambda e, b, action, event: reports.append((b.plugin, action, event)),
    )
    assert pipeline.start(exchange("other")) is None  # no plugin applies: nothing to run
    run = pipeline.start(exchange())
    assert run is not None and await run.before() is stored
    assert pipeline.stats["c"].calls == 0

    class Blocking(Plugin):
        async def before(self, exchange: Exchange) -> Stored | None:
            raise Blocked("guard", "email", stage="input", kind="pii")

    pipeline = Pipeline(
        [Blocking("guard", "fail_open")], lambda e, b, a, ev: reports.append((b.plugin, a, ev))
    )
    run = pipeline.start(exchange())
    assert run is not None
    with pytest.raises(Blocked):
        await run.before()
    assert reports == [("guard", "block", True)]
