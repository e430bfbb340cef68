"""A streamed answer as output plugins see it: a wrapper of the client's SSE stream (the
relay's sink, actors/relay.py) that reads the text each frame adds, runs the output checks,
and lets frames through only once every check has seen enough text after them.

Holding back: a check with `look_behind` L (the most characters a finding can span) has
judged every finding that overlaps a frame once it has seen L characters past the frame's
end; a check with `window` W is asked again only once W new characters came. A frame goes to
the client when every check has judged it, so a value split across two chunks is found before
any of it is sent. Frames without text (the role chunk, the end) keep their place in order.

A finding to replace (redaction) rewrites the frames' text as they go out (and the whole-text
fields of the events that repeat it, Responses' `.done` events). A finding that blocks cuts
the stream there: the frames before it go out, then the route's cut frames (chat: an error
frame and `[DONE]`; Responses: `response.failed`), and the write answers False, so the relay
stops reading the upstream and closes it — nothing after the finding reaches the client, and
only what was sent is billed. A check that fails with `fail_closed` cuts the same way with the
code `plugin_unavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from protocol.sse import KEEPALIVE
from services.guardrails.texts import Slot, answer_slots, delta_text, stream_delta
from services.plugins.interface import Blocked, OutputCheck, PluginUnavailable, Replacement

T = TypeVar("T")
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class ClientSink(Protocol):
    """The client's stream (gateway/inference/sse_response.py `ClientStream`)."""

    async def open(self) -> bool: ...

    async def write(self, data: bytes) -> bool: ...

    async def finish(self, before_last: Callable[[], Awaitable[None]] | None = None) -> None: ...


CutFrames = Callable[[str, str, str], list[bytes]]  # (message, code, type) -> the last frames


@dataclass(slots=True)
class _Check:
    check: OutputCheck
    seen: int = 0  # text judged so far (absolute position)


@dataclass(slots=True)
class _Frame:
    raw: bytes
    start: int  # its text's span in the answer's text
    end: int
    data: bool = False  # it carries JSON data (a redaction may have to rewrite it)


@dataclass(slots=True)
class _Redactions:
    spans: list[Replacement] = field(default_factory=list)  # absolute, sorted, disjoint
    values: dict[str, str] = field(default_factory=dict)  # original text -> tag

    def add(self, found: Replacement, original: str) -> None:
        for span in self.spans:
            if span.start < found.end and found.start < span.end:
                return  # seen in an earlier check's look-behind
        self.spans.append(found)
        self.spans.sort(key=lambda s: s.start)
        self.values[original] = found.tag


class GuardedStream:
    """The client's sink behind the output checks (`checks`, may be empty) and, with a
    `record_limit`, a copy of what was sent (past that many bytes, `recorded` is None)."""

    def __init__(
        self,
        inner: ClientSink,
        route: str,
        checks: Sequence[OutputCheck],
        cut_frames: CutFrames,
        on_block: Callable[[Blocked], None],
        *,
        record_limit: int = 0,
    ) -> None:
        self._inner = inner
        self._route = route
        self._checks = [_Check(c) for c in checks]
        self._cut_frames = cut_frames
        self._on_block = on_block
        self._held: list[_Frame] = []
        self._text = ""  # the answer's text from `_base` (what a check may still look at)
        self._base = 0
        self._length = 0  # of the whole answer's text so far
        self._redactions = _Redactions()
        self._record_limit = record_limit
        self._recorded: list[bytes] | None = [] if record_limit else None
        self._recorded_bytes = 0
        self.cut: Blocked | PluginUnavailable | None = None
        self.sent_deltas = 0  # frames adding text that went to the client (billed on a cut)

    @property
    def recorded(self) -> bytes | None:
        return None if self._recorded is None else b"".join(self._recorded)

    async def open(self) -> bool:
        return await self._inner.open()

    async def write(self, data: bytes) -> bool:
        if self.cut is not None:
            return False
        if data == KEEPALIVE:
            return await self._inner.write(data)
        for raw in _frames(data):
            self._take(raw)
        return await self._judge(final=False)

    async def finish(self, before_last: Callable[[], Awaitable[None]] | None = None) -> None:
        if self.cut is None:
            await self._judge(final=True)
        await self._inner.finish(before_last)

    def _take(self, raw: bytes) -> None:
        """Hold `raw`, with the span of the answer's text it adds (a typed decode of just that
        field: the whole event is decoded only if a redaction must rewrite it)."""
        start = self._length
        payload = _payload(raw) if self._checks else None  # no check: no text to read
        text = None if payload is None else delta_text(self._route, payload)
        if text:
            self._text += text
            self._length += len(text)
        self._held.append(_Frame(raw, start, self._length, payload is not None))

    async def _judge(self, *, final: bool) -> bool:
        """Run the checks that have enough new text, then send what every check judged. A check
        with a `window` judges the new text a window at a time (a classifier asked about the
        whole of a long answer that came in one read would refuse all of it for one sentence)."""
        safe = self._length
        for entry in self._checks:
            check = entry.check
            while (new := self._length - entry.seen) and (final or new >= check.window):
                end = self._length if not check.window else entry.seen + min(new, check.window)
                start = max(self._base, entry.seen - check.look_behind)
                text = self._text[start - self._base : end - self._base]
                try:
                    found = await check.check(text, final=final and end == self._length)
                except Blocked as blocked:
                    at = start + (blocked.at if blocked.at is not None else 0)
                    return await self._cut(blocked, min(at, self._judged(entry)))
                except PluginUnavailable as failed:  # nothing it did not judge goes out
                    judged = entry.seen - check.look_behind
                    return await self._cut(failed, min(judged, self._judged(entry)))
                for span in found:
                    absolute = Replacement(start + span.start, start + span.end, span.tag)
                    self._redactions.add(absolute, text[span.start : span.end])
                entry.seen = end
            if not final:
                safe = min(safe, entry.seen - check.look_behind)
        return await self._release(safe)

    def _judged(self, but: _Check) -> int:
        """Up to where every check other than `but` has judged the text."""
        return min(
            [e.seen - e.check.look_behind for e in self._checks if e is not but] + [self._length]
        )

    async def _release(self, upto: int) -> bool:
        out: list[bytes] = []
        while self._held and self._held[0].end <= upto:
            frame = self._held.pop(0)
            if frame.end > frame.start:
                self.sent_deltas += 1
            out.append(self._rewritten(frame))
        self._trim()
        if not out:
            return True
        data = b"".join(out)
        self._record(data)
        return await self._inner.write(data)

    async def _cut(self, reason: Blocked | PluginUnavailable, at: int) -> bool:
        self.cut = reason
        sent = await self._release(at)
        self._held.clear()
        if isinstance(reason, Blocked):
            self._on_block(reason)
            frames = self._cut_frames(str(reason), "guardrail_blocked", "invalid_request_error")
        else:
            frames = self._cut_frames(str(reason), "plugin_unavailable", "server_error")
        self._recorded = None  # a cut answer is not a whole one
        if sent:
            await self._inner.write(b"".join(frames))
        return False  # the relay stops reading the upstream

    def _rewritten(self, frame: _Frame) -> bytes:
        redactions = self._redactions
        if not frame.data or not redactions.spans:
            return frame.raw
        head, _, payload = frame.raw.partition(b"data: ")
        try:
            event = _decode(payload)
            if frame.end > frame.start:
                spans = [s for s in redactions.spans if s.start < frame.end and frame.start < s.end]
                delta = stream_delta(self._route, event)
                if not spans or delta is None:
                    return frame.raw
                delta.set(_apply(delta.text, frame.start, spans))
            elif not _replace_values(answer_slots(self._route, event), redactions.values):
                return frame.raw
        except (msgspec.DecodeError, RecursionError):  # not an event of ours to rewrite
            return frame.raw
        return head + b"data: " + _encode(event) + b"\n\n"

    def as_sent(self, answer: T) -> T | dict[str, Any]:
        """`answer` (the whole answer the source built, e.g. a Responses object to store) with
        the redactions the client got applied to its text; as it is when there were none."""
        values = self._redactions.values
        if not values:
            return answer
        decoded: dict[str, Any] = msgspec.to_builtins(answer)
        _replace_values(answer_slots(self._route, decoded), values)
        return decoded

    def _record(self, data: bytes) -> None:
        if self._recorded is None:
            return
        self._recorded_bytes += len(data)
        if self._recorded_bytes > self._record_limit:
            self._recorded = None
        else:
            self._recorded.append(data)

    def _trim(self) -> None:
        """Forget text no check will look at again."""
        keep = min(
            [e.seen - e.check.look_behind for e in self._checks]
            + [f.start for f in self._held[:1]]
            + [self._length]
        )
        if keep - self._base > 4096:
            self._text = self._text[keep - self._base :]
            self._base = keep


def _replace_values(slots: Sequence[Slot], values: dict[str, str]) -> bool:
    """Each redacted value replaced by its tag in the slots' text; whether any was there."""
    changed = False
    for slot in slots:
        text = slot.text
        for original, tag in values.items():
            if original in text:
                text = text.replace(original, tag)
                changed = True
        slot.set(text)
    return changed


def _apply(text: str, offset: int, spans: Sequence[Replacement]) -> str:
    """`text` (at `offset` in the answer) with the parts of `spans` inside it replaced: a tag
    goes where its span starts; the rest of a span split across frames is dropped."""
    out: list[str] = []
    at = 0
    for span in spans:
        start = max(span.start - offset, 0)
        end = min(span.end - offset, len(text))
        if end <= at:
            continue
        out.append(text[at:start])
        if span.start >= offset:
            out.append(span.tag)
        at = end
    out.append(text[at:])
    return "".join(out)


def _frames(data: bytes) -> list[bytes]:
    """The SSE frames of one write (each ends with a blank line)."""
    parts = data.split(b"\n\n")
    return [part + b"\n\n" for part in parts if part]


def _payload(frame: bytes) -> bytes | None:
    """A frame's JSON data, or None (`[DONE]`, a comment)."""
    index = frame.find(b"data: {")
    if index < 0:
        return None
    return frame[index + 6 :].rstrip(b"\n")
