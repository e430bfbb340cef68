"""Semantic matching (services/cache/semantic.py, guard.py): vectors as bytes, cosine, the best
match above a threshold, and the guard that keeps similar but different questions apart. The
vectors come from the simulated upstream's embedding model (bench/upstream/embedding.py)."""

from __future__ import annotations

import math

import pytest

from bench.upstream.embedding import embed
from services.cache.guard import MAX_TEXT
from services.cache.semantic import (
    best_match,
    cosine,
    decode_vector,
    encode_vector,
    same_question,
)


def vec(text: str) -> bytes:
    return encode_vector(embed(text))


def test_vectors_are_float32_little_endian_and_normalised() -> None:
    data = encode_vector([3.0, 4.0])
    assert data == bytes.fromhex("9a99193fcdcc4c3f")  # 0.6, 0.8 as float32 LE
    assert list(decode_vector(data)) == pytest.approx([0.6, 0.8])
    assert cosine(data, data) == pytest.approx(1.0)
    assert cosine(data, encode_vector([-3.0, -4.0])) == pytest.approx(-1.0)
    assert cosine(data, encode_vector([4.0, -3.0])) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("values", [[], [0.0, 0.0], [math.nan, 1.0], [math.inf, 1.0]])
def test_vectors_that_cannot_be_normalised_are_refused(values: list[float]) -> None:
    with pytest.raises(ValueError):
        encode_vector(values)


def test_malformed_or_mismatched_vectors_never_match() -> None:
    with pytest.raises(ValueError):
        decode_vector(b"123")
    assert cosine(encode_vector([1.0, 0.0]), encode_vector([1.0, 0.0, 0.0])) == 0.0
    assert cosine(b"123", b"123") == 0.0
    candidates = [("short", encode_vector([1.0]), "q")]
    assert best_match(encode_vector([1.0, 0.0]), "q", candidates, 0.0) is None
    assert best_match(b"abc", "q", [("k", b"abc", "q")], 0.0) is None


def test_the_most_similar_above_the_threshold_wins() -> None:
    query = "How do I reset my password?"
    candidates = [
        ("router", vec("How do I reset my router?"), "How do I reset my router?"),
        ("near", vec("how can I reset my password"), "how can I reset my password"),
        ("same", vec("how do i reset my password"), "how do i reset my password"),
    ]
    assert best_match(vec(query), query, candidates, 0.8) == "same"
    assert best_match(vec(query), query, candidates[:2], 0.8) == "near"
    assert best_match(vec(query), query, candidates[:1], 0.8) is None
    assert best_match(vec(query), query, [], 0.0) is None


def test_the_guard_skips_a_more_similar_different_question() -> None:
    query = "Convert 5 miles to km"
    different = "Convert 50 miles to km"
    paraphrase = "convert 5 miles to km please"
    # An embedding model that finds the different question the closest (its vector is the
    # query's own): the guard refuses it, the paraphrase is next.
    candidates = [(1, vec(query), different), (2, vec(paraphrase), paraphrase)]
    assert best_match(vec(query), query, candidates, 0.7) == 2
    assert best_match(vec(query), query, candidates[:1], 0.0) is None


def test_ties_go_to_the_first_listed() -> None:
    v = vec("What is photosynthesis?")
    candidates = [("a", v, "what is photosynthesis"), ("b", v, "what is photosynthesis")]
    assert best_match(v, "What is photosynthesis?", candidates, 0.9) == "a"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is the capital of France?", "What is the capital of Spain?"),
        (
            "Is it safe to take ibuprofen with alcohol?",
            "Is it safe to take ibuprofen without alcohol?",
        ),
        ("Convert 5 miles to km", "Convert 50 miles to km"),
        ("Convert 5 miles to km", "Convert 5 km to miles"),
        ("Convert 5 miles to km", "Convert 5 miles to meters"),
        ("Convert five miles to km", "Convert 6 miles to km"),
        ("What's 1,000 divided by 8?", "What's 1,001 divided by 8?"),
        ("Can I pay by card?", "Can't I pay by card?"),
        ("Do I need a visa for Japan?", "Do I not need a visa for Japan?"),
        ("Is Paris bigger than London?", "Is London bigger than Paris?"),
        ("Is a bigger engine better?", "Is a smaller engine better?"),
        ("What happened before the war?", "What happened after the war?"),
        ('What does "foo" mean?', 'What does "bar" mean?'),
        ("How do I use `git rebase`?", "How do I use `git merge`?"),
        ("Is the iPhone waterproof?", "Is the phone waterproof?"),
        ("Does the NASA budget grow?", "Does the budget grow?"),
        ("How do I turn on dark mode?", "How do I turn off dark mode?"),
        ("How much is 10 $ in euros?", "How much is 10 £ in euros?"),
        ("is it safe to eat raw eggs", "is it safe to eat raw chicken"),
        ("how do i sort a list in python", "how do i sort a list in java"),
        ("What are the opening hours on weekdays?", "What are the opening hours on weekends?"),
        ("How do I reset my router?", "How do I restart my router?"),
    ],
)
def test_different_questions_worded_alike(a: str, b: str) -> None:
    assert not same_question(a, b)
    assert not same_question(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I reset my password?", "how can I reset my password"),
        ("What is the capital of France?", "what's the capital of france"),
        ("What is France's capital?", "What is the capital of France?"),
        ("Convert 5 miles to km", "convert five miles to kilometres"),
        ("Convert 1,000 miles to km", "Convert 1000 miles to km"),
        ("I don't understand recursion", "I do not understand recursion"),
        ("Who won the World Cup in 2018?", "Who won the 2018 World Cup?"),
        ("Explain recursion. Keep it short!", "Explain recursion. Keep it short"),
        ("Is a bigger engine better?", "Is a larger engine better?"),
        ("How do I update my billing information?", "how can I update my billing info"),
        ("How do I delete my account?", "How can I delete my account permanently?"),
        ("How do I reset my password? Thanks!", "How do I reset my password?"),
        ("same text", "same text"),
        ("", ""),
    ],
)
def test_paraphrases_pass_the_guard(a: str, b: str) -> None:
    assert same_question(a, b)
    assert same_question(b, a)


def test_texts_too_long_to_read_cheaply_are_refused() -> None:
    long = "Summarize this: " + "word " * 3000
    assert len(long) > MAX_TEXT
    assert same_question(long, long)  # identical: no reading needed
    assert not same_question(long, long + " please")
