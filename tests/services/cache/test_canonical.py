"""The canonical encoding under the keys (services/cache/canonical.py): msgspec's fast path and
the stack-based walk for bodies nested too deep for it write the same bytes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.cache.canonical import _walk, canonical

VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -0.0,
    1.0,
    1e300,
    1e-7,
    0.1,
    -2.5,
    2**70,
    "",
    'caf\u00e9 \U0001f600 \x00 " \\ \n',
    [],
    {},
    [1, [2, [3, {}]]],
    {"b": 1, "a": {"d": [1.0, 2.5], "c": None}, "\uffff": 1, "\U0001f600": 2, "é": "x"},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_walk_writes_what_msgspec_writes(value: Any) -> None:
    assert _walk(value) == canonical(value)
    assert msgspec.json.decode(canonical(value)) == value  # still the same JSON value


def test_sorted_keys_no_whitespace_integral_floats_as_integers() -> None:
    assert canonical({"b": [1.0, -0.0, 0.5], "a": 1e2}) == b'{"a":100,"b":[1,0,0.5]}'


def test_too_deep_for_msgspec_is_walked() -> None:
    deep: Any = {"x": 1.0}
    for _ in range(50_000):
        deep = [deep]
    encoded = canonical(deep)
    assert encoded == b"[" * 50_000 + b'{"x":1}' + b"]" * 50_000


def test_what_is_no_json_value_is_refused() -> None:
    with pytest.raises(TypeError):
        _walk({1: "a"})
    with pytest.raises(TypeError):
        _walk(object())
