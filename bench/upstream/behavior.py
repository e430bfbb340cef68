"""What the simulated upstream is told to do, and what it keeps of each request.

`UpstreamBehavior` is copied when a request starts, so a test may mutate it (or assign a new one
to `UpstreamServer.behavior`) while the server runs: the change applies to requests that start
afterwards, never to one already in flight. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench.upstream.faults import Faults

REJECTED_KEY_PREFIX = "sk-bad"


@dataclass
class UpstreamBehavior:
    """Knobs for the simulated provider. A "content chunk" is any SSE frame carrying generated
    text: content, reasoning/thinking or tool-call argument fragments."""

    latency_s: float = 0.0  # delay before response headers (JSON and SSE)
    chunk_interval_s: float = 0.0  # delay between SSE content chunks
    tokens_per_chunk: int = 1  # words per content chunk
    completion_tokens: int = 20  # words produced, unless the request's max_tokens is smaller
    fail_status: int | None = None  # answer every request with this status, provider-shaped body
    retry_after: str | None = None  # Retry-After header value sent with fail_status
    break_after_chunks: int | None = None  # SSE: close the connection after N content chunks
    hang: bool = False  # accept the request, never answer (until the client goes away)
    reasoning: bool = False  # OpenAI: delta.reasoning before content; Anthropic: thinking block
    tool_call: bool = False  # answer with one get_weather tool call instead of text
    report_audio_duration: bool = True  # verbose_json transcriptions carry `duration`
    keepalive_gap_s: float = 0.0  # SSE: stay silent this long after the first content chunk
    # The answer's text instead of "tok0 tok1 ...", streamed `reply_chunk_chars` characters a
    # chunk (0: a word a chunk); a token a word (guardrail and cache tests).
    reply_text: str | None = None
    reply_chunk_chars: int = 0
    # Provider keys refused with 401 on every route (the bearer token, or Anthropic's x-api-key):
    # those starting with `reject_key_prefix`, and those in `rejected_keys` (e.g. revoked later).
    reject_key_prefix: str | None = REJECTED_KEY_PREFIX
    rejected_keys: frozenset[str] = frozenset()
    # Fine-tuning (bench/upstream/fine_tuning_routes.py), fixed per job when it is created:
    # seconds (Trio's clock) spent queued, validating_files and running before the job ends.
    fine_tune_schedule_s: tuple[float, float, float] = (1.0, 1.0, 2.0)
    # (code, message, param): jobs fail with this error at the end of validation, or at the end
    # of running with fine_tune_fail_while_running (a malformed file fails regardless).
    fine_tune_failure: tuple[str, str, str | None] | None = None
    fine_tune_fail_while_running: bool = False
    # Per-model failures (bench/upstream/faults.py): requests whose body names one of these
    # models suffer its Faults, on top of the knobs above; `fault_seed` seeds their draws.
    faults: dict[str, Faults] = field(default_factory=dict)
    fault_seed: int = 0


def snapshot(behavior: UpstreamBehavior) -> UpstreamBehavior:
    """A copy for one request; faster than copy.copy, which matters at thousands per second."""
    copied = object.__new__(UpstreamBehavior)
    copied.__dict__.update(behavior.__dict__)
    return copied


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as received: `path` is the raw request target (query string included),
    header names are lower-cased, repeated headers are joined with ", "."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)
