"""What the simulated classifiers decide, independent of wire format: trigger words in the text.

A word counts when it starts with a trigger (`kill` matches "killing", not "skill"). Violence
words: `kill`, `attack`; harassment: `idiot`, `stupid`; hate: `hate`, `racist`. The moderation
route (moderation_routes.py) scores them VIOLENCE_SCORE, HARASSMENT_SCORE, HATE_SCORE and every
other category BASELINE_SCORE; a chat completion naming a guard model (openai_routes.py) answers
as Llama Guard 3 does ("unsafe\\nS1" for violence, "unsafe\\nS10" for hate, else "safe") or, for
a ShieldGemma model, "Yes"/"No". Pure functions, no I/O.
"""

from __future__ import annotations

import re

VIOLENCE_WORDS = ("kill", "attack")
HARASSMENT_WORDS = ("idiot", "stupid")
HATE_WORDS = ("hate", "racist")
VIOLENCE_SCORE = 0.9
HARASSMENT_SCORE = 0.8
HATE_SCORE = 0.85
BASELINE_SCORE = 0.001

# OpenAI's moderation categories (CreateModerationResponse in openai/openai-openapi).
CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)

_WORD = re.compile(r"[a-z]+")


def _has(text: str, triggers: tuple[str, ...]) -> bool:
    return any(word.startswith(triggers) for word in _WORD.findall(text.lower()))


def moderation_scores(text: str) -> dict[str, float]:
    """Every category's score for `text`."""
    scores = dict.fromkeys(CATEGORIES, BASELINE_SCORE)
    if _has(text, VIOLENCE_WORDS):
        scores["violence"] = VIOLENCE_SCORE
    if _has(text, HARASSMENT_WORDS):
        scores["harassment"] = HARASSMENT_SCORE
    if _has(text, HATE_WORDS):
        scores["hate"] = HATE_SCORE
    return scores


def guard_verdict(model: str, messages: list[tuple[str, str]]) -> str | None:
    """The answer of guard model `model` to a conversation of (role, text); None when the
    model is not a guard (its name contains neither "guard" nor "shieldgemma").

    The text judged is the last user message, and the assistant's answer when the
    conversation ends with one (a guard asked about an answer): the simulated chat models
    answer "tok0 tok1 ...", so a test makes an answer unsafe through the prompt before it."""
    name = model.lower()
    if "guard" not in name and "shieldgemma" not in name:
        return None
    users = [text for role, text in messages if role == "user"]
    judged = users[-1] if users else ""
    if messages and messages[-1][0] == "assistant":
        judged += "\n" + messages[-1][1]
    violent, hateful = _has(judged, VIOLENCE_WORDS), _has(judged, HATE_WORDS)
    if "guard" not in name:
        return "Yes" if violent or hateful else "No"
    codes = ["S1"] * violent + ["S10"] * hateful
    return "unsafe\n" + ",".join(codes) if codes else "safe"
