"""The plugins of one instance, in their configured order, and one request's run through them
(`Pipeline.start`): the same hooks for every inference route (interface.py).

A model no plugin applies to costs one dictionary lookup per request (`start` returns None).
Each hook a plugin uses (`hooks`) runs under its plugin's `timeout_s` (none for one that never
waits on I/O); a plugin that raises anything but `Blocked`, or
runs out of time, has failed: `fail_open` goes on as if it had passed, `fail_closed` refuses
with `PluginUnavailable` (503). Blocks (and redactions, where a guardrail reports them) are
handed to `report`, which writes the `guardrail.triggered` event and counts them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import msgspec
import trio

from services.guardrails.texts import answer_slots
from services.plugins.interface import (
    Blocked,
    Exchange,
    Outcome,
    OutputCheck,
    Plugin,
    PluginUnavailable,
    Replacement,
    Stored,
    apply_replacements,
)
from services.plugins.stream_guard import ClientSink, CutFrames, GuardedStream

T = TypeVar("T")
# (request, the finding, the action taken, whether it is a `guardrail.triggered` event)
Report = Callable[[Exchange, Blocked, str, bool], None]
_MAX_SELECTIONS = 4096  # (route, model) pairs remembered; model ids are configured (or `ft:`)


@dataclass(slots=True)
class PluginStats:
    calls: int = 0
    failures: int = 0  # raised or timed out (then `on_error`)
    seconds: float = 0.0  # time spent in its hooks


class Pipeline:
    def __init__(self, plugins: Sequence[Plugin], report: Report) -> None:
        self.plugins = tuple(plugins)
        self.report = report
        self.stats = {p.name: PluginStats() for p in self.plugins}
        self._selected: dict[tuple[str, str], tuple[Plugin, ...]] = {}

    def applying(self, route: str, model: str) -> tuple[Plugin, ...]:
        """The plugins that apply to requests of `route` naming `model`, in order."""
        key = (route, model)
        selected = self._selected.get(key)
        if selected is None:
            selected = tuple(p for p in self.plugins if p.applies(route, model))
            if len(self._selected) < _MAX_SELECTIONS:
                self._selected[key] = selected
        return selected

    def start(self, exchange: Exchange) -> PluginRun | None:
        """The run of the plugins that apply to `exchange`'s route and model, or None."""
        selected = self.applying(exchange.route, exchange.model)
        return PluginRun(self, selected, exchange) if selected else None

    async def call(self, plugin: Plugin, hook: Callable[[], Awaitable[T]], passed: T) -> T:
        """`hook()` of `plugin` under its timeout and `on_error` (`passed`: what it returns
        when it failed open). `Blocked` is counted, reported and raised."""
        stats = self.stats[plugin.name]
        stats.calls += 1
        began = trio.current_time()
        try:
            if plugin.timeout_s is None:
                return await hook()
            with trio.fail_after(plugin.timeout_s):
                return await hook()
        except Blocked:
            raise
        except PluginUnavailable:
            stats.failures += 1
            raise
        except Exception:  # noqa: BLE001 - a plugin's own failure: its on_error decides
            stats.failures += 1
            if plugin.on_error == "fail_open":
                return passed
            raise PluginUnavailable(plugin.name) from None
        finally:
            stats.seconds += trio.current_time() - began

    def blocked(self, exchange: Exchange, blocked: Blocked, action: str) -> None:
        self.report(exchange, blocked, action, True)


class _Guarded:
    """An output check of a plugin, under the plugin's timeout and on_error."""

    def __init__(self, pipeline: Pipeline, plugin: Plugin, check: OutputCheck) -> None:
        self._pipeline = pipeline
        self._plugin = plugin
        self._check = check
        self.look_behind = check.look_behind
        self.window = check.window

    async def check(self, text: str, *, final: bool) -> Sequence[Replacement]:
        none: Sequence[Replacement] = ()
        return await self._pipeline.call(
            self._plugin, lambda: self._check.check(text, final=final), none
        )


class PluginRun:
    """One request's run through the plugins that apply to it."""

    def __init__(self, pipeline: Pipeline, plugins: tuple[Plugin, ...], exchange: Exchange):
        self.pipeline = pipeline
        self.plugins = plugins
        self.exchange = exchange
        self._checks: list[OutputCheck] | None = None

    async def before(self) -> Stored | None:
        """The `before` hooks in order; an answer from one (the cache) ends the run there.
        Raises `Blocked` (reported) or `PluginUnavailable`."""
        exchange = self.exchange
        for plugin in self.plugins:
            if "before" not in plugin.hooks:
                continue
            try:
                stored = await self.pipeline.call(plugin, partial(plugin.before, exchange), None)
            except Blocked as blocked:
                self.pipeline.blocked(exchange, blocked, "block")
                raise
            if stored is not None:
                return stored
        return None

    @property
    def checks(self) -> list[OutputCheck]:
        if self._checks is None:
            self._checks = []
            for plugin in self.plugins:
                if "output" not in plugin.hooks:
                    continue
                check = plugin.output_check(self.exchange)
                if check is not None:
                    self._checks.append(_Guarded(self.pipeline, plugin, check))
        return self._checks

    async def answer(self, body: bytes) -> bytes:
        """A JSON answer through the output checks (a finding to replace is replaced; one that
        blocks raises `Blocked`, reported) and the `after` hooks."""
        exchange = self.exchange
        if self.checks:
            body = await self._checked(body)
        for plugin in self.plugins:
            if "after" in plugin.hooks:
                body = await self.pipeline.call(plugin, partial(plugin.after, exchange, body), body)
        return body

    async def _checked(self, body: bytes) -> bytes:
        try:
            decoded: Any = msgspec.json.decode(body)
            slots = answer_slots(self.exchange.route, decoded)
        except (msgspec.DecodeError, RecursionError):
            return body  # not ours to judge: the route answers it as it is
        changed = False
        for slot in slots:
            text = slot.text
            for check in self.checks:
                try:
                    found = await check.check(text, final=True)
                except Blocked as blocked:
                    self.pipeline.blocked(self.exchange, blocked, "block")
                    raise
                if found:
                    text = apply_replacements(text, found)
                    changed = True
            slot.set(text)
        return msgspec.json.encode(decoded) if changed else body

    def stream(
        self, sink: ClientSink, cut_frames: CutFrames, *, record_limit: int
    ) -> GuardedStream:
        """The client's stream behind the output checks, recording what was sent (for
        `finished`) up to `record_limit` bytes."""

        def on_block(blocked: Blocked) -> None:
            self.pipeline.blocked(self.exchange, blocked, "block")

        return GuardedStream(
            sink, self.exchange.route, self.checks, cut_frames, on_block, record_limit=record_limit
        )

    def finished(self, outcome: Outcome) -> None:
        """The client got a whole answer: the `finished` hooks (they must not block)."""
        for plugin in self.plugins:
            if "finished" not in plugin.hooks:
                continue
            try:
                plugin.finished(self.exchange, outcome)
            except Exception:  # noqa: BLE001, S112 - a plugin's failure never fails the request
                self.pipeline.stats[plugin.name].failures += 1
