"""The acceptance figures of semantic matching (bench/semantic_eval.py): at the default
threshold, with the simulated upstream's embedding model, at least 95 % of the hits are right,
pair by pair and in one pooled scope; the recall is reported (pytest -s shows it)."""

from __future__ import annotations

from bench.semantic_eval import DEFAULT_THRESHOLD, held_out, pairs, pooled, vector
from bench.semantic_pairs import DIFFERENT, PARAPHRASES
from services.cache.semantic import best_match


def test_the_evaluation_set_is_large_enough() -> None:
    assert len(PARAPHRASES) >= 50 and len(DIFFERENT) >= 50
    assert len(set(PARAPHRASES)) == len(PARAPHRASES) and len(set(DIFFERENT)) == len(DIFFERENT)


def test_precision_at_the_default_threshold() -> None:
    figures = pairs(DEFAULT_THRESHOLD)
    print(f"pairs: precision {figures.precision:.3f}, recall {figures.recall:.3f}")
    assert figures.precision >= 0.95
    assert (
        figures.recall >= 0.8
    )  # not the acceptance bar: a guard against a matcher that never hits
    everything = pooled(DEFAULT_THRESHOLD)
    print(f"pooled: precision {everything.precision:.3f}, recall {everything.recall:.3f}")
    assert everything.precision >= 0.95


def found(a: str, b: str) -> bool:
    return best_match(vector(a), a, [(0, vector(b), b)], DEFAULT_THRESHOLD) is not None


def test_the_pairs_the_issue_names() -> None:
    assert found("How do I reset my password?", "how can I reset my password")
    assert not found("What is the capital of France?", "What is the capital of Spain?")
    assert not found(
        "Is it safe to take ibuprofen with alcohol?",
        "Is it safe to take ibuprofen without alcohol?",
    )
    assert not found("Convert 5 miles to km", "Convert 50 miles to km")


def test_held_out_pairs_are_reported() -> None:
    figures = held_out(DEFAULT_THRESHOLD)
    print(f"held out: precision {figures.precision:.3f}, recall {figures.recall:.3f}")
    assert figures.true_hits > 0


def test_the_guard_is_what_keeps_precision() -> None:
    # Similarity alone, at the same threshold, serves wrong answers: the guard earns its keep.
    assert pairs(DEFAULT_THRESHOLD, guard=False).precision < 0.9
