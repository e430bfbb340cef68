"""Token usage as billed: the three OpenAI counters, and how reports from upstreams combine.

Upstreams report usage in two ways: once per call (OpenAI's final usage chunk, a response body's
`usage`) — several calls *add* — or cumulatively during one stream (Anthropic's `message_start`
then `message_delta`) — a later report *overlays* the earlier one. No I/O here.
"""

from __future__ import annotations

import msgspec


class Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )


def merge_usage(*reports: Usage | None) -> Usage | None:
    """The sum of independent reports (retries, fallbacks); None when none was reported."""
    total: Usage | None = None
    for report in reports:
        if report is not None:
            total = report if total is None else total + report
    return total


def overlay_usage(earlier: Usage | None, later: Usage) -> Usage:
    """A cumulative report over an earlier one: the later non-zero counters win."""
    if earlier is None:
        return later
    return Usage.of(
        later.prompt_tokens or earlier.prompt_tokens,
        later.completion_tokens or earlier.completion_tokens,
    )


def usage_from_object(value: object) -> Usage | None:
    """Read an OpenAI-shaped `usage` object leniently (non-integer counters count as 0).

    A missing or zero `total_tokens` is filled in: some OpenAI-compatible servers omit it.
    """
    if not isinstance(value, dict):
        return None
    prompt = _count(value.get("prompt_tokens"))
    completion = _count(value.get("completion_tokens"))
    total = _count(value.get("total_tokens"))
    return Usage(prompt, completion, total or prompt + completion)


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0
