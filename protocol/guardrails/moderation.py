"""Classifier guardrails' wire formats: OpenAI's `POST /v1/moderations`, and a guard model
(Llama Guard 3, ShieldGemma) asked through `POST /v1/chat/completions`. Both are read into the
same shape, `{category: score}` with scores in [0, 1]: an empty dict is a clean verdict.

Moderation (`PATH`, under the provider's base_url): `{"model", "input": [texts]}`, answered
`{"id", "model", "results": [{"flagged", "categories", "category_scores", ...}]}`, one result
per input. Only `category_scores` is read, the highest score of each category across the
results: `flagged` and the `categories` booleans are OpenAI's thresholds, and the gateway
applies its own. Category names are kept as OpenAI spells them (`harassment/threatening`,
`self-harm/intent`, `violence/graphic`, ...).

Guard models (`GUARD_PATH`): the text goes as the conversation itself and the model's own
chat template wraps it in its policy prompt (Llama Guard 3's lists S1–S14 and asks for "safe",
or "unsafe" and a line of violated codes). Stage "input" sends the user's message alone, stage
"output" the assistant's answer after the user's message (`prompt`, empty when unknown): Llama
Guard judges the last turn, in the context of the ones before it. Deterministic and short:
temperature 0, GUARD_MAX_TOKENS.

Anything else an upstream answers is `UpstreamMalformed`, never another exception: not JSON,
not UTF-8, nested past msgspec's depth, wrong types, scores that are not finite numbers in
[0, 1], no results, a guard answer that is none of safe/unsafe/yes/no. No I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal, TypeVar

import msgspec

from protocol.errors import UpstreamMalformed

PATH = "moderations"
GUARD_PATH = "chat/completions"
GUARD_MAX_TOKENS = 40  # "unsafe\n" and every one of 14 codes, comma-separated, with room
POLICY_VIOLATION = "policy_violation"  # a verdict without categories (ShieldGemma's "Yes")

# Llama Guard 3's hazard codes (the MLCommons taxonomy), in snake case.
LLAMA_GUARD_CATEGORIES = {
    "S1": "violent_crimes",
    "S2": "non_violent_crimes",
    "S3": "sex_crimes",
    "S4": "child_exploitation",
    "S5": "defamation",
    "S6": "specialized_advice",
    "S7": "privacy",
    "S8": "intellectual_property",
    "S9": "indiscriminate_weapons",
    "S10": "hate",
    "S11": "self_harm",
    "S12": "sexual_content",
    "S13": "elections",
    "S14": "code_interpreter_abuse",
}

Stage = Literal["input", "output"]
T = TypeVar("T")


class _ModerationRequest(msgspec.Struct):
    model: str
    input: Sequence[str]


class _Result(msgspec.Struct):
    category_scores: dict[str, float]


class _Moderation(msgspec.Struct):
    results: list[_Result]


class _Message(msgspec.Struct):
    role: str
    content: str


class _GuardRequest(msgspec.Struct):
    model: str
    messages: list[_Message]
    temperature: float
    max_tokens: int
    stream: bool = False


class _AnswerMessage(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _AnswerMessage


class _Completion(msgspec.Struct):
    choices: list[_Choice]


_moderation_decoder = msgspec.json.Decoder(_Moderation)
_completion_decoder = msgspec.json.Decoder(_Completion)
# The verdict is the whole first line (a chat model's "No problem!" is not one); Llama Guard's
# codes follow on the next line.
_VERDICT = re.compile(
    r"\s*(safe|unsafe|yes|no)[.!]?[ \t]*(?:[\r\n]+(.*))?", re.IGNORECASE | re.DOTALL
)
_CODE = re.compile(r"(?<![a-z0-9])s(\d{1,2})(?![a-z0-9])", re.IGNORECASE)


def moderation_request(upstream: str, texts: Sequence[str]) -> bytes:
    """The body of `POST moderations` classifying `texts` (one result each) with model
    `upstream`."""
    return msgspec.json.encode(_ModerationRequest(upstream, list(texts)))


def parse_moderation(content: bytes) -> dict[str, float]:
    """The highest score of each category across the results of a moderation answer."""
    answer = _decode(_moderation_decoder, content, "moderation")
    if not answer.results:
        raise UpstreamMalformed("the moderation answer has no results")
    scores: dict[str, float] = {}
    for result in answer.results:
        for category, score in result.category_scores.items():
            if not (math.isfinite(score) and 0.0 <= score <= 1.0):
                raise UpstreamMalformed(f"moderation score {score!r} is not within 0..1")
            if score > scores.get(category, -1.0):
                scores[category] = score
    return scores


def guard_request(upstream: str, text: str, *, stage: Stage, prompt: str = "") -> bytes:
    """A chat completions body asking guard model `upstream` whether `text` is safe: as the
    user's message (stage "input"), or as the assistant's answer to `prompt` ("output")."""
    if stage == "input":
        messages = [_Message("user", text)]
    elif stage == "output":
        messages = [_Message("user", prompt), _Message("assistant", text)]
    else:
        raise ValueError(f"stage must be 'input' or 'output', not {stage!r}")
    return msgspec.json.encode(_GuardRequest(upstream, messages, 0.0, GUARD_MAX_TOKENS))


def parse_guard_answer(content: bytes) -> dict[str, float]:
    """The guard model's verdict from its chat.completion: {} when safe; Llama Guard's
    "unsafe" with each listed code's category at 1.0 (a code it does not list, or none,
    counts as POLICY_VIOLATION); ShieldGemma's "Yes" (violates) as POLICY_VIOLATION, "No" as
    {}."""
    completion = _decode(_completion_decoder, content, "guard")
    if not completion.choices:
        raise UpstreamMalformed("the guard answer has no choices")
    text = completion.choices[0].message.content
    if text is None:
        raise UpstreamMalformed("the guard answer has no text")
    verdict = _VERDICT.fullmatch(text)
    if verdict is None:
        raise UpstreamMalformed("the guard answer is not a safe/unsafe or yes/no verdict")
    word = verdict.group(1).lower()
    if word in ("safe", "no"):
        return {}
    if word == "yes":
        return {POLICY_VIOLATION: 1.0}
    found: dict[str, float] = {}
    for code in _CODE.findall(verdict.group(2) or ""):
        found[LLAMA_GUARD_CATEGORIES.get(f"S{int(code)}", POLICY_VIOLATION)] = 1.0
    return found or {POLICY_VIOLATION: 1.0}


def _decode(decoder: msgspec.json.Decoder[T], content: bytes, what: str) -> T:
    try:
        return decoder.decode(content)
    except RecursionError:
        raise UpstreamMalformed(f"the {what} answer is nested too deeply") from None
    except UnicodeDecodeError:
        raise UpstreamMalformed(f"the {what} answer is not UTF-8") from None
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed(f"the {what} answer is malformed: {exc}") from None
