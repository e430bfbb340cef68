"""Usage reports: independent ones add, cumulative ones overlay, sloppy ones are read leniently."""

from __future__ import annotations

import msgspec

from protocol.usage import Usage, merge_usage, overlay_usage, usage_from_object


def test_of_fills_the_total() -> None:
    assert Usage.of(3, 4) == Usage(3, 4, 7)


def test_merge_adds_and_skips_missing_reports() -> None:
    assert merge_usage() is None and merge_usage(None, None) is None
    assert merge_usage(Usage.of(1, 2), None, Usage.of(10, 20)) == Usage(11, 22, 33)


def test_overlay_keeps_earlier_counters_the_later_report_lacks() -> None:
    start = Usage.of(25, 1)  # Anthropic message_start: input known, output 1
    assert overlay_usage(start, Usage.of(0, 15)) == Usage(25, 15, 40)
    assert overlay_usage(None, Usage.of(0, 15)) == Usage(0, 15, 15)


def test_usage_from_object_is_lenient() -> None:
    assert usage_from_object(None) is None and usage_from_object([1]) is None
    assert usage_from_object({"prompt_tokens": 2, "completion_tokens": 3}) == Usage(2, 3, 5)
    assert usage_from_object({"prompt_tokens": "2", "completion_tokens": None}) == Usage(0, 0, 0)
    assert usage_from_object({"prompt_tokens": 2, "total_tokens": 9}) == Usage(2, 0, 9)


def test_usage_encodes_as_the_openai_object() -> None:
    assert msgspec.json.encode(Usage.of(1, 2)) == (
        b'{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}'
    )
