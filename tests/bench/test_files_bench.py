"""`gateway bench files`: its arguments, the generated content, the size cap, and one small run
end to end through a real gateway (the report's shape and the downloaded bytes' hash; never
its timings)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.cli import _parser, main
from bench.files import (
    PURPOSES,
    Content,
    FilesOptions,
    form_parts,
    planned_sizes,
)
from gateway.app import body_limits
from gateway.config.schema import ServerConfig
from protocol.files import validator_for


def test_files_arguments_and_defaults() -> None:
    args = _parser().parse_args(["files"])
    assert (args.command, args.mb, args.purpose, args.rounds, args.out) == (
        "files",
        (100,),
        ("fine-tune", "user_data"),
        1,
        None,
    )
    args = _parser().parse_args(
        ["files", "--mb", "100,512", "--purpose", "user_data", "--rounds", "2", "--out", "o"]
    )
    assert (args.mb, args.purpose, args.rounds, args.out) == (
        (100, 512),
        ("user_data",),
        2,
        Path("o"),
    )


@pytest.mark.parametrize("bad", [["--purpose", "batch"], ["--mb", "0"], ["--rounds", "0"]])
def test_bad_files_arguments_are_refused(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["files", *bad])
    assert exc.value.code == 2


def test_fine_tune_content_is_valid_jsonl_of_whole_lines() -> None:
    content = Content.for_purpose("fine-tune", 2_500_000)
    data = b"".join(content.pieces())
    assert len(data) == content.size
    assert 2_490_000 < content.size <= 2_500_000  # rounded down to a whole line
    assert data.endswith(b"\n")
    validator = validator_for("fine-tune")
    for piece in content.pieces():
        validator.feed(piece)
    assert validator.finish() == "application/jsonl"


def test_user_data_content_has_the_exact_size_in_pieces() -> None:
    content = Content.for_purpose("user_data", 2_345_678)
    pieces = list(content.pieces(100_000))
    assert sum(map(len, pieces)) == 2_345_678
    assert max(map(len, pieces)) <= 100_000
    again = hashlib.sha256(b"".join(content.pieces(7_777))).hexdigest()
    assert hashlib.sha256(b"".join(pieces)).hexdigest() == again  # same bytes however cut


def test_512_mb_is_the_whole_file_limit_and_its_form_fits_the_body_limit() -> None:
    options = FilesOptions(sizes_mb=(2, 512))
    body_limit = body_limits(ServerConfig()).file
    for purpose in PURPOSES:
        small, large = planned_sizes(options, purpose)
        assert (small, large) == (2_000_000, 512_000_000)
        head, tail = form_parts(purpose, Content.for_purpose(purpose, large))
        assert len(head) + large + len(tail) <= body_limit


@pytest.mark.filterwarnings("ignore:fewer than 2 CPUs")
def test_files_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real gateway, 2 MB of each purpose up and down; the hashes match."""
    assert main(["files", "--mb", "2", "--no-progress", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["purpose", "MB", "upload"]
    assert [line.split()[0] for line in lines[1:3]] == ["fine-tune", "user_data"]
    assert all(line.split()[-1] == "ok" for line in lines[1:3])
    assert any(line.startswith("load average (1 min): ") for line in lines)
    report = json.loads((tmp_path / "files.json").read_text())
    assert (report["scenario"], report["sizes_mb"], report["purposes"]) == (
        "files",
        [2],
        ["fine-tune", "user_data"],
    )
    assert len(report["loadavg_1min"]) == 2
    rows = report["rows"]
    assert [row["purpose"] for row in rows] == ["fine-tune", "user_data"]
    for row in rows:
        assert 1_990_000 < row["bytes"] <= 2_000_000
        assert row["downloaded_bytes"] == row["bytes"]
        assert row["download_sha256"] == row["sha256"]
        assert row["hash_ok"] is True
        assert row["samples"] >= 1
        for key in (
            "upload_mb_s",
            "download_mb_s",
            "disk_write_mb_s",
            "disk_read_mb_s",
            "rss_before_mb",
            "rss_peak_upload_mb",
            "rss_after_mb",
        ):
            assert row[key] > 0, key
        assert row["rss_peak_upload_mb"] >= row["rss_before_mb"]
