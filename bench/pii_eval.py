"""Quality and cost of the PII recognizer (services/guardrails/pii.py).

    python -m bench.pii_eval [--repeat N]

Prints, on the labelled corpus of tests/services/guardrails/pii_corpus.py, each kind's recall,
precision and false-positive rate (the share of clean samples where it reported something),
then µs per `find_pii` call (best of 5 runs of N calls each, N defaulting to 2,000) on:

- clean prose of 1 KB and 10 KB (ASCII, and with non-ASCII letters: the offset conversion);
- prose with numbers that are not PII (dates, versions, prices, order numbers): the
  candidates are found and rejected;
- the same 1 KB and 10 KB with one value of every kind;
- a 200-character stream chunk (the size a guard scans per chunk with its look-behind);

and the one-off cost of importing the module (its validators' libraries), and the costs of
the validators alone per candidate.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Callable

from services.guardrails.pii import ENTITIES, MAX_MATCH_CHARS, find_pii
from tests.services.guardrails.pii_corpus import corpus, score

# Prose as a prompt has it: capitals (A, JSON, API), hyphens, colons, apostrophes, which are
# the bytes some gates look for ("A" of AKIA, "J" of eyJ, "-" of sk-, ":" of IPv6).
_WORDS = (
    "the model answered that our request for a summary of the meeting notes was fine and it "
    "will send the report tomorrow morning after review by the team lead who asked whether "
    "latency budgets for streaming responses should include retries across regions. A JSON "
    "API re-run e-mail Note: it's we'll (see above), Alice Jones; Berlin Paris"
).split()
_NUMBERS = (
    "2024-01-15 v1.2.3 $1,299.99 order #48213 12:30:45 ISBN 978-3-16-148410-0 "
    "build 10.0.19041 3.5% 1700000000 ticket 4471-2209 page 123-145"
).split()
_VALUES = (
    "jane.doe@example.com, +44 20 7946 0958, 4111 1111 1111 1111, DE89 3704 0044 0532 0130 00, "
    "078-05-1121, 192.168.10.4, sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
)


def prose(size: int, seed: int, extra: tuple[str, ...] = (), every: int = 0) -> str:
    rng = random.Random(seed)
    words = []
    length = 0
    while length < size:
        word = rng.choice(extra) if every and rng.randrange(every) == 0 else rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def per_call_us(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / repeat * 1e6


def quality() -> None:
    samples = corpus()
    scores, negatives, misses = score(
        samples, lambda t: [(m.entity, m.start, m.end) for m in find_pii(t)]
    )
    print(f"corpus: {len(samples) - negatives} values, {negatives} clean or invalid samples")
    print(f"{'kind':<12} {'values':>6} {'recall':>7} {'precision':>9} {'FP rate':>8}")
    for entity in ENTITIES:
        s = scores[entity]
        fp_rate = s.negatives_hit / negatives
        print(f"{entity:<12} {s.positives:>6} {s.recall:>7.3f} {s.precision:>9.3f} {fp_rate:>8.2%}")
    for line in misses:
        print("  " + line)


def timing(repeat: int) -> None:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import services.guardrails.pii"], check=True, capture_output=True
    )
    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)
    t_bare = time.perf_counter() - t0
    print(f"\nimport services.guardrails.pii: {(t_import - t_bare) * 1e3:.0f} ms once per process")
    cases = {
        "clean 1 KB": prose(1024, 1),
        "clean 10 KB": prose(10240, 2),
        "clean 1 KB, non-ASCII": prose(1024, 3, ("prüfen", "café", "日本語", "naïve"), 8),
        "clean 10 KB, non-ASCII": prose(10240, 4, ("prüfen", "café", "日本語", "naïve"), 8),
        "numbers, no PII, 1 KB (1 word in 6)": prose(1024, 5, tuple(_NUMBERS), 6),
        "numbers, no PII, 10 KB (1 word in 6)": prose(10240, 6, tuple(_NUMBERS), 6),
        "numbers, no PII, 10 KB (1 word in 50)": prose(10240, 6, tuple(_NUMBERS), 50),
        "7 findings in 1 KB": prose(1024 - len(_VALUES), 7) + " " + _VALUES,
        "7 findings in 10 KB": prose(10240 - len(_VALUES), 8) + " " + _VALUES,
        f"stream window ({MAX_MATCH_CHARS} + 200 chars)": prose(MAX_MATCH_CHARS + 200, 9),
    }
    print(f"\n{'text':<40} {'µs/call':>9} {'found':>6}")
    for name, text in cases.items():
        n = repeat if len(text) < 5000 else max(repeat // 10, 50)
        us = per_call_us(lambda text=text: find_pii(text), n)  # type: ignore[misc]
        print(f"{name:<40} {us:>9.1f} {len(find_pii(text)):>6}")


def validators(repeat: int) -> None:
    """What one candidate costs each library, valid (the dearest case: no early exit)."""
    import ipaddress

    import phonenumbers
    from stdnum import iban, luhn
    from stdnum.us import ssn

    def phone(text: str, region: str | None) -> bool:
        return phonenumbers.is_valid_number(phonenumbers.parse(text, region))

    cases: dict[str, Callable[[], object]] = {
        "phonenumbers parse + is_valid (+44 …)": lambda: phone("+44 20 7946 0958", None),
        "phonenumbers, national, region US": lambda: phone("(415) 555-2671", "US"),
        "stdnum.iban.is_valid": lambda: iban.is_valid("DE89370400440532013000", False),
        "stdnum.luhn.is_valid (16 digits)": lambda: luhn.is_valid("4111111111111111"),
        "stdnum.us.ssn.is_valid": lambda: ssn.is_valid("078-05-1121"),
        "ipaddress.IPv6Address": lambda: ipaddress.IPv6Address("2001:db8::8a2e:370:7334"),
    }
    print(f"\n{'validator, per candidate':<40} {'µs/call':>9}")
    for name, fn in cases.items():
        print(f"{name:<40} {per_call_us(fn, repeat):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    quality()
    timing(args.repeat)
    validators(args.repeat)


if __name__ == "__main__":
    main()
