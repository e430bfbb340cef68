"""Cost and false positives of the prompt-injection heuristic
(services/guardrails/injection.py `detect_injection`).

    python -m bench.injection_cost

Times (best of five runs) a 2 KB chat message in ASCII and with a few non-ASCII characters,
1 MB of prose, and hostile 1 MB inputs built to make a backtracking engine go quadratic; then
counts the paragraphs flagged in text nobody wrote to attack a model: the repository's docs/
and the docstrings of the Python standard library.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
import timeit
from pathlib import Path

from services.guardrails.injection import detect_injection

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000
_HOSTILE = {
    "repeated 'ignore '": "ignore " * (MB // 7),
    "'#' x 1M": "#" * MB,
    "'<|' x 500k": "<|" * (MB // 2),
    "repeated 'show me '": "show me " * (MB // 8),
    "zero-width x 1M": "\u200b" * MB,
    "fullwidth words": "ｉｇｎｏｒｅ " * (MB // 7),
    "CJK": "中文字符" * (MB // 4),
}


def _best(text: str, number: int) -> float:
    return min(timeit.repeat(lambda: detect_injection(text), number=number, repeat=5)) / number


def _prose(size: int) -> str:
    words = [w for w in (ROOT / "docs" / "inference.md").read_text().split() if w.isascii()]
    rng = random.Random(1)
    return " ".join(rng.choice(words) for _ in range(size // 5))[:size]


def _paragraphs() -> tuple[list[str], int]:
    """Paragraphs of docs/*.md, then of every docstring in the standard library."""
    paragraphs: list[str] = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        paragraphs += [p for p in re.split(r"\n\s*\n", path.read_text()) if p.strip()]
    from_docs = len(paragraphs)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted([*stdlib.glob("*.py"), *stdlib.glob("*/*.py")]):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    paragraphs += [p for p in re.split(r"\n\s*\n", doc) if p.strip()]
    return paragraphs, from_docs


def main() -> None:
    message = _prose(2000)
    accented = ("Grüße aus Köln — it’s “fine” " * 80)[:2000]
    timings = [("2 KB ASCII message", message, 2000), ("2 KB non-ASCII message", accented, 2000)]
    timings.append(("1 MB ASCII prose", _prose(MB), 3))
    timings += [(f"1 MB {name}", text, 1) for name, text in _HOSTILE.items()]
    for name, text, number in timings:
        seconds = _best(text, number)
        print(f"{name:30} {seconds * 1e6:12.1f} µs  {len(text) / seconds / 1e6:6.1f} MB/s")
    paragraphs, from_docs = _paragraphs()
    flagged = [(p, m) for p in paragraphs if (m := detect_injection(p)) is not None]
    size = sum(len(p) for p in paragraphs) / MB
    print(f"{len(paragraphs)} paragraphs ({from_docs} from docs/, {size:.1f} MB): ", end="")
    print(f"{len(flagged)} flagged")
    for paragraph, match in flagged:
        print(f"  {match.category}: {paragraph[match.start : match.end]!r}")


if __name__ == "__main__":
    main()
