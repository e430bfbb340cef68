"""Finding personal data and secrets in text: `find_pii` and `redact`.

The guardrails call this on every request of a model with a PII guardrail and on every chunk
of its streamed answer, so clean text must cost little. CPython's regex engine tests every
byte at some 10–25 ns unless a pattern starts with a literal, so no pattern is run over the
whole text; the work is in three steps (measured in docs/guardrails.md):

1. Gates. The text is encoded to UTF-8 once (every value of these kinds is ASCII, so bytes
   regexes with ASCII classes find them; encoding ASCII text is a copy). Each kind is looked
   for only where something it needs is, found by one-byte searches (memchr) and one
   literal-led regex: "@" for emails, the byte of each secret's fixed prefix ("-" of "sk-"
   and "-----BEGIN", "_" of "ghp_", "A" of "AKIA", "J" of "eyJ"), "::" for compressed IPv6,
   and for the numeric kinds a cluster of at least four digits no more than three bytes
   apart, found in a copy of the text where each digit is "0" (`_CLUSTER`).
2. Candidates. A numeric rule (services/guardrails/pii_rules.py) is tried with an anchored
   `match` only at the starts of tokens in or just before a cluster, and only if it can
   start with that byte and needs no more digits than the cluster has; emails and secrets
   (pii_secrets.py) are matched where their gate's byte is.
3. Validation. Checksums (Luhn, mod 97, the national ids' check digits, via python-stdnum),
   numbering plans (Google's phonenumbers) and the `ipaddress` parser decide; an IBAN
   candidate that runs on into the next group is tried cut at each space.

Overlaps are settled by kind (a secret, then a card, an IBAN, a national id, an email, an IP
address, a phone number), then length. Offsets are in characters of the text given.

A secret can be longer than MAX_MATCH_CHARS (a JWT, a PEM block): it is found by its start
(which is never longer than that) and reported as consecutive matches of at most
MAX_MATCH_CHARS each, which `redact` joins into one tag. A stream guard that keeps
MAX_MATCH_CHARS of look-behind finds every value whose start it sees, but only a match that
ends at the end of its buffer tells it that a long secret may go on in the next chunk.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.guardrails import pii_rules as rules
from services.guardrails import pii_secrets

ENTITIES: tuple[str, ...] = (
    "email",
    "phone",
    "credit_card",
    "iban",
    "national_id",
    "ip_address",
    "secret",
)
TAGS: dict[str, str] = {entity: f"[{entity.upper()}]" for entity in ENTITIES}
_KNOWN = frozenset(ENTITIES)

# The longest text one match spans: a longer value (a PEM block, a JWT, an email with an
# implausibly long domain) is several touching matches. The longest common single values fit:
# a GitHub fine-grained token (93), an Anthropic key (108), an OpenAI project key (164).
MAX_MATCH_CHARS: int = 200

# Precedence when candidates of two kinds overlap: the more specific (checksummed or
# prefixed) kind wins; phone numbers, the loosest, lose to everything.
_RANK = {e: i for i, e in enumerate(("secret", "credit_card", "iban", "national_id", "email"))}
_RANK.update(ip_address=5, phone=6)

# How far before the first digit of its cluster a value can start: an IBAN's country and a
# group of letters ("GB82 WEST 1234…"), a codice fiscale's six letters, an IPv6 address's
# hex groups ("abcd:ef01:…").
_BEFORE = 12
_AFTER = 64  # how far past its cluster's last digit a value can reach (an IBAN's letters)
# A place (merged clusters) longer than this is searched with each rule's regex, in C, rather
# than token by token in Python: a megabyte of "1 1 1 …" is a million tokens.
_MAX_PLACE = 4096
_NUMERIC_KINDS = frozenset(("phone", "credit_card", "iban", "national_id", "ip_address"))
_STARTS = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef+(:")
# Where a numeric value can start: after no letter or digit, a digit, "+", "(" or ":", or a
# capital followed by a capital, digit or "-" (an IBAN, a NINO, a codice fiscale, an NIE),
# or a lowercase hex group and a colon (an IPv6 address). Prose words start none of these,
# so the per-token work in Python is for numbers only.
_TOKEN_START = re.compile(rb"(?<![A-Za-z0-9_])(?:[0-9+(:]|[A-Z][A-Z0-9-]|[a-f][0-9A-Fa-f]{0,3}:)")
_DIGITS = tuple(bytes([c]) for c in b"0123456789")
_AT = re.compile(rb"@")
_DOUBLE_COLON = re.compile(rb"::")
# Digits to "0", everything else to a space: `_CLUSTER` then starts at a literal "0", which
# the regex engine finds with a fast scan rather than testing a class at every byte.
_SHAPE = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_CLUSTER = re.compile(rb"0(?: {0,3}0){3,}")
# Above this many hits of a gate, one pass over the whole text costs less than a step per hit.
_MAX_ANCHORS = 256


@dataclass(frozen=True, slots=True)
class PiiMatch:
    entity: str  # one of ENTITIES
    start: int  # offsets (characters) into the text given
    end: int


def find_pii(text: str, entities: frozenset[str] = frozenset(ENTITIES)) -> list[PiiMatch]:
    """The values of the given kinds in `text`, sorted by start, none overlapping."""
    if not entities <= _KNOWN:
        raise ValueError(f"unknown PII kinds: {sorted(entities - _KNOWN)}")
    if not text:
        return []
    data = text.encode("utf-8", "surrogatepass")
    found: list[tuple[int, int, str]] = []
    if "email" in entities and b"@" in data:
        _scan(data, rules.EMAIL, _anchor_windows(data, _AT, 70, 260), found)
    if "secret" in entities:
        _secrets(data, found)
    if entities & _NUMERIC_KINDS:
        _numeric(data, _numeric_rules(entities), "ip_address" in entities, found)
    if not found:
        return []
    return _to_chars(text, data, _split_long(_resolve(found)))


def redact(text: str, matches: Sequence[PiiMatch]) -> str:
    """`text` with each match replaced by its kind's tag (TAGS); consecutive matches of one
    kind that touch (the pieces of a long secret) become one tag."""
    out: list[str] = []
    pos = 0
    last: PiiMatch | None = None
    for m in sorted(matches, key=lambda m: (m.start, m.end)):
        if m.start < pos:  # overlaps what is already replaced
            continue
        touching = last is not None and last.entity == m.entity and last.end == m.start
        if not touching:
            out.append(text[pos : m.start])
            out.append(TAGS[m.entity])
        pos = m.end
        last = m
    out.append(text[pos:])
    return "".join(out)


@functools.cache
def _numeric_rules(entities: frozenset[str]) -> dict[int, tuple[rules.Rule, ...]]:
    """The numeric rules of these kinds by the byte a value can start with."""
    chosen = [r for r in rules.NUMERIC if r.entity in entities]
    return {c: tuple(r for r in chosen if c in r.first) for c in range(256) if c in _STARTS}


def _numeric(
    data: bytes,
    by_first: dict[int, tuple[rules.Rule, ...]],
    ipv6: bool,
    found: list[tuple[int, int, str]],
) -> None:
    """The numeric rules, tried only where a value could start: at the start of a token (a
    byte after no letter or digit) from a little before to the end of each cluster of
    digits, and only the rules that can start with that byte and need no more digits than
    the cluster has. A `match` anchored there costs about what a search costs per byte, so
    clean text with numbers (dates, prices, versions) costs a few calls per number rather
    than a regex pass per rule."""
    if not any(digit in data for digit in _DIGITS):
        return
    places = [
        (m.start() - _BEFORE, m.end(), m.group().count(48))
        for m in _CLUSTER.finditer(data.translate(_SHAPE))
    ]
    if ipv6 and b":" in data:
        for lo, hi in _anchor_windows(data, _DOUBLE_COLON, _BEFORE, 2):  # "::1", "fe80::1"
            places.append((lo, hi, 1))
        places.sort()
    for lo, hi, digits in _merge_places(places):
        if hi - lo > _MAX_PLACE:  # a table of numbers, or adversarial: one pass per rule
            wide = {r for rs in by_first.values() for r in rs if r.min_digits <= digits}
            for rule in sorted(wide, key=rules.NUMERIC.index):
                _scan(data, rule, [(lo, hi + _AFTER)], found)
            continue
        for token in _TOKEN_START.finditer(data, lo, hi):
            at = token.start()
            for rule in by_first[data[at]]:
                if rule.min_digits > digits or (
                    rule.needs and rule.needs not in data[at : at + rule.needs_within]
                ):
                    continue
                m = rule.pattern.match(data, at)
                if m is not None and (length := rule.validate(m.group())):
                    found.append((at, at + length, rule.entity))


def _merge_places(places: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Overlapping places as one, with the most digits of any (each token is tried once)."""
    merged: list[tuple[int, int, int]] = []
    for lo, hi, digits in places:  # in increasing order of lo
        lo = max(lo, 0)
        if merged and lo <= merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], hi), max(last[2], digits))
        else:
            merged.append((lo, hi, digits))
    return merged


def _secrets(data: bytes, found: list[tuple[int, int, str]]) -> None:
    """Each secret rule tried where one of its literals is (found by its anchor regex), or
    over the whole text when the anchors are everywhere (an adversarial text)."""
    for anchor, literals in pii_secrets.SECRET_ANCHORS:
        hits = []
        for hit in anchor.finditer(data):
            hits.append(hit.start())
            if len(hits) > _MAX_ANCHORS:
                for rule in dict.fromkeys(rule for _, _, rule in literals):
                    _scan(data, rule, [(0, len(data))], found)
                break
        else:
            for at in hits:
                for literal, offset, rule in literals:
                    start = at - offset
                    if start >= 0 and data.startswith(literal, start):
                        m = rule.pattern.match(data, start)
                        if m is not None and (length := rule.validate(m.group())):
                            found.append((start, start + length, rule.entity))


def _anchor_windows(
    data: bytes, anchor: re.Pattern[bytes], before: int, after: int
) -> list[tuple[int, int]]:
    """Windows around each hit of `anchor` (a literal-led regex), or the whole text when
    there are many (a window per hit would cost more than one pass)."""
    spans: list[tuple[int, int]] = []
    for hit in anchor.finditer(data):
        if len(spans) == _MAX_ANCHORS:
            return [(0, len(data))]
        spans.append((hit.start() - before, hit.end() + after))
    return _merge(spans)


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:  # given in increasing order of lo
        lo = max(lo, 0)
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _scan(
    data: bytes,
    rule: rules.Rule,
    windows: Sequence[tuple[int, int]],
    found: list[tuple[int, int, str]],
) -> None:
    """Run one rule over each window, keeping what its validator accepts. The regex sees the
    bytes before a window (its look-behinds) but not after it: a window's end is far enough
    past its hit that no value is cut there."""
    size = len(data)
    for lo, hi in windows:
        for m in rule.pattern.finditer(data, lo, min(hi, size)):
            length = rule.validate(m.group())
            if length:
                found.append((m.start(), m.start() + length, rule.entity))


def _resolve(found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Non-overlapping matches: by precedence of kind, then the longer, then the earlier."""
    found.sort(key=lambda f: (_RANK[f[2]], f[0] - f[1], f[0]))
    taken: list[tuple[int, int, str]] = []
    for cand in found:
        if all(cand[1] <= t[0] or cand[0] >= t[1] for t in taken):
            taken.append(cand)
    taken.sort()
    return taken


def _split_long(matches: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Matches cut to at most MAX_MATCH_CHARS bytes (in ASCII, bytes are characters)."""
    out = []
    for start, end, entity in matches:
        while end - start > MAX_MATCH_CHARS:
            out.append((start, start + MAX_MATCH_CHARS, entity))
            start += MAX_MATCH_CHARS
        out.append((start, end, entity))
    return out


def _to_chars(text: str, data: bytes, matches: list[tuple[int, int, str]]) -> list[PiiMatch]:
    """Byte offsets to character offsets: the same for ASCII text; otherwise counted by
    decoding the bytes between consecutive offsets (once over the text in all)."""
    if text.isascii():
        return [PiiMatch(entity, start, end) for start, end, entity in matches]
    out = []
    byte_pos = char_pos = 0

    def chars(at: int) -> int:
        nonlocal byte_pos, char_pos
        char_pos += len(data[byte_pos:at].decode("utf-8", "surrogatepass"))
        byte_pos = at
        return char_pos

    for start, end, entity in matches:
        out.append(PiiMatch(entity, chars(start), chars(end)))
    return out
