"""bench/file_pipeline.py on tiny inputs: every stage runs over valid data and reports a size."""

from __future__ import annotations

from bench.file_pipeline import batch_jsonl, fine_tune_jsonl, measure
from protocol.files import validator_for


def test_generated_files_are_valid_for_their_purpose() -> None:
    for purpose, data in (
        ("fine-tune", fine_tune_jsonl(200_000)),
        ("fine-tune", fine_tune_jsonl(200_000, short=True)),
        ("batch", batch_jsonl(200_000)),
    ):
        validator = validator_for(purpose)
        validator.feed(data)
        validator.finish()
        assert 150_000 < len(data) <= 400_000


def test_every_stage_is_measured() -> None:
    results = measure(1)
    assert [stage.split(" ")[0] for stage, _, _ in results] == [
        "validate",
        "validate",
        "validate",
        "encrypt",
        "decrypt",
    ]
    assert all(size > 500_000 and seconds > 0 for _, size, seconds in results)
