"""protocol/files/disposition.py: a download's Content-Disposition names the base name only,
and stays printable ASCII whatever the stored filename holds (issue #19, item 12)."""

from __future__ import annotations

import pytest

from protocol.files.disposition import base_name, content_disposition

CASES = [
    ("report.txt", 'attachment; filename="report.txt"'),
    ("../../etc/passwd", 'attachment; filename="passwd"'),
    ("/etc/passwd", 'attachment; filename="passwd"'),
    ("C:\\Users\\me\\evil.exe", 'attachment; filename="evil.exe"'),
    ("..\\..\\x.txt", 'attachment; filename="x.txt"'),
    ("résumé.pdf", "attachment; filename=\"r_sum_.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"),
    ('a"b.txt', "attachment; filename=\"a_b.txt\"; filename*=UTF-8''a%22b.txt"),
    ("100%.txt", "attachment; filename=\"100_.txt\"; filename*=UTF-8''100%25.txt"),
    ("x\r\nSet-Cookie: a=b.txt", 'attachment; filename="xSet-Cookie: a=b.txt"'),
    ("nul\x00.txt", 'attachment; filename="nul.txt"'),
    ("invoice\u202etxt.exe", 'attachment; filename="invoicetxt.exe"'),
    ("dir/", 'attachment; filename="file_abc"'),
    ("..", 'attachment; filename="file_abc"'),
    ("a/\x01\x02", 'attachment; filename="file_abc"'),
]


@pytest.mark.parametrize(("stored", "header"), CASES)
def test_the_header_names_the_clean_base_name(stored: str, header: str) -> None:
    got = content_disposition(stored, "file_abc")
    assert got == header
    assert got.isascii() and got.isprintable()


def test_base_name() -> None:
    assert base_name("a/b/c.txt", "f") == "c.txt"
    assert base_name("  spaced.txt ", "f") == "spaced.txt"
    assert base_name("/", "f") == "f"
