"""The simulated embedding model: a deterministic vector per text whose cosine similarity follows
the text's surface form, so the semantic cache can be tested and measured without a real model.

The text is case-folded (after NFKC), split into words, contractions expanded (`can't` → `can
not`, `what's` → `what`), and each word lightly stemmed (`passwords` → `password`, `resetting` →
`reset`). Features, each hashed with a sign into `dimensions` slots (the hashing trick):

- the stemmed word, weight 1, or `FUNCTION_WEIGHT` for a function word (`how`, `do`, `the`...),
  so `how do I` against `how can I` moves the vector little and `password` against `router` a
  lot, as an IDF weighting would;
- its character trigrams (` pa`, `pas`... of ` password `), `TRIGRAM_WEIGHT` of the word's weight
  each: a typo or another inflection keeps most of the similarity;
- each pair of neighbouring stems, `BIGRAM_WEIGHT`: word order counts a little (`5 miles to km`
  is not `5 km to miles`).

The vector is L2-normalised. Same text, same vector; nothing is learnt: synonyms that share no
letters (`car`/`automobile`) are unrelated to it, which is what a real model would fix.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from functools import lru_cache

DEFAULT_DIMENSIONS = 256
MAX_DIMENSIONS = 4096
FUNCTION_WEIGHT = 0.3
TRIGRAM_WEIGHT = 0.35
BIGRAM_WEIGHT = 0.4

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_SUFFIXES = {"n't": "not", "'re": "are", "'m": "am", "'ll": "will", "'ve": "have", "'d": "would"}
_IRREGULAR_NOT = {"can't": "can", "won't": "will", "shan't": "shall", "cannot": "can"}
FUNCTION_WORDS = frozenset(
    """a an the is are was were be been being am do does did doing have has had can could will
    would shall should may might must i me my mine we us our you your it its this that these
    those there here what which who whom whose how why when where of in on at to for from by with
    about as into onto and or but if so than then please tell show give know want need way like
    just also any some get got s""".split()
)


def embed(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The text's unit vector of `dimensions` floats (a text without words, such as "?!", is
    one feature: itself; a real model never answers a zero vector either)."""
    return list(_embed(text, dimensions))


@lru_cache(maxsize=4096)
def _embed(text: str, dimensions: int) -> tuple[float, ...]:
    vector = [0.0] * dimensions
    stems = words(text)
    for stem in stems:
        weight = FUNCTION_WEIGHT if stem in FUNCTION_WORDS else 1.0
        _add(vector, "w:" + stem, weight)
        padded = f" {stem} "
        for at in range(len(padded) - 2):
            _add(vector, "c:" + padded[at : at + 3], weight * TRIGRAM_WEIGHT)
    for first, second in zip(stems, stems[1:], strict=False):
        _add(vector, f"b:{first} {second}", BIGRAM_WEIGHT)
    if not stems:  # no words ("?!", emoji, ""): the text itself, so never a zero vector
        _add(vector, "t:" + text, 1.0)
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(round(x / norm, 7) for x in vector)


def words(text: str) -> list[str]:
    """The text's stemmed words, contractions expanded, in order."""
    out: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).casefold().replace("’", "'")):
        if word in _IRREGULAR_NOT:
            out += (_IRREGULAR_NOT[word], "not")
            continue
        for suffix, expansion in _SUFFIXES.items():
            if word.endswith(suffix) and len(word) > len(suffix):
                out += (stem(word[: -len(suffix)]), expansion)
                break
        else:
            out.append(stem(word.removesuffix("'s").replace("'", "")))
    return out


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing and -ed (enough to pair inflections)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return _undouble(word[:-3])
    if len(word) > 4 and word.endswith("ed"):
        return _undouble(word[:-2])
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _undouble(word: str) -> str:
    if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
        return word[:-1]
    return word


def _add(vector: list[float], feature: str, weight: float) -> None:
    index, sign = _slot(feature, len(vector))
    vector[index] += sign * weight


@lru_cache(maxsize=65536)
def _slot(feature: str, dimensions: int) -> tuple[int, float]:
    value = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
    return (value >> 1) % dimensions, 1.0 if value & 1 else -1.0
