"""Guardrails on chat completions over real HTTP, against the simulated upstream: input blocks
and redactions, output blocks on JSON answers and on streams (a value split across chunks is
caught, nothing after it reaches the client, only what was sent is billed), and the
`guardrail.triggered` event each leaves."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.actors.webhooks.support import verify
from tests.gateway.plugins.rig import (
    PII_BLOCK,
    PII_REDACT,
    chat_body,
    events_of,
    stream_text,
    upstream_chats,
)
from tests.inference import inference_rig, ledger
from tests.metrics_lint import lint, value
from tests.webhook_receiver import Receiver, ReceiverTLS, make_tls, serve_receiver

pytestmark = pytest.mark.storage

EMAIL = "jane.roe@example.com"
WEBHOOKS = """
[webhooks]
allowed_private_networks = ["127.0.0.0/8"]
poll_interval_s = 0.05
"""


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReceiverTLS:
    """A trustme CA the gateway's outbound TLS trusts (its sender reads SSL_CERT_FILE)."""
    made = make_tls()
    path = tmp_path / "ca.pem"
    path.write_bytes(made.ca_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    return made


async def test_input_pii_is_refused_before_the_provider_and_not_billed(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_BLOCK) as rig:
        r = await rig.chat(chat_body(f"Write to {EMAIL} please"))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "guardrail_blocked"
        assert "'pii'" in error["message"] and "email" in error["message"]
        assert EMAIL not in r.text
        assert upstream_chats(rig) == []
        [event] = await events_of(rig, "guardrail.triggered")
        assert event.data == {
            "guardrail": "pii",
            "kind": "pii",
            "category": "email",
            "action": "block",
            "stage": "input",
            "key_id": event.data["key_id"],
            "model": "small",
            "request_id": r.headers["x-request-id"],
        }
        assert event.data["key_id"].startswith("key_")
        assert EMAIL not in str(event.data)
        _, rows = await ledger(rig)
        assert rows == []
        # Another model is not guarded by it (models = ["small"]).
        other = await rig.chat({**chat_body(f"Write to {EMAIL}"), "model": "haiku"})
        assert other.status_code == 200, other.text


async def test_input_redaction_reaches_the_provider_with_tags(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_REDACT) as rig:
        r = await rig.chat(
            {
                "model": "small",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": f"Mail {EMAIL} now"}]},
                ],
            }
        )
        assert r.status_code == 200, r.text
        [sent] = upstream_chats(rig)
        assert sent["messages"][1]["content"][0]["text"] == "Mail [EMAIL] now"
        assert sent["messages"][0]["content"] == "Be brief."
        assert EMAIL.encode() not in rig.upstream.requests[-1].body
        [event] = await events_of(rig, "guardrail.triggered")  # report_redactions = true
        assert event.data["action"] == "redact" and event.data["stage"] == "input"


async def test_output_pii_in_a_json_answer_is_refused_and_not_billed(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_BLOCK) as rig:
        rig.upstream.behavior.reply_text = f"Sure, write to {EMAIL} today"
        r = await rig.chat(chat_body("Who do I write to?"))
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "guardrail_blocked"
        assert EMAIL not in r.text
        [event] = await events_of(rig, "guardrail.triggered")
        assert event.data["stage"] == "output"
        _, rows = await ledger(rig)
        assert rows == []


async def test_a_value_split_across_chunks_cuts_the_stream_before_any_of_it(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_BLOCK) as rig:
        words = " ".join(f"w{i}" for i in range(60))
        rig.upstream.behavior.reply_text = f"{words} mail {EMAIL} and more words after it"
        rig.upstream.behavior.reply_chunk_chars = 7  # the address spans several chunks
        body = chat_body("Who?", stream=True, stream_options={"include_usage": True})
        r = await rig.chat(body)
        assert r.status_code == 200
        text, frames = stream_text(r.text)
        assert "@" not in text and "jane" not in text and "after" not in text
        assert text.startswith("w0 w1")  # what came before the value was sent
        assert frames[-1]["error"]["code"] == "guardrail_blocked"
        assert r.text.endswith("data: [DONE]\n\n")
        [event] = await events_of(rig, "guardrail.triggered")
        assert event.data["stage"] == "output" and event.data["category"] == "email"
        # Billed for what the client got (an estimate: a frame a token), not for the whole
        # answer the provider would have reported (67 words at $1.50/M: over 100 µ$).
        _, [row] = await ledger(rig, settled=1)
        sent = sum(
            1 for f in frames if f.get("choices") and f["choices"][0]["delta"].get("content")
        )
        assert sent * 1.5 <= -row.amount_micros < 67 * 1.5


async def test_streamed_output_is_redacted_across_chunks(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_REDACT) as rig:
        rig.upstream.behavior.reply_text = f"Write to {EMAIL} or call later, thanks."
        rig.upstream.behavior.reply_chunk_chars = 4
        r = await rig.chat(chat_body("Who?", stream=True))
        assert r.status_code == 200
        text, frames = stream_text(r.text)
        assert text == "Write to [EMAIL] or call later, thanks."
        assert frames[-1]["choices"][0]["finish_reason"] == "stop"
        assert r.text.endswith("data: [DONE]\n\n")


async def test_a_block_is_delivered_as_one_signed_webhook(
    database_url: str, tmp_path: Path, tls: ReceiverTLS
) -> None:
    toml = PII_BLOCK + WEBHOOKS
    async with (
        inference_rig(database_url, tmp_path, extra_toml=toml) as rig,
        trio.open_nursery() as nursery,
    ):
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        gw = rig.gateway
        r = await gw.client.post(
            "/v1/webhooks",
            json={"url": receiver.url, "events": ["guardrail.triggered"]},
            headers=gw.auth(),
        )
        assert r.status_code == 200, r.text
        secret = r.json()["secret"]
        rig.upstream.behavior.reply_text = f"mail {EMAIL} now"
        rig.upstream.behavior.reply_chunk_chars = 3
        r = await rig.chat(chat_body("who?", stream=True))
        assert "guardrail_blocked" in r.text
        with trio.fail_after(10):
            [arrival] = await receiver.wait_for(1)
        assert verify(secret, arrival)
        delivered = json.loads(arrival.body)
        assert delivered["type"] == "guardrail.triggered"
        assert delivered["data"]["stage"] == "output" and EMAIL.encode() not in arrival.body
        families = lint((await gw.client.get("/metrics")).text)
        findings = families["gateway_guardrail_findings"]
        assert findings.type == "counter"
        name = "gateway_guardrail_findings_total"
        assert value(findings, name, guardrail="pii", category="email", action="block") == 1
        for family in ("gateway_plugin_calls", "gateway_plugin_failures", "gateway_plugin_seconds"):
            assert families[family].type == "counter", family
        assert value(families["gateway_plugin_calls"], "gateway_plugin_calls_total") >= 1
        nursery.cancel_scope.cancel()


async def test_a_json_answer_is_redacted_and_log_only_counts(
    database_url: str, tmp_path: Path
) -> None:
    toml = (
        PII_REDACT.replace("report_redactions = true", "report_redactions = false")
        + """
[[guardrails]]
name = "audit"
kind = "pii"
stages = ["input"]
action = "log"
"""
    )
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        rig.upstream.behavior.reply_text = f"Sure: {EMAIL}."
        r = await rig.chat(chat_body(f"My address is {EMAIL}"))
        assert r.status_code == 200, r.text
        assert (
            r.json()["choices"][0]["message"]["content"] == "Sure: [EMAIL]. "
        )  # the simulator ends each word with a space
        [sent] = upstream_chats(rig)
        # The redaction ran first (the order written), so the audit saw nothing to log.
        assert sent["messages"][0]["content"] == "My address is [EMAIL]"
        assert await events_of(rig, "guardrail.triggered") == []
        _, [row] = await ledger(rig, settled=1)  # a redacted answer is billed as usual
        assert row.amount_micros < 0
        metrics = (await rig.gateway.client.get("/metrics")).text
        assert 'guardrail="pii-redact",category="email",action="redact"} 2' in metrics
        assert 'guardrail="audit"' not in metrics


async def test_log_action_lets_the_request_through(database_url: str, tmp_path: Path) -> None:
    toml = PII_BLOCK.replace('action = "block"', 'action = "log"')
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        r = await rig.chat(chat_body(f"Mail {EMAIL}"))
        assert r.status_code == 200, r.text
        [sent] = upstream_chats(rig)
        assert sent["messages"][0]["content"] == f"Mail {EMAIL}"
        assert await events_of(rig, "guardrail.triggered") == []
        metrics = (await rig.gateway.client.get("/metrics")).text
        line = 'gateway_guardrail_findings_total{guardrail="pii",category="email",action="log"} 1'
        assert line in metrics


async def test_a_model_named_by_provider_and_upstream_is_guarded_as_its_entry(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_BLOCK) as rig:
        r = await rig.chat({**chat_body(f"Write to {EMAIL}"), "model": "sim/sim-small"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "guardrail_blocked"
