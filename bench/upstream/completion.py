"""What the simulated model says, independent of wire format: deterministic words and counts.

Content is the words "tok0 tok1 tok2 ..." (each with a trailing space) grouped `tokens_per_chunk`
to a fragment. Reasoning is REASONING_WORDS words "think0 ...", grouped the same way and not counted
in completion tokens. A tool call always produces TOOL_ARGUMENTS in TOOL_ARGUMENT_FRAGMENTS and
reports TOOL_CALL_TOKENS completion tokens, ignoring max_tokens. Prompt tokens are the number of
whitespace-separated words in every message text plus PER_MESSAGE_TOKENS per message. No I/O.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from bench.upstream.behavior import UpstreamBehavior

TOOL_NAME = "get_weather"
TOOL_ARGUMENTS = '{"city": "Paris"}'
TOOL_ARGUMENT_FRAGMENTS = ('{"city"', ': "', "Paris", '"}')
TOOL_CALL_TOKENS = len(TOOL_ARGUMENT_FRAGMENTS)
REASONING_WORDS = 3
PER_MESSAGE_TOKENS = 3

Finish = Literal["stop", "length", "tool_calls"]


@dataclass(slots=True)  # not frozen only because frozen construction costs 4x; do not mutate
class Completion:
    fragments: tuple[str, ...]  # content, one per chunk (empty for a tool call)
    reasoning: tuple[str, ...]  # reasoning, one per chunk (empty unless behavior.reasoning)
    tool_call: bool
    finish: Finish
    completion_tokens: int

    @property
    def text(self) -> str:
        return "".join(self.fragments)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)


def plan_completion(
    behavior: UpstreamBehavior, max_tokens: int | None, *, after: int = 0
) -> Completion:
    """Decide the answer to one request; `max_tokens` below completion_tokens truncates.
    `after`: the words of an assistant message to continue (vLLM's `continue_final_message`):
    the answer goes on from word `after` ("tok5 ..."), as if it had said those already."""
    per_chunk = max(1, behavior.tokens_per_chunk)
    reasoning = _fragments("think", REASONING_WORDS, per_chunk) if behavior.reasoning else ()
    if behavior.tool_call:
        return Completion((), reasoning, True, "tool_calls", TOOL_CALL_TOKENS)
    if behavior.reply_text is not None:
        return _given(behavior.reply_text, behavior.reply_chunk_chars, reasoning)
    n = max(0, behavior.completion_tokens - after)
    finish: Finish = "stop"
    if max_tokens is not None and max_tokens < n:
        n, finish = max_tokens, "length"
    fragments = _fragments("tok", after + n, per_chunk, after)
    return Completion(fragments, reasoning, False, finish, n)


def _given(text: str, chunk_chars: int, reasoning: tuple[str, ...]) -> Completion:
    """An answer of the given text, cut in chunks of `chunk_chars` characters (0: words)."""
    if chunk_chars > 0:
        fragments = tuple(text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars))
    else:
        fragments = tuple(word + " " for word in text.split())
    return Completion(fragments, reasoning, False, "stop", len(text.split()))


def count_words(texts: Iterable[str]) -> int:
    return sum(len(text.split()) for text in texts)


@lru_cache(maxsize=512)
def _fragments(stem: str, n: int, per_chunk: int, start: int = 0) -> tuple[str, ...]:
    words = [f"{stem}{i} " for i in range(start, n)]
    return tuple("".join(words[i : i + per_chunk]) for i in range(0, len(words), per_chunk))


_PROCESS_TAG = secrets.token_hex(4)
_serial = itertools.count()


def answer_id(prefix: str) -> str:
    """A fresh id such as "chatcmpl-1a2b3c4d000000000007": unique per process, cheap."""
    return f"{prefix}{_PROCESS_TAG}{next(_serial):012x}"
