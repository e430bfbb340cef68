"""Fine-tuning rules without I/O: dated base models, suffixes, effective hyperparameters, the
fine-tuned model's name, the training charge, the dataset check and its token count (fast and
line-by-line paths alike), and a provider's job read into the API's states."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest

from protocol.errors import APIError, DatasetError, UpstreamMalformed
from protocol.files.jsonl import FAST_MIN_LINES
from protocol.fine_tuning.api import JobCreate
from protocol.fine_tuning.dataset import DatasetCheck
from protocol.fine_tuning.provider import (
    find_job_for_file,
    map_status,
    read_file_id,
    read_job,
)
from protocol.fine_tuning.rules import (
    check_dated,
    effective,
    estimated_finish_s,
    fine_tuned_model_name,
    training_charge,
)

LINE = b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}'


@pytest.mark.parametrize(
    "name", ["gpt-4o-mini-2024-07-18", "sim/sim-small-2024-07-18", "x-2024-02-29"]
)
def test_dated_models_pass(name: str) -> None:
    check_dated(name)


@pytest.mark.parametrize(
    "name",
    ["gpt-4o-mini", "gpt-4o-mini-2024-07", "x-2023-02-29", "x-2024-13-01", "2024-07-18/x", ""],
)
def test_undated_models_are_refused(name: str) -> None:
    with pytest.raises(APIError) as caught:
        check_dated(name)
    assert caught.value.param == "model" and caught.value.status == 400


def test_suffix_rules() -> None:
    body = msgspec.json.decode(
        b'{"model": "m-2024-01-01", "training_file": "f", "suffix": "my_model-1"}', type=JobCreate
    )
    assert body.suffix == "my_model-1"
    for bad in ("", "a b", "a:b", "x" * 65, "é"):
        with pytest.raises(APIError) as caught:
            JobCreate(model="m", training_file="f", suffix=bad)
        assert caught.value.param == "suffix"


def test_effective_hyperparameters() -> None:
    assert effective(None, "auto", None) == effective("auto", None, "auto")
    auto = effective(None, None, None)
    assert (auto.n_epochs, auto.batch_size, auto.learning_rate_multiplier) == (3, 1, Decimal(2))
    given = effective(5, 8, 0.1)
    assert (given.n_epochs, given.batch_size) == (5, 8)
    assert given.learning_rate_multiplier == Decimal("0.1")  # exact, not the float's expansion


def test_fine_tuned_model_name() -> None:
    name = fine_tuned_model_name("gpt-4o-mini-2024-07-18", "org_A", None, "ftjob_abc")
    assert name == "ft:gpt-4o-mini-2024-07-18:org_A::abc"
    assert fine_tuned_model_name("m", "org_A", "pets", "ftjob_x") == "ft:m:org_A:pets:x"


def test_training_charge_is_exact() -> None:
    # 1,000,000 tokens x 3 epochs x $8/M = $24, + 4% = $24.96
    assert training_charge(1_000_000, 3, Decimal(8), Decimal(4)) == 24_960_000
    # 50 x 3 x $3/M = $0.00045, + 4% = $0.000468 exactly
    assert training_charge(50, 3, Decimal(3), Decimal(4)) == 468
    # half a micro-dollar rounds up: 1 token x 1 epoch x $0.5/M = 0.5 µ$
    assert training_charge(1, 1, Decimal("0.5"), Decimal(0)) == 1
    assert training_charge(0, 3, Decimal(3), Decimal(4)) == 0
    assert estimated_finish_s(1000, 10_000, 3) == 1000 + 300 + 30


def check(content: bytes, *, pieces: int = 1, limit: int = 10_000) -> int:
    c = DatasetCheck("training_file", limit)
    step = max(1, len(content) // pieces)
    for start in range(0, len(content), step):
        c.feed(content[start : start + step])
    return c.finish()


def test_tokens_are_counted_alike_on_both_paths() -> None:
    many = b"\n".join([LINE] * (FAST_MIN_LINES * 2)) + b"\n"
    fast = check(many)
    slow = check(many, pieces=len(many))  # a byte at a time: line by line
    assert fast == slow == 5 * FAST_MIN_LINES * 2


def test_tools_and_tool_calls_count() -> None:
    line = (
        b'{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":'
        b'[{"id":"c","type":"function","function":{"name":"get","arguments":"{}"}}]}],'
        b'"tools":[{"type":"function"}]}'
    )
    tools = len(b'[{"type":"function"}]')
    assert check(line) == -(-(4 + 1 + 9 + 3 + 2 + tools) // 4)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"nope\n", "training_file: line 1: not valid JSON"),
        (LINE + b'\n\n{"messages":[]}\n', "training_file: line 3: messages is empty"),
        (b'{"messages":[{"role":"user","content":"x"}]}', "training_file: line 1: messages"),
        (b"", "training_file: the file has no lines"),
    ],
)
def test_invalid_format_names_the_line(content: bytes, message: str) -> None:
    with pytest.raises(DatasetError) as caught:
        check(content)
    assert caught.value.code == "invalid_format"
    assert caught.value.param == "training_file"
    assert caught.value.message.startswith(message)


def test_the_first_example_over_the_limit_is_named_on_both_paths() -> None:
    long = (
        b'{"messages":[{"role":"user","content":"' + b"y" * 400 + b'"},'
        b'{"role":"assistant","content":"z"}]}'
    )
    lines = [LINE] * FAST_MIN_LINES + [long] + [LINE] * FAST_MIN_LINES
    content = b"\n".join(lines) + b"\n"
    for pieces in (1, len(content)):
        with pytest.raises(DatasetError) as caught:
            check(content, pieces=pieces, limit=50)
        assert caught.value.code == "token_limit_exceeded"
        assert f"line {FAST_MIN_LINES + 1}:" in caught.value.message


def test_provider_jobs_read_into_spec_states() -> None:
    job = read_job(
        b'{"id":"ftjob-1","status":"failed","fine_tuned_model":null,"trained_tokens":9,'
        b'"error":{"code":"invalid_format","message":"bad","param":"training_file"}}'
    )
    assert (job.id, job.status, job.trained_tokens) == ("ftjob-1", "failed", 9)
    assert (job.error_code, job.error_message, job.error_param) == (
        "invalid_format",
        "bad",
        "training_file",
    )
    assert map_status("pending") == "queued"
    assert map_status("paused") == "running"  # unknown: still going, keep polling
    for bad in (b"[]", b"{", b'{"id":"a/b","status":"queued"}', b'{"id":"x"}', b'{"id":""}'):
        with pytest.raises(UpstreamMalformed):
            read_job(bad)
    assert read_file_id(b'{"id":"file-abc"}') == "file-abc"
    with pytest.raises(UpstreamMalformed):
        read_file_id(b'{"id":"../x?y"}')


def test_a_job_is_found_by_its_training_file_in_a_list() -> None:
    body = (
        b'{"object":"list","data":[{"id":"ftjob-2","status":"running","training_file":"file-b"},'
        b'{"id":"ftjob-1","status":"succeeded","training_file":"file-a",'
        b'"fine_tuned_model":"ft:x"}],"has_more":false}'
    )
    found = find_job_for_file(body, "file-a")
    assert found is not None and (found.id, found.status) == ("ftjob-1", "succeeded")
    assert find_job_for_file(body, "file-c") is None
    for bad in (b"{}", b"[]", b"nope", b'{"data": {}}'):
        with pytest.raises(UpstreamMalformed):
            find_job_for_file(bad, "file-a")
