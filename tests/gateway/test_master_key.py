"""The master key: configured, or generated once under the data dir and reused."""

from __future__ import annotations

import base64
import logging
import stat
from pathlib import Path

import pytest

from gateway.config.master_key import MasterKeyError, load_master_key


def test_configured_key_is_used_and_nothing_written(tmp_path: Path) -> None:
    key = b"k" * 32
    assert load_master_key(key, tmp_path) == key
    assert list(tmp_path.iterdir()) == []


def test_generated_once_with_a_warning_then_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    first = load_master_key(None, tmp_path / "data")
    path = tmp_path / "data" / "master.key"
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert any("GATEWAY_MASTER_KEY" in r.getMessage() for r in caplog.records)
    assert base64.b64encode(first).decode() not in caplog.text
    assert load_master_key(None, tmp_path / "data") == first


def test_corrupt_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text(base64.b64encode(b"short").decode())
    with pytest.raises(MasterKeyError, match="32 bytes"):
        load_master_key(None, tmp_path)
