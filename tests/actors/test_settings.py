"""ActorSettings: every knob validated where it is declared, unknown keys refused."""

from __future__ import annotations

import msgspec
import pytest

from actors.settings import DEFAULTS, ActorSettings


def test_defaults_are_valid_and_cover_the_kinds() -> None:
    assert {"rate_limiter", "accountant", "stream_relay", "webhook_delivery"} <= set(DEFAULTS)
    for settings in DEFAULTS.values():
        assert settings.problems() == []


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"inbox_capacity": 0}, "inbox_capacity must be at least 1"),
        ({"initial_backoff_s": -1.0}, "initial_backoff_s must be >= 0"),
        ({"initial_backoff_s": 5.0, "max_backoff_s": 1.0}, "max_backoff_s (1.0) must be >="),
        ({"max_restarts": -1}, "max_restarts must be >= 0"),
        ({"restart_window_s": 0.0}, "restart_window_s must be > 0"),
        ({"idle_retire_s": 0.0}, "idle_retire_s must be > 0"),
        ({"overflow": "sometimes"}, "Invalid enum value 'sometimes'"),
        ({"inbox_size": 3}, "unknown field `inbox_size`"),
    ],
)
def test_bad_values_are_refused_with_the_reason(table: dict[str, object], problem: str) -> None:
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.convert(table, ActorSettings)
    assert problem in str(refused.value)
