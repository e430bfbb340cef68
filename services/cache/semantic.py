"""Matching a question to stored ones by meaning: vectors as bytes, their similarity, the best
match. Pure Python (no numpy on the gateway's machines); no I/O.

A vector is stored as float32 little-endian bytes, L2-normalised when encoded, so the cosine of
two is their dot product. Measured on this machine (Python 3.11): one 1536-dimension cosine
costs about 60 µs, so comparing a question with 100 stored ones about 6 ms, which is why the
candidates are only those of one `semantic_scope` (services/cache/keys.py).

A match must clear the similarity threshold and then `same_question` (services/cache/guard.py):
similar wording is not the same question when a number, a negation, a name, a unit or a
comparison differs. The threshold belongs to the embedding model (docs/cache.md).
"""

from __future__ import annotations

import array
import math
import operator
import sys
from collections.abc import Iterable, Sequence
from typing import TypeVar

from services.cache.guard import same_question

__all__ = ["best_match", "cosine", "decode_vector", "encode_vector", "same_question"]

K = TypeVar("K")
_LITTLE = sys.byteorder == "little"


def encode_vector(values: Sequence[float]) -> bytes:
    """float32 little-endian bytes of `values` scaled to length 1. ValueError for an empty
    vector, a zero one or one with NaN or infinity (nothing a lookup could match)."""
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not values or norm == 0.0 or not math.isfinite(norm):
        raise ValueError("an embedding must be non-empty, finite and not zero")
    packed = array.array("f", [x / norm for x in values])
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def decode_vector(data: bytes) -> array.array[float]:
    """The floats of an encoded vector. ValueError when `data` is no whole number of floats."""
    if len(data) % 4:
        raise ValueError("an encoded vector is a multiple of 4 bytes")
    values = array.array("f")
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values


def cosine(a: bytes, b: bytes) -> float:
    """The cosine similarity of two encoded vectors (their dot product: both are unit vectors).
    Vectors of different lengths (two embedding models) are unrelated: 0.0."""
    if len(a) != len(b) or len(a) % 4:
        return 0.0
    return _dot(_floats(a), _floats(b))


def best_match(
    query: bytes,
    query_text: str,
    candidates: Iterable[tuple[K, bytes, str]],
    threshold: float,
) -> K | None:
    """The id of the candidate most similar to `query` among those at least `threshold` similar
    whose text asks the same question as `query_text`; None when there is none. `candidates`
    are (id, encoded vector, text) of one semantic scope."""
    if len(query) % 4:
        return None
    vector = _floats(query)
    above: list[tuple[float, int, K, str]] = []
    for order, (key, data, text) in enumerate(candidates):
        if len(data) != len(query):
            continue
        similarity = _dot(vector, _floats(data))
        if similarity >= threshold:
            above.append((similarity, -order, key, text))
    # The most similar first; among equals, the one listed first. The guard runs on these only.
    above.sort(key=lambda item: (item[0], item[1]), reverse=True)
    for _, _, key, text in above:
        if same_question(query_text, text):
            return key
    return None


def _floats(data: bytes) -> Sequence[float]:
    # A memoryview reads the floats in place (about 15 % faster than an array copy).
    return memoryview(data).cast("f") if _LITTLE else decode_vector(data)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))
