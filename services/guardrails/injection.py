"""A cheap prompt-injection heuristic that needs no model: known jailbreak phrasings, chat
template control tokens inside user text, and requests to reveal the system prompt.

It is a first line, not a classifier: it catches the copied-and-pasted attacks (the "ignore all
previous instructions" family, DAN and developer-mode prompts, fake `<|im_start|>system` turns)
at the cost of two regular-expression scans (about 30 ms per MB of ASCII text, 60 µs for a
2 KB message), and misses paraphrases, other languages and encoded
payloads (base64, leetspeak, letters spaced apart), which need a guard model.

Text is normalised before the scan so that trivial obfuscation does not pass: NFKC (fullwidth
and compatibility letters become ASCII, `ｉｇｎｏｒｅ` → `ignore`), lower case, invisible
characters removed (zero-width spaces and joiners, soft hyphens, bidi controls, variation
selectors), Unicode tag characters (U+E0020–E007E, "ASCII smuggling") read as the ASCII they
shadow, and typographic apostrophes as `'`. No homoglyph (confusables) mapping: a Cyrillic `о`
stays Cyrillic. Offsets in `InjectionMatch` point into the caller's original text.

Words may be separated by any run of whitespace, `*`, `_`, `~` or `-` (markdown emphasis,
`ignore_all_previous_instructions`). The phrases are in injection_rules.py, shaped so that the
scan stays linear in the input (possessive separators, bounded repetition): no catastrophic
backtracking; tests/services/test_injection.py runs hostile 1 MB inputs.

Choices on look-alikes (the tests pin them):
- Chat template control tokens (`<|im_start|>`, `[INST]`, `<<SYS>>`, `<start_of_turn>`) are
  flagged wherever they occur, code samples explaining a template included: a serving engine
  may tokenize them as real control tokens whatever surrounds them, so a quoted `[INST]` is
  as dangerous as a bare one. `</s>` alone is HTML's strikethrough and is flagged only when a
  new turn follows it (`</s><s>`, `</s>[INST]`, `</s> system:`).
- A `system:` line is flagged only when it goes on to address the model ("system: you are…",
  "SYSTEM: ignore…"); "System: Ubuntu 22.04" in a bug report is not.
- "Ignore my previous message" (a user correcting themselves) and "ignore the typo above" are
  not overrides; "ignore the above and say…" and "ignore all previous instructions" are.
- Developer mode is a jailbreak only when the model is put in it ("ChatGPT with developer mode
  enabled", "you are now in developer mode"), not Android's or Chrome's.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from services.guardrails.injection_rules import SYMBOL_RULES, WORD_RULES, E, S

__all__ = ["CATEGORIES", "InjectionMatch", "detect_injection"]


@dataclass(frozen=True, slots=True)
class InjectionMatch:
    """What matched: its category (one of CATEGORIES) and where, as `text[start:end]` of the
    text given to `detect_injection`."""

    category: str
    start: int
    end: int


CATEGORIES = ("instruction_override", "jailbreak", "prompt_leak", "role_spoofing")


def _compile() -> tuple[re.Pattern[str], re.Pattern[str], tuple[str, ...]]:
    """The scans for word rules and for symbol rules, and the category of each of their
    groups: each rule ends in an empty group, and the one that took part in the match
    (`lastindex`) names the category (word rules' groups first, then symbol rules').

    Both are shaped for Python's regex engine, which skips in C every position that cannot
    begin a match when the pattern starts with a character set or with alternatives that
    each start with a literal character. Word rules start with a non-letter (the character
    before the word, so the scanned text starts with "\n") and hang off a trie of their first
    words: at a word start the scan walks the trie, one character comparison per level,
    instead of trying each rule. Symbol rules each start with a literal character. Together
    they scan about 50 times faster than one alternation of every rule behind a word-start
    lookbehind (1.5 s per MB of prose)."""
    trie: dict[str, Any] = {}
    for category, firsts, rest in WORD_RULES:
        for first in firsts.split():
            word, _, more = first.partition("_")
            node = trie
            for char in word:
                node = node.setdefault(char, {})
            tail = (S + more.replace("_", S) if more else "") + rest + E
            node.setdefault("", []).append((tail, category))
    categories = [""]  # group 0 is the whole match

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + emit(child) for char, child in node.items() if char]
        for tail, category in node.get("", []):
            branches.append(tail + "()")
            categories.append(category)
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    words = re.compile(r"[^a-z0-9]" + emit(trie), re.ASCII)
    symbols = re.compile("|".join(rule + "()" for _, rule in SYMBOL_RULES), re.ASCII)
    categories += [category for category, _ in SYMBOL_RULES]
    if words.groups + symbols.groups != len(categories) - 1:  # a rule's own capturing group
        raise AssertionError("injection rules must use (?:...) groups only")
    return words, symbols, tuple(categories)


_WORDS, _SYMBOLS, _GROUP_CATEGORY = _compile()


def _one_to_one(text: str, table: dict[str, str]) -> str:
    """`text` folded, where no character folds to none or several (those in `table` that do
    are absent from it)."""
    single = [(char, folded) for char, folded in table.items() if len(folded) == 1]
    if len(single) > 8:
        return text.translate({ord(char): folded for char, folded in single}).lower()
    for char, folded in single:
        text = text.replace(char, folded)
    return text.lower()


def _scan(folded: str) -> tuple[str, int, int] | None:
    """The leftmost match in already folded text: category, start, end (offsets in `folded`:
    the scanned text has one more character in front)."""
    text = "\n" + folded
    found = None
    match = _WORDS.search(text)
    if match is not None:  # its first character is the one before the word
        found = (_GROUP_CATEGORY[match.lastindex or 0], match.start(), match.end() - 1)
    match = _SYMBOLS.search(text)
    if match is not None:
        start = match.start() + (text[match.start()] == "\n") - 1  # a line's own "\n"
        if found is None or start < found[1]:
            group = (match.lastindex or 0) + _WORDS.groups
            found = (_GROUP_CATEGORY[group], start, match.end() - 1)
    return found


# Removed before the scan: format and invisible characters an attacker sprinkles inside words.
_INVISIBLE = frozenset(
    [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0]
    + list(range(0x200B, 0x2010))  # zero-width space, joiners, direction marks
    + list(range(0x202A, 0x202F))  # bidi embeddings and overrides
    + list(range(0x2060, 0x2070))  # word joiner, invisible operators, bidi isolates
    + list(range(0xFE00, 0xFE10))  # variation selectors
    + list(range(0xE0000, 0xE0020))
    + [0xE007F]
    + list(range(0xE0100, 0xE01F0))
)
_APOSTROPHES = frozenset([0x2018, 0x2019, 0x201B, 0x02BC, 0x2032])


@lru_cache(maxsize=4096)
def _fold(char: str) -> str:
    """One character as the scan sees it (possibly several characters, or none)."""
    code = ord(char)
    if 0xE0020 <= code <= 0xE007E:  # a tag character: the ASCII character it shadows
        return chr(code - 0xE0000).lower()
    if code in _INVISIBLE:
        return ""
    if code in _APOSTROPHES:
        return "'"
    return unicodedata.normalize("NFKC", char).lower()


class _Folded:
    """The normalised text, and the way back to the original's offsets.

    Characters are folded one at a time, so that offsets can be mapped back, but the work per
    character is C's: `str.lower()`, and `str.replace` (or `str.translate` for many) for the
    few distinct characters whose fold is not their lower case (fullwidth letters, invisible
    characters, typographic apostrophes). Characters that fold to none or several (`odd`)
    split the text into stretches. `_starts`/`_pieces` list the stretches of the folded text:
    where each starts there, where it starts in the original and its length there, and whether
    it maps character for character, or is one original character that became several."""

    __slots__ = ("text", "_starts", "_pieces")

    def __init__(self, original: str) -> None:
        table: dict[str, str] = {}  # characters whose fold is not their lower case
        odd: list[str] = []  # characters that fold to none or several
        for char in set(original):
            folded = _fold(char)
            if len(folded) != 1:
                odd.append(char)
                table[char] = folded
            elif folded != char.lower():
                table[char] = folded
        self._starts: list[int] = []
        self._pieces: list[tuple[int, int, bool]] = []  # (original start, length, 1:1)
        if not odd:
            self.text = _one_to_one(original, table)
            self._add(0, 0, len(original), True)
            return
        out: list[str] = []
        at = done = 0
        runs = re.compile("[" + "".join(map(re.escape, odd)) + "]+")
        for run in runs.finditer(original):
            if run.start() > done:  # the stretch before it maps char for char
                out.append(_one_to_one(original[done : run.start()], table))
                self._add(at, done, run.start() - done, True)
                at += run.start() - done
            for offset, char in enumerate(run.group()):
                folded = table[char]
                if folded:
                    out.append(folded)
                    self._add(at, run.start() + offset, 1, False)
                    at += len(folded)
            done = run.end()
        if done < len(original):
            out.append(_one_to_one(original[done:], table))
            self._add(at, done, len(original) - done, True)
        self.text = "".join(out)

    def _add(self, at: int, begin: int, length: int, one_to_one: bool) -> None:
        self._starts.append(at)
        self._pieces.append((begin, length, one_to_one))

    def start(self, position: int) -> int:
        i = bisect.bisect_right(self._starts, position) - 1
        begin, _, one_to_one = self._pieces[i]
        return begin + (position - self._starts[i]) if one_to_one else begin

    def end(self, position: int) -> int:
        i = bisect.bisect_right(self._starts, position - 1) - 1
        begin, length, one_to_one = self._pieces[i]
        return begin + (position - self._starts[i]) if one_to_one else begin + length


def detect_injection(text: str) -> InjectionMatch | None:
    """The first (leftmost) known injection in `text`, or None. Linear in the text's length:
    ASCII text costs one lower() and two scans."""
    if text.isascii():
        found = _scan(text.lower())
        return None if found is None else InjectionMatch(*found)
    folded = _Folded(text)
    found = _scan(folded.text)
    if found is None:
        return None
    category, start, end = found
    return InjectionMatch(category, folded.start(start), folded.end(end))
