"""`gateway bench audio`: its arguments, the form it sends, and one small run end to end
through a real gateway process (the report's shape; never its timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.audio import form
from bench.cli import _parser, main
from bench.upstream.audio_routes import audio_duration, parse_form


def test_audio_arguments_and_defaults() -> None:
    args = _parser().parse_args(["audio"])
    assert (args.command, args.mb, args.rounds, args.out) == ("audio", 24, 3, None)
    args = _parser().parse_args(["audio", "--mb", "2", "--rounds", "1", "--out", "o"])
    assert (args.mb, args.rounds, args.out) == (2, 1, Path("o"))
    assert args.file_first is False
    assert _parser().parse_args(["audio", "--file-first"]).file_first is True
    with pytest.raises(SystemExit):
        _parser().parse_args(["audio", "--mb", "0"])


def test_the_form_is_model_first_and_a_wav_of_the_size() -> None:
    head, first, tail = form(1_000_000)
    body = head + first + bytes(1_000_000 - len(first)) + tail
    upload = parse_form("multipart/form-data; boundary=gateway-bench-audio-boundary", body)
    assert upload is not None and upload.order == ["model", "response_format", "file"]
    assert upload.file is not None and len(upload.file) == 1_000_000
    assert audio_duration(upload.file) == (1_000_000 - 44) / 32000


def test_the_file_first_form_puts_the_fields_after_it() -> None:
    head, first, tail = form(1_000_000, file_first=True)
    body = head + first + bytes(1_000_000 - len(first)) + tail
    upload = parse_form("multipart/form-data; boundary=gateway-bench-audio-boundary", body)
    assert upload is not None and upload.order == ["file", "model", "response_format"]
    assert upload.file is not None and len(upload.file) == 1_000_000


def test_audio_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real gateway; two 2 MB transcriptions."""
    argv = ["audio", "--mb", "2", "--rounds", "2", "--no-progress", "--out", str(tmp_path)]
    assert main([*argv, "--file-first"]) == 0  # held (2 MB: on disk, encrypted), then sent
    assert json.loads((tmp_path / "audio.json").read_text())["file_first"] is True
    capsys.readouterr()
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["MB", "seconds", "MB/s"]
    report = json.loads((tmp_path / "audio.json").read_text())
    assert (report["scenario"], report["size_mb"], report["rounds"]) == ("audio", 2, 2)
    assert [row["bytes"] for row in report["rows"]] == [2_000_000, 2_000_000]
    assert all(row["samples"] > 0 and row["mb_s"] > 0 for row in report["rows"])
