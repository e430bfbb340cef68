"""Mirroring's pure rules: which requests are sampled, how two answers compare, the row a call
leaves (its answer sealed), and the comparison the admin route reports."""

from __future__ import annotations

import os
import random

import msgspec
import pytest

from protocol.secretbox import MIRROR_ANSWERS, SecretBox
from services.mirror import (
    MAX_SEALED_ANSWER_BYTES,
    MirrorJob,
    ShadowResult,
    answers_equal,
    compare,
    open_answer,
    percentile,
    result_row,
    sampled,
)
from storage.mirror_results import Figures


def _ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"req_{rng.getrandbits(128):032x}" for _ in range(n)]


def test_sampling_is_decided_by_the_request_id_alone() -> None:
    for request_id in _ids(200, seed=1):
        first = sampled(0.3, request_id)
        assert all(sampled(0.3, request_id) == first for _ in range(3))


def test_a_rate_of_0_never_samples_and_1_always() -> None:
    ids = _ids(2000, seed=2)
    assert not any(sampled(0.0, i) for i in ids)
    assert all(sampled(1.0, i) for i in ids)


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.5, 0.9])
def test_the_share_sampled_is_the_rate(rate: float) -> None:
    n = 20_000
    hits = sum(sampled(rate, i) for i in _ids(n, seed=3))
    # Binomial: 5 standard deviations either side (fails about once in 3.5 million runs,
    # and never with these seeded ids).
    sd = (n * rate * (1 - rate)) ** 0.5
    assert abs(hits - n * rate) < 5 * sd


def test_a_lower_rate_samples_a_subset_of_a_higher_one() -> None:
    ids = _ids(5000, seed=4)
    low = {i for i in ids if sampled(0.1, i)}
    high = {i for i in ids if sampled(0.4, i)}
    assert low <= high


def _chat(text: str | None, *, calls: tuple[tuple[str, str], ...] = (), model: str = "m") -> bytes:
    message: dict[str, object] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return msgspec.json.encode(
        {"id": "x", "model": model, "choices": [{"index": 0, "message": message}]}
    )


def test_chat_answers_compare_by_text_and_tool_calls_not_by_ids_or_model() -> None:
    assert answers_equal("chat", _chat("hello there "), _chat(" hello there", model="other"))
    assert answers_equal("chat", _chat("hello"), _chat("goodbye")) is False
    a = _chat(None, calls=(("get_weather", '{"city": "Paris"}'),))
    b = _chat(None, calls=(("get_weather", '{"city": "Paris"}'),), model="z")
    c = _chat(None, calls=(("get_weather", '{"city": "Rome"}'),))
    assert answers_equal("chat", a, b) is True
    assert answers_equal("chat", a, c) is False


def test_answers_that_cannot_be_compared_are_none() -> None:
    assert answers_equal("chat", None, _chat("a")) is None  # a streamed primary
    assert answers_equal("chat", _chat("a"), None) is None  # a failed shadow
    assert answers_equal("chat", b"[1, 2]", _chat("a")) is None
    assert answers_equal("chat", b"not json", _chat("a")) is None


def test_a_responses_primary_compares_with_the_shadows_chat_answer() -> None:
    response = msgspec.json.encode(
        {
            "object": "response",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "tok0 tok1 "}],
                }
            ],
        }
    )
    assert answers_equal("responses", response, _chat("tok0 tok1")) is True
    assert answers_equal("responses", response, _chat("tok0")) is False


def test_embeddings_compare_by_their_vectors() -> None:
    def answer(*vectors: list[float]) -> bytes:
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        return msgspec.json.encode({"object": "list", "data": data[::-1]})

    assert answers_equal("embeddings", answer([0.1, 0.2], [0.3]), answer([0.1, 0.2], [0.3]))
    assert answers_equal("embeddings", answer([0.1, 0.2]), answer([0.1, 0.25])) is False


def _job(answer: bytes | None = None) -> MirrorJob:
    return MirrorJob(
        org_id="org_1",
        key_id="key_1",
        request_id="req_1",
        route="chat",
        model="small",
        shadow="haiku",
        billed=False,
        body=b'{"model": "small", "messages": []}',
        primary_latency_ms=12.5,
        primary_prompt_tokens=10,
        primary_completion_tokens=20,
        primary_cost_usd=0.001,
        primary_answer=answer,
    )


def test_the_row_holds_the_answer_sealed_and_it_opens_for_its_row_only() -> None:
    box = SecretBox.for_purpose(os.urandom(32), MIRROR_ANSWERS)
    answer = _chat("a secret answer about the customer")
    row = result_row(_job(answer), ShadowResult("ok", 30.0, 10, 20, 0.002, answer), box, 1_000)
    assert row.answers_equal is True
    assert row.shadow_answer_sealed is not None
    assert b"secret" not in row.shadow_answer_sealed.encode()
    assert "secret" not in repr(row) and "secret" not in repr(_job(answer))
    assert open_answer(box, row) == answer
    other = result_row(_job(answer), ShadowResult("ok", answer=answer), box, 1_000)
    with pytest.raises(Exception, match="authentication"):
        box.open(row.shadow_answer_sealed, (other.org_id, other.id))


def test_a_failed_call_or_a_long_answer_stores_no_answer() -> None:
    box = SecretBox.for_purpose(os.urandom(32), MIRROR_ANSWERS)
    failed = result_row(_job(_chat("a")), ShadowResult("http_503", 5.0), box, 1)
    assert (failed.shadow_answer_sealed, failed.answers_equal) == (None, None)
    long = _chat("x" * MAX_SEALED_ANSWER_BYTES)
    kept = result_row(_job(long), ShadowResult("ok", answer=long), box, 1)
    assert kept.shadow_answer_sealed is None and kept.answers_equal is True


def _figures(outcome: str, p_ms: float, s_ms: float, equal: bool | None) -> Figures:
    return Figures("small", "haiku", outcome, p_ms, 10, 20, 0.5, s_ms, 12, 22, 0.25, equal)


def test_compare_reports_each_side_over_the_right_rows() -> None:
    rows = [_figures("ok", float(i), float(100 + i), i % 2 == 0) for i in range(1, 21)]
    rows.append(_figures("timeout", 21.0, 5000.0, None))
    rows.append(Figures("other", "haiku", "ok", 1.0, 1, 1, 0.0, 1.0, 1, 1, 0.0, True))
    other, small = compare(rows)  # by model, then shadow
    assert (small.model, small.shadow, other.model) == ("small", "haiku", "other")
    assert (small.requests, small.errors) == (21, 1)
    assert small.outcomes == {"ok": 20, "timeout": 1}
    primary, shadow = small.figures.primary, small.figures.shadow
    assert (primary.calls, shadow.calls) == (21, 20)
    assert (primary.latency_ms_p50, primary.latency_ms_p95) == (11.0, 20.0)
    assert (shadow.latency_ms_p50, shadow.latency_ms_p95) == (110.0, 119.0)  # the timeout not
    assert (primary.mean_prompt_tokens, shadow.mean_completion_tokens) == (10.0, 22.0)
    assert primary.cost_usd == pytest.approx(21 * 0.5)
    assert shadow.cost_usd == pytest.approx(21 * 0.25)
    assert (small.compared, small.equal_share) == (20, 0.5)


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0
