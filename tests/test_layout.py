"""The shape of the code base: no module over 500 lines (split by responsibility before it
grows past that). The layer rule itself is checked by import-linter (`lint-imports` in
`make test`, `[tool.importlinter]` in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "storage", "services", "actors", "gateway", "bench")
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_packages_are_found() -> None:
    found = {p.relative_to(ROOT).parts[0] for p in _modules()}
    assert found == set(PACKAGES)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
