"""`--fault MODEL:SETTING=VALUE[,SETTING=VALUE...]` of `python -m bench.upstream`, parsed strictly.

The model is everything before the last `:` ahead of the first `=` (so `ft:base:org:every=2`
names `ft:base:org`). Settings are `Faults` fields: rates and `slow_first_byte_s` are decimal
numbers, `error_status`, `every` and the `*_frames`/`*_after` counts whole numbers, `stall` is
`true`/`false` (alone: true), and `retry_after` is whole seconds. Several `--fault` options for
one model add up; naming a setting twice is an error, as is any unknown setting or bad value.
No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from bench.upstream.faults import FAULT_SETTINGS, Faults

SettingValue = float | int | bool | str


class FaultSpecError(ValueError):
    """A `--fault` value that cannot be used; the message says why."""


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _whole(text: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(text)
    return int(text)


def _flag(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def _seconds(text: str) -> str:
    return str(_whole(text))


_KINDS: dict[str, tuple[Callable[[str], SettingValue], str]] = {
    "error_rate": (_number, "a number from 0 to 1"),
    "error_status": (_whole, "a 5xx status"),
    "rate_limit_rate": (_number, "a number from 0 to 1"),
    "retry_after": (_seconds, "whole seconds"),
    "stall": (_flag, "true or false"),
    "stall_after_frames": (_whole, "a whole number"),
    "reset_after_frames": (_whole, "a whole number"),
    "error_frame_after": (_whole, "a whole number"),
    "slow_first_byte_s": (_number, "a number of seconds"),
    "every": (_whole, "a whole number >= 1"),
}
assert set(_KINDS) == set(FAULT_SETTINGS), "every Faults field needs a parser here"


def parse_fault(text: str) -> tuple[str, dict[str, SettingValue]]:
    """`MODEL:SETTINGS` as (model, settings); raises FaultSpecError."""
    equals = text.find("=")
    colon = text.rfind(":", 0, equals if equals >= 0 else len(text))
    model, settings_text = text[:colon], text[colon + 1 :]
    if colon <= 0 or not model.strip():
        raise FaultSpecError(f"{text!r}: expected MODEL:SETTING=VALUE[,SETTING=VALUE...]")
    if not settings_text:
        raise FaultSpecError(f"{text!r}: no settings after the model")
    settings: dict[str, SettingValue] = {}
    for item in settings_text.split(","):
        name, has_value, raw = item.partition("=")
        if name not in _KINDS:
            known = ", ".join(FAULT_SETTINGS)
            raise FaultSpecError(f"{text!r}: unknown setting {name!r} (known: {known})")
        if name in settings:
            raise FaultSpecError(f"{text!r}: {name} given twice")
        if not has_value:
            if name != "stall":
                raise FaultSpecError(f"{text!r}: {name} needs a value")
            raw = "true"
        convert, expected = _KINDS[name]
        try:
            settings[name] = convert(raw)
        except ValueError:
            raise FaultSpecError(f"{text!r}: {name} must be {expected}, not {raw!r}") from None
    return model, settings


def faults_from(specs: Iterable[tuple[str, dict[str, SettingValue]]]) -> dict[str, Faults]:
    """Each model's `Faults` from parsed specs, merged per model; raises FaultSpecError when a
    setting is given twice for one model or a value is out of range (e.g. error_rate=2)."""
    merged: dict[str, dict[str, SettingValue]] = {}
    for model, settings in specs:
        into = merged.setdefault(model, {})
        for name, value in settings.items():
            if name in into:
                raise FaultSpecError(f"{model}: {name} given twice")
            into[name] = value
    faults: dict[str, Faults] = {}
    for model, settings in merged.items():
        try:
            faults[model] = Faults(**settings)  # type: ignore[arg-type]
        except ValueError as exc:
            raise FaultSpecError(f"{model}: {exc}") from None
    return faults
