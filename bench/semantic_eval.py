"""Precision and recall of the semantic cache's matching, per similarity threshold, on the pairs
of bench/semantic_pairs.py, with the simulated upstream's embedding model
(bench/upstream/embedding.py). No I/O: `.venv/bin/python -m bench.semantic_eval`.

Three ways, per threshold:

- pairs: each pair alone, the second stored and the first looked up through `best_match`; a
  paraphrase found is a true hit, a different question found a false one;
- similarity only: the same without `same_question`, to show what the guard adds;
- pooled: every pair's second text stored in one scope, every first text looked up among them
  all: a hit on another question is false (what a busy cache would see);
- held-out pairs: as `pairs`, on the pairs written after the choices were made.

Precision = true hits / all hits (1.0 when there are none); recall = true hits / paraphrases.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.semantic_pairs import (
    DIFFERENT,
    HELD_OUT_DIFFERENT,
    HELD_OUT_PARAPHRASES,
    PARAPHRASES,
)
from bench.upstream.embedding import embed
from services.cache.semantic import best_match, cosine, encode_vector

DEFAULT_THRESHOLD = 0.8
THRESHOLDS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


@dataclass(frozen=True, slots=True)
class Figures:
    true_hits: int
    false_hits: int
    paraphrases: int

    @property
    def precision(self) -> float:
        hits = self.true_hits + self.false_hits
        return self.true_hits / hits if hits else 1.0

    @property
    def recall(self) -> float:
        return self.true_hits / self.paraphrases


def vector(text: str) -> bytes:
    return encode_vector(embed(text))


Pairs = tuple[tuple[str, str], ...]


def pairs(
    threshold: float,
    *,
    guard: bool = True,
    paraphrases: Pairs = PARAPHRASES,
    different: Pairs = DIFFERENT,
) -> Figures:
    """Each pair on its own: is the second text found for the first?"""

    def found(a: str, b: str) -> bool:
        if not guard:
            return cosine(vector(a), vector(b)) >= threshold
        return best_match(vector(a), a, [(0, vector(b), b)], threshold) is not None

    true_hits = sum(found(a, b) for a, b in paraphrases)
    false_hits = sum(found(a, b) for a, b in different)
    return Figures(true_hits, false_hits, len(paraphrases))


def held_out(threshold: float) -> Figures:
    return pairs(threshold, paraphrases=HELD_OUT_PARAPHRASES, different=HELD_OUT_DIFFERENT)


def pooled(threshold: float) -> Figures:
    """Every second text in one scope; every first text looked up among them all. A hit is true
    when the two texts are one question: a pair of PARAPHRASES joins two texts, and texts equal
    but for case, punctuation and spacing are one (both sets reuse some questions)."""
    everything = PARAPHRASES + DIFFERENT
    same = _classes()
    stored = [(b, vector(b), b) for _, b in everything]
    stored_classes = {same[b] for _, b in everything}
    true_hits = false_hits = expected = 0
    for a, _ in everything:
        expected += same[a] in stored_classes
        match = best_match(vector(a), a, stored, threshold)
        if match is not None:
            if same[match] == same[a]:
                true_hits += 1
            else:
                false_hits += 1
    return Figures(true_hits, false_hits, expected)


def _classes() -> dict[str, int]:
    """Each text's question: texts joined by a paraphrase pair or equal once normalized."""
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        while parent.setdefault(text, text) != text:
            text = parent[text]
        return text

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    texts = {t for pair in PARAPHRASES + DIFFERENT for t in pair}
    for text in texts:
        join(
            text,
            " ".join("".join(c for c in text.casefold() if c.isalnum() or c.isspace()).split()),
        )
    for a, b in PARAPHRASES:
        join(a, b)
    roots = sorted({root(t) for t in texts})
    return {t: roots.index(root(t)) for t in texts}


def misses(threshold: float) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The paraphrases not found and the different questions found, pair by pair."""

    def found(a: str, b: str) -> bool:
        return best_match(vector(a), a, [(0, vector(b), b)], threshold) is not None

    lost = [p for p in PARAPHRASES + HELD_OUT_PARAPHRASES if not found(*p)]
    wrong = [p for p in DIFFERENT + HELD_OUT_DIFFERENT if found(*p)]
    return lost, wrong


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.semantic_eval", description=__doc__)
    parser.add_argument("--details", action="store_true", help="list the errors at the default")
    args = parser.parse_args(argv)
    print(
        f"{len(PARAPHRASES)} paraphrase pairs, {len(DIFFERENT)} different-question pairs;"
        f" held out: {len(HELD_OUT_PARAPHRASES)} and {len(HELD_OUT_DIFFERENT)}"
    )
    print("precision recall, per threshold:")
    print("threshold | pairs | similarity only | pooled | held-out pairs")
    for threshold in THRESHOLDS:
        rows = (
            pairs(threshold),
            pairs(threshold, guard=False),
            pooled(threshold),
            held_out(threshold),
        )
        mark = " (default)" if threshold == DEFAULT_THRESHOLD else ""
        cells = " | ".join(f"{f.precision:.3f} {f.recall:.3f}" for f in rows)
        print(f"{threshold:.2f}{mark} | {cells}")
    if args.details:
        lost, wrong = misses(DEFAULT_THRESHOLD)
        for a, b in lost:
            print(f"missed paraphrase: {a!r} / {b!r} ({cosine(vector(a), vector(b)):.3f})")
        for a, b in wrong:
            print(f"false hit: {a!r} / {b!r} ({cosine(vector(a), vector(b)):.3f})")


if __name__ == "__main__":
    main()
