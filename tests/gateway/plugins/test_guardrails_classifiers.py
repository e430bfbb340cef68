"""Classifier guardrails over real HTTP against the simulated upstream: its `/v1/moderations`
(per-category thresholds) and a guard model served as chat (Llama Guard style answers), on the
input and on streamed output; `fail_open` and `fail_closed` when the classifier is down."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.plugins.rig import chat_body, events_of, stream_text, upstream_chats
from tests.inference import inference_rig

pytestmark = pytest.mark.storage


def moderation(
    provider: str = "sim", on_error: str = "fail_closed", stages: str = '"input"'
) -> str:
    return f"""
[[guardrails]]
name = "moderation"
kind = "moderation"
provider = "{provider}"
upstream = "omni-moderation-latest"
thresholds = {{ violence = 0.5 }}
stages = [{stages}]
on_error = "{on_error}"
timeout_s = 2.0
"""


GUARD_MODEL = """
[[guardrails]]
name = "llama-guard"
kind = "moderation"
format = "guard_chat"
provider = "sim"
upstream = "llama-guard-3"
models = ["small"]
"""


def chats_for(rig: object, model: str) -> int:
    return sum(1 for sent in upstream_chats(rig) if sent["model"] == model)  # type: ignore[arg-type]


async def test_moderation_thresholds_decide_per_category(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=moderation()) as rig:
        r = await rig.chat(chat_body("How do I attack the castle at dawn?"))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "guardrail_blocked" and "violence" in error["message"]
        # Harassment scores high too, but has no threshold here: it passes.
        r = await rig.chat(chat_body("you idiot, tell me a joke"))
        assert r.status_code == 200, r.text
        assert chats_for(rig, "sim-small") == 1
        [event] = await events_of(rig, "guardrail.triggered")
        assert event.data["kind"] == "moderation" and event.data["category"] == "violence"


@pytest.mark.parametrize("on_error", ["fail_open", "fail_closed"])
async def test_a_classifier_that_is_down_follows_on_error(
    database_url: str, tmp_path: Path, on_error: str
) -> None:
    toml = moderation(provider="dead", on_error=on_error)
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        r = await rig.chat(chat_body("a harmless question"))
        if on_error == "fail_open":
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "plugin_unavailable"
            assert r.headers["retry-after"] == "1"
            assert chats_for(rig, "sim-small") == 0
        assert await events_of(rig, "guardrail.triggered") == []


async def test_a_guard_model_served_as_chat(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=GUARD_MODEL) as rig:
        r = await rig.chat(chat_body("how to kill a process politely"))
        assert r.status_code == 400, r.text
        assert "violent_crimes" in r.json()["error"]["message"]
        r = await rig.chat(chat_body("what is the weather like"))
        assert r.status_code == 200, r.text
        assert chats_for(rig, "llama-guard-3") == 2 and chats_for(rig, "sim-small") == 1


async def test_streamed_output_is_judged_by_the_classifier_before_it_goes(
    database_url: str, tmp_path: Path
) -> None:
    toml = moderation(stages='"output"')
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        calm = " ".join(["calm"] * 150)  # over one classifier window of text
        rig.upstream.behavior.reply_text = f"{calm} and then we attack at dawn {calm}"
        rig.upstream.behavior.reply_chunk_chars = 16
        r = await rig.chat(chat_body("tell me a story", stream=True))
        assert r.status_code == 200
        text, frames = stream_text(r.text)
        assert "attack" not in text and text.startswith("calm calm")
        assert frames[-1]["error"]["code"] == "guardrail_blocked"


async def test_a_guard_model_judges_an_answer_in_the_context_of_its_prompt(
    database_url: str, tmp_path: Path
) -> None:
    toml = GUARD_MODEL.replace('models = ["small"]', 'models = ["small"]\nstages = ["output"]')
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        rig.upstream.behavior.reply_text = "It is sunny."
        r = await rig.chat(chat_body("what is the weather like"))
        assert r.status_code == 200, r.text
        [asked] = [sent for sent in upstream_chats(rig) if sent["model"] == "llama-guard-3"]
        assert [(m["role"], m["content"]) for m in asked["messages"]] == [
            ("user", "what is the weather like"),
            ("assistant", "It is sunny. "),
        ]
