"""Whether two questions that read alike ask the same thing: the check after the similarity.

Embeddings place "What is the capital of France?" next to "...of Spain?", and "Convert 5 miles
to km" next to "Convert 50 miles to km": most of the words are shared, and the one that differs
is what the question is about. A semantic cache that trusts the similarity alone answers one
with the other's answer (LiteLLM #12234, Portkey #1237). `same_question` is False when the two
texts differ in any of what makes such questions different:

- numbers (digits, with `1,000` = `1000`, and number words from two on: `five` = `5`);
- negation: `not`, `n't`, `no`, `never`, `without`, `none`, `nothing`... (how many);
- names: a capitalised word not opening a sentence (and one opening it that is no common word),
  an acronym, a word mixing case (`iPhone`), a quoted or `backticked` string — each must appear
  in the other text (case aside; quoted strings must be equal); `GPT4` is the name `GPT` and the
  number 4;
- units and currencies (`km` = `kilometres`, `$` = `dollars`);
- comparison and direction: more/less, before/after, max/min, first/last, increase/decrease...
  (`bigger` = `larger` = `more`), and with `to`, `from`, `than`, `vs`, `into`, the order of the
  words both texts share, common words aside (`5 miles to km` is not `5 km to miles`, nor a
  string to an int an int to a string);
- one uncommon word swapped for another, the rest alike (`raw eggs` / `raw chicken`, `reset my
  password` / `reset my router`), unless the two are spellings of one word (`info` /
  `information`). This also refuses a one-word synonym (`cancel` / `terminate`): the price of
  not trusting the similarity where questions are most often confused.

English only, and cheap: word lists, not a parser (about 5 µs a word; texts over MAX_TEXT
characters are refused). It is meant to err towards False (a miss costs one upstream call; a
false hit serves a wrong answer). Paraphrases it refuses are counted in the recall that
docs/cache.md reports.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

# Longer texts are refused: a question that long is rarely asked twice in other words, and its
# exact repeats are the exact cache's.
MAX_TEXT = 10_000

_TOKEN = re.compile(
    r"\d+(?:[.,]\d+)*(?:st|nd|rd|th)?"  # numbers: 5, 1,000, 3.14, 21st
    r"|[^\W\d_]+(?:['’][^\W\d_]+)*"  # words, with contractions
    r"|[$€£¥%°]"  # symbols that are units
    r"|[.!?]"  # sentence ends
)
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|`([^`]+)`|(?<![\w])\'([^\']+)\'(?![\w])')

_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        """zero _ two three four five six seven eight nine ten eleven twelve thirteen fourteen
        fifteen sixteen seventeen eighteen nineteen twenty""".split()
    )
    if word != "_"
} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "dozen": "12",
    "half": "0.5",
    "twice": "x2",
    "double": "x2",
    "triple": "x3",
    "third": "3rd",
}
_NEGATIONS = frozenset(
    "not no never without none nothing nobody nowhere neither nor cannot n't".split()
)
_UNITS = {
    unit: canonical
    for canonical, spellings in {
        "km": "km kms kilometer kilometers kilometre kilometres",
        "m": "meter meters metre metres",
        "cm": "cm centimeter centimeters centimetre centimetres",
        "mm": "mm millimeter millimeters millimetre millimetres",
        "mi": "mi mile miles",
        "ft": "ft foot feet",
        "in": "inch inches",
        "yd": "yd yard yards",
        "kg": "kg kgs kilo kilos kilogram kilograms",
        "g": "gram grams",
        "lb": "lb lbs pound pounds",
        "oz": "oz ounce ounces",
        "l": "liter liters litre litres",
        "ml": "ml milliliter milliliters millilitre millilitres",
        "gal": "gal gallon gallons",
        "cup": "cup cups",
        "tsp": "tsp teaspoon teaspoons",
        "tbsp": "tbsp tablespoon tablespoons",
        "°c": "celsius centigrade",
        "°f": "fahrenheit",
        "k": "kelvin",
        "°": "° degree degrees",
        "mph": "mph",
        "kph": "kph kmh",
        "s": "sec secs second seconds",
        "min": "minute minutes mins",
        "h": "hr hrs hour hours",
        "day": "day days",
        "week": "week weeks",
        "month": "month months",
        "year": "year years yr yrs",
        "$": "$ usd dollar dollars",
        "€": "€ eur euro euros",
        "£": "£ gbp sterling",
        "¥": "¥ jpy yen",
        "%": "% percent percentage",
        "b": "byte bytes",
        "kb": "kb kilobyte kilobytes",
        "mb": "mb megabyte megabytes",
        "gb": "gb gigabyte gigabytes",
        "tb": "tb terabyte terabytes",
        "w": "watt watts",
        "kw": "kw kilowatt kilowatts",
        "kwh": "kwh",
        "v": "volt volts",
        "cal": "calorie calories kcal",
    }.items()
    for unit in spellings.split()
}
_POLARITY = {
    word: canonical
    for canonical, spellings in {
        "+": "more most greater greatest bigger biggest larger largest higher highest above over "
        "increase increases increasing maximum max exceed exceeds longer longest taller tallest "
        "heavier heaviest older oldest faster fastest",
        "-": "less least fewer fewest smaller smallest lower lowest below under decrease decreases "
        "decreasing minimum min shorter shortest lighter lightest younger youngest slower "
        "slowest",
        "+$": "expensive pricier priciest costlier",
        "-$": "cheap cheaper cheapest",
        "+q": "good better best",
        "-q": "bad worse worst",
        "<t": "before earlier earliest prior previous preceding",
        ">t": "after later latest next following since",
        "first": "first 1st",
        "last": "last final",
        # in/on/up, far more common as plain prepositions, count as their opposite's absence
        "out": "out outside",
        "off": "off",
        "down": "down downward downwards",
        "add": "add adding plus",
        "remove": "remove removing minus subtract delete",
        "start": "start begin enable open",
        "stop": "stop end disable close",
        "buy": "buy purchase",
        "sell": "sell",
        "import": "import",
        "export": "export",
        "true": "true",
        "false": "false",
    }.items()
    for word in spellings.split()
}
_DIRECTION = frozenset({"to", "from", "than", "vs", "versus", "into", "per"})
# Words that may open a sentence capitalised without naming anything.
_COMMON = frozenset(
    """a an the is are was were be am do does did have has had can could will would shall should
    may might must i me my we our you your it its this that these those there here what which who
    whom whose how why when where of in on at to for from by with about as and or but if so not
    no yes please tell show give explain describe list write convert calculate compute define
    summarize summarise translate compare find help name provide make create suggest recommend
    is are hi hello hey ok okay any some all every each one two other another should say let
    whats hows whos wheres whys im ive id its dont doesnt cant isnt arent wont thanks thank
    sorry""".split()
)


@dataclass(frozen=True, slots=True)
class _Facts:
    numbers: Counter[str]
    negations: int
    names: frozenset[str]  # case-folded
    quoted: frozenset[str]
    units: Counter[str]
    polarity: Counter[str]
    keys: tuple[str, ...]  # numbers, units and other uncommon words, in order of appearance
    directed: bool
    words: frozenset[str]  # every word, case-folded, apostrophes dropped
    content: frozenset[str]  # the uncommon words not counted above, stemmed


def same_question(a: str, b: str) -> bool:
    """False when `a` and `b` differ in a number, a negation, a name or quoted string, a unit, or
    a comparison or direction (see the module's docstring); True otherwise."""
    if a == b:
        return True
    if len(a) > MAX_TEXT or len(b) > MAX_TEXT:
        return False
    one, other = _facts(a), _facts(b)
    if (
        one.numbers != other.numbers
        or one.negations != other.negations
        or one.quoted != other.quoted
        or one.units != other.units
        or one.polarity != other.polarity
    ):
        return False
    if not (one.names <= other.words and other.names <= one.words):
        return False
    # One uncommon word swapped for another, the rest alike: what the question is about changed
    # ("raw eggs" / "raw chicken"). A word added or dropped ("permanently") is let through.
    only_one, only_other = one.content - other.content, other.content - one.content
    if len(only_one) == 1 == len(only_other) and not _variants(*only_one, *only_other):
        return False
    if one.directed or other.directed:
        # What both texts mention must come in the same order: "from A to B" is not "from B to A".
        shared = set(one.keys) & set(other.keys)
        if [k for k in one.keys if k in shared] != [k for k in other.keys if k in shared]:
            return False
    return True


@lru_cache(maxsize=1024)  # best_match compares one question with several candidates
def _facts(text: str) -> _Facts:
    text = unicodedata.normalize("NFKC", text).replace("’", "'")
    quoted = frozenset(next(g for g in m.groups() if g) for m in _QUOTED.finditer(text))
    numbers: Counter[str] = Counter()
    units: Counter[str] = Counter()
    polarity: Counter[str] = Counter()
    names: set[str] = set()
    keys: dict[str, None] = {}  # ordered, each once
    words: set[str] = set()
    content: set[str] = set()
    negations = 0
    directed = False
    opening = True  # the next word opens a sentence
    for token in _TOKEN.findall(text):
        if token in ".!?":
            opening = True
            continue
        folded = token.casefold()
        plain = folded.replace("'", "")
        words.add(plain)
        words.add(folded.removesuffix("'s"))
        number = _number(folded)
        key: str | None
        if number is not None:
            numbers[number] += 1
            key = number
        elif folded in _UNITS and (folded not in _POLARITY or token in "$€£¥%°"):
            units[_UNITS[folded]] += 1
            key = _UNITS[folded]
        else:
            key = None if plain in _COMMON else folded.removesuffix("'s")
        if key is not None:
            keys.setdefault(key)
        negation = folded in _NEGATIONS or folded.endswith("n't")
        if negation:
            negations += 1
        if folded in _POLARITY:
            polarity[_POLARITY[folded]] += 1
        elif key is not None and key == folded.removesuffix("'s") and not negation:
            content.add(_stem(key))
        if folded in _DIRECTION:
            directed = True
        if _is_name(token, folded, opening):
            names.add(folded.removesuffix("'s"))
        opening = False
    return _Facts(
        numbers,
        negations,
        frozenset(names),
        quoted,
        units,
        polarity,
        tuple(keys),
        directed,
        frozenset(words),
        frozenset(content),
    )


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _variants(a: str, b: str) -> bool:
    """Two spellings of one word: one's first four letters or more are at least three quarters
    of the shorter (`info`/`information`, `summarize`/`summarise`, `meditation`/`meditating`;
    not `weekday`/`weekend`, `reset`/`restart`)."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared >= 4 and shared >= 0.75 * min(len(a), len(b))


_DIGITS = re.compile(r"(\d+(?:[.,]\d+)*)(st|nd|rd|th)?")


def _number(folded: str) -> str | None:
    if folded in _NUMBER_WORDS:
        return _NUMBER_WORDS[folded]
    match = _DIGITS.fullmatch(folded)
    if match is None:
        return None
    digits, ordinal = match.group(1), match.group(2)
    digits = re.sub(r",(?=\d{3}(?:\D|$))", "", digits)  # thousands separators
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    digits = digits.lstrip("0") or "0"
    return f"{digits}{ordinal}" if ordinal else digits


def _is_name(token: str, folded: str, opening: bool) -> bool:
    if not token[0].isalpha() or token == "I" or token.startswith("I'"):
        return False
    if len(token) > 1 and token.isupper():
        return True  # NASA, USB, CEO
    if any(c.isupper() for c in token[1:]):
        return True  # iPhone, JavaScript, McDonald's
    if not token[0].isupper():
        return False
    return not opening or folded.replace("'", "") not in _COMMON and folded not in _UNITS
