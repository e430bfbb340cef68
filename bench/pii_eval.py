"""Quality and cost of the PII recognizer (services/guardrails/pii.py).

    python -m bench.pii_eval [--repeat N]

Prints, on the labelled corpus of tests/services/guardrails/pii_corpus.py, each kind's recall,
precision and false-positive rate (the share of clean samples where it reported something);
how often random strings of look-alike shapes are reported; then µs per `find_pii` call
(best of 5 runs of N calls each, N defaulting to 2,000) on:

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
import functools
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
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


def _digits(rng: random.Random, n: int) -> str:
    return "".join(str(rng.randint(0, 9)) for _ in range(n))


def lookalikes(count: int = 1000) -> None:
    """Random strings of common non-PII shapes, and of shapes where a random value is often a
    valid one (a random 16-digit number passes Luhn one time in ten): how often each is
    reported, by kind."""
    rng = random.Random(23)
    d = functools.partial(_digits, rng)
    shapes: dict[str, Callable[[], str]] = {
        "UUID": lambda: str(uuid.UUID(int=rng.getrandbits(128))),
        "SHA-1 hex": lambda: f"{rng.getrandbits(160):040x}",
        "ISO timestamp": lambda: (
            f"20{d(2)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            f"T{rng.randint(0, 23):02d}:{d(1)}{d(1)}:{d(2)}Z"
        ),
        "date 27.11.2026": lambda: f"{rng.randint(1, 28):02d}.{rng.randint(1, 12):02d}.{d(4)}",
        "version 12.0.19041.1": lambda: f"{rng.randint(0, 20)}.{d(1)}.{d(5)}.{d(3)}",
        "price $12,345.67": lambda: f"${rng.randint(1, 99999):,}.{d(2)}",
        "MAC address": lambda: ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6)),
        "order number, 10 digits": lambda: "Order #" + d(10),
        "ISBN-13": lambda: f"978-{d(1)}-{d(2)}-{d(6)}-{d(1)}",
        "tracking, 22 digits": lambda: "94" + d(20),
        "16 digits": lambda: d(16),
        "4 groups of 4 digits": lambda: f"{d(4)} {d(4)} {d(4)} {d(4)}",
        "ddd-ddd-dddd": lambda: f"{d(3)}-{d(3)}-{d(4)}",
        "0dd ddd ddd": lambda: f"0{d(2)} {d(3)} {d(3)}",
    }
    print(f"\n{'random look-alikes (' + str(count) + ' each)':<40} reported")
    for name, make in shapes.items():
        kinds: Counter[str] = Counter()
        for _ in range(count):
            text = f"value {make()} here"
            kinds.update({m.entity for m in find_pii(text)})
        found = ", ".join(f"{k} {n / count:.1%}" for k, n in kinds.most_common()) or "nothing"
        print(f"{name:<40} {found}")


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
    lookalikes()
    timing(args.repeat)
    validators(args.repeat)


if __name__ == "__main__":
    main()
