"""The candidate patterns and validators of the PII recognizer (services/guardrails/pii.py).

Each rule is a bytes regex for the shape of a value (run on the UTF-8 bytes of the text, so
that every class is ASCII: no value of these kinds has other characters) and a validator that
takes the matched bytes and says how much of them is the value (0 for none). The regexes only
propose; the checksums and numbering plans decide, so a shape can be loose where its
validator is strict (cards, IBANs, phone numbers) and must be tight where there is no
checksum (US SSN, UK NINO).

No regex here backtracks more than a bounded amount per start position: every repetition is
bounded, and a repeated group begins with a class its neighbour cannot match (a digit after
an optional separator), so there is one way to split a run. Each starts with a look-behind
that fails inside a longer token, so a long run of digits or letters is tried once, not at
every position (linear time on adversarial input, checked by the tests on 1 MB).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

import phonenumbers
from phonenumbers import NumberParseException
from stdnum import iban as stdnum_iban
from stdnum import luhn
from stdnum.br import cpf
from stdnum.ca import sin
from stdnum.es import dni, nie
from stdnum.in_ import aadhaar
from stdnum.it import codicefiscale
from stdnum.us import ssn

# A validator gets the candidate's bytes and returns the length of the value at its start
# (a candidate may run on into the next word or number), or 0 for none.
Validator = Callable[[bytes], int]


@dataclass(frozen=True, slots=True)
class Rule:
    entity: str
    pattern: re.Pattern[bytes]
    validate: Validator
    # For the numeric rules: the bytes a value can start with, and the fewest digits it has
    # (pii.py tries a rule only at such a byte, near a cluster of that many digits).
    first: bytes = b""
    min_digits: int = 0
    # and a byte that must be among its first `needs_within` ("." for an IPv4 address):
    # a test cheaper than a failing match, for the rules tried at most tokens.
    needs: bytes = b""
    needs_within: int = 0


def _digits(b: bytes) -> str:
    return "".join(chr(c) for c in b if 48 <= c <= 57)


# ---- credit cards: 13–19 digits, one kind of separator, a card network's prefix, Luhn ----


def _card_network_length_ok(d: str) -> bool:
    """The issuer prefixes (IIN) of the networks and their lengths: a Luhn-valid number that
    starts like no card (order numbers, timestamps in ms start with 1) is not taken."""
    n = len(d)
    if d[0] == "4":  # not 13: those Visa numbers are long gone, and EAN-13 codes 40–44 abound
        return n in (16, 19)
    two, four = int(d[:2]), int(d[:4])
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if two in (30, 36, 38, 39):
        return 14 <= n <= 19
    if two == 35 or d[0] == "6" or two == 50 or 56 <= two <= 59:
        return 16 <= n <= 19 if two in (35, 62) else 13 <= n <= 19
    return False


def _card(candidate: bytes) -> int:
    if len({c for c in candidate if c in b" -"}) > 1:
        return 0
    d = _digits(candidate)
    return len(candidate) if _card_network_length_ok(d) and luhn.is_valid(d) else 0


CARD = Rule(
    "credit_card",
    # The whole run of digit groups, or nothing: a card inside a longer grouped number (a
    # tracking number, an account) is more likely part of it than a card.
    re.compile(rb"(?<![\w.,+-])(?<!\d[ -])\d(?:[ -]?\d){12,18}(?![\w]|[ .,-]?\d)"),
    _card,
    first=b"0123456789",
    min_digits=13,
)

# ---- IBAN: country, check digits, the country's BBAN length and format, mod 97 ----


def _iban(candidate: bytes) -> int:
    groups = candidate.split(b" ")
    for n in range(len(groups), 0, -1):
        head = b" ".join(groups[:n])
        if len(head.replace(b" ", b"")) < 15:
            break
        # The IBAN standard's checks (mod 97, the country's BBAN length and character
        # classes), not stdnum's national ones: its Belgian check rejects the registry's own
        # example (a bank code it does not list).
        if stdnum_iban.is_valid(head.decode("ascii"), check_country=False):
            return len(head)
    return 0


IBAN = Rule(
    "iban",
    re.compile(rb"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![a-z0-9_-])"),
    _iban,
    first=b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    min_digits=8,
)

# ---- national ids: checksummed where the country has one (stdnum), else the format ----


def _stdnum(module: Callable[[str], bool]) -> Validator:
    def check(candidate: bytes) -> int:
        return len(candidate) if module(candidate.decode("ascii")) else 0

    return check


_NINO_BAD_PREFIXES = (b"BG", b"GB", b"KN", b"NK", b"NT", b"TN", b"ZZ")


def _nino(candidate: bytes) -> int:
    return 0 if candidate[:2] in _NINO_BAD_PREFIXES else len(candidate)


def _ssn(candidate: bytes) -> int:
    return len(candidate) if ssn.is_valid(candidate.replace(b" ", b"-").decode()) else 0


def _dni_or_nie(candidate: bytes) -> int:
    value = candidate.decode("ascii")
    ok = nie.is_valid(value) if value[0] in "XYZ" else dni.is_valid(value)
    return len(candidate) if ok else 0


NATIONAL_IDS = (
    # US SSN, separated (a bare 9-digit run is any number): area 000, 666 and 9xx, group 00
    # and serial 0000 are never issued, nor the advertised 078-05-1120 (stdnum knows them).
    Rule(
        "national_id",
        re.compile(rb"(?<![\w.-])(?<!\d[ -])\d{3}(?:-\d{2}-| \d{2} )\d{4}(?![\w]|[ .-]?\d)"),
        _ssn,
        first=b"0123456789",
        min_digits=9,
    ),
    # UK National Insurance number: no checksum, so only its exact format and letter rules.
    Rule(
        "national_id",
        re.compile(
            rb"(?<![\w-])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
            rb"(?: ?\d{2} ?\d{2} ?\d{2} ?| \d{2} \d{2} \d{2} )[A-D](?![\w-])"
        ),
        _nino,
        first=b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        min_digits=6,
    ),
    # Canada SIN (Luhn) and India Aadhaar (Verhoeff), in their printed groupings.
    Rule(
        "national_id",
        re.compile(rb"(?<![\w.-])(?<!\d[ -])\d{3}(?:-\d{3}-| \d{3} )\d{3}(?![\w]|[ .-]?\d)"),
        _stdnum(sin.is_valid),
        first=b"0123456789",
        min_digits=9,
    ),
    Rule(
        "national_id",
        re.compile(rb"(?<![\w.-])(?<!\d[ -])[2-9]\d{3}(?: \d{4} |-\d{4}-)\d{4}(?![\w]|[ .-]?\d)"),
        _stdnum(aadhaar.is_valid),
        first=b"23456789",
        min_digits=12,
    ),
    # Brazil CPF (two check digits), Spain DNI/NIE (check letter), Italy codice fiscale.
    Rule(
        "national_id",
        re.compile(rb"(?<![\w.-])(?<!\d[ -])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w]|[ .-]?\d)"),
        _stdnum(cpf.is_valid),
        first=b"0123456789",
        min_digits=11,
        needs=b".",
        needs_within=4,
    ),
    Rule(
        "national_id",
        re.compile(rb"(?<![\w-])(?:\d{8}|[XYZ]-?\d{7})-?[A-Z](?![\w-])"),
        _dni_or_nie,
        first=b"0123456789XYZ",
        min_digits=7,
    ),
    Rule(
        "national_id",
        re.compile(rb"(?<![\w-])[A-Z]{6}\d{2}[A-EHLMPR-T]\d{2}[A-Z]\d{3}[A-Z](?![\w-])"),
        _stdnum(codicefiscale.is_valid),
        first=b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        min_digits=7,
    ),
)

# ---- phone numbers: Google's numbering plans (phonenumbers) decide ----

# National formats are read as numbers of these countries (those with a trunk prefix 0;
# the North American plan has its own shape below). More regions find more numbers and let
# more random digit groups through: each is a trade, see docs/guardrails.md.
TRUNK_ZERO_REGIONS = ("GB", "DE", "FR", "IT", "NL", "BE", "AT", "CH", "IE", "AU", "IN", "SE")

# Shapes no phone number is written in: dates, and the US SSN's 3-2-4 (a never-issued SSN
# such as 078-05-1120 would otherwise be a valid number somewhere).
_NOT_PHONE = re.compile(
    rb"\d{1,2}([./ -])\d{1,2}\1\d{2,4}|\d{4}([./ -])\d{1,2}\2\d{1,2}|\d{3}([ -])\d{2}\3\d{4}"
)


def _phone_valid(text: str, regions: tuple[str | None, ...]) -> bool:
    for region in regions:
        try:
            number = phonenumbers.parse(text, region)
        except NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return True
    return False


def _phone(regions: tuple[str | None, ...], min_digits: int) -> Validator:
    """The whole candidate or nothing: cut at a separator, a longer grouped number (an
    account, a random 16-digit reference) holds a valid phone number surprisingly often."""

    def check(candidate: bytes) -> int:
        if not min_digits <= len(_digits(candidate)) <= 15:
            return 0
        if _NOT_PHONE.fullmatch(candidate.lstrip(b"(")):
            return 0
        return len(candidate) if _phone_valid(candidate.decode("ascii"), regions) else 0

    return check


PHONES = (
    # International: +CC and the rest, separators optional.
    Rule(
        "phone",
        re.compile(rb"(?<![\w+])\+(?:\d[ .()-]{0,2}){6,14}\d(?![\w])"),
        _phone((None,), 7),
        first=b"+",
        min_digits=7,
    ),
    # North American: (415) 555-2671, 415-555-2671, 415.555.2671, 1 415 555 2671.
    Rule(
        "phone",
        re.compile(
            rb"(?<![\w+.-])(?<!\d[ -])(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}"
            rb"(?![\w]|[ .-]?\d)"
        ),
        _phone(("US",), 10),
        first=b"0123456789(",
        min_digits=10,
    ),
    # National with a trunk 0, at least 9 digits and one kind of separator (a bare run of
    # digits starting with 0 is as often an order number, a short one an ISSN or a part
    # number): 020 7946 0958, 030 12345678, 01 23 45 67 89. Not right after a group of four
    # capitals or digits (the inside of an IBAN).
    Rule(
        "phone",
        re.compile(
            rb"(?<![\w+.-])(?<!\d[ -])(?<![A-Z0-9]{4} )"
            rb"(?:\(0\d{1,4}\) ?\d{2,8}(?:[ .-]\d{2,8}){0,3}"
            rb"|0\d{1,4}(?: \d{2,8}(?: \d{2,8}){0,3}|-\d{2,8}(?:-\d{2,8}){0,3}"
            rb"|\.\d{2,8}(?:\.\d{2,8}){0,3}))"
            rb"(?![\w]|[ .-]?\d)"
        ),
        _phone(TRUNK_ZERO_REGIONS, 9),
        first=b"0(",
        min_digits=9,
    ),
)

# ---- IP addresses: the standard library's parser decides ----


# Fixed-width look-behinds (Python's kind): "version 2.4.1.0", "RFC 3986 6.2.2.2", "§ 1.2.3.4".
_NOT_AFTER_WORDS = b"".join(
    b"(?<!" + word + b")"
    for word in (
        rb"ersion ",
        rb"ersion: ",
        rb"elease ",
        rb"uild ",
        rb"ection ",
        rb"hapter ",
        rb"RFC \d{3} ",
        rb"RFC \d{4} ",
        "§ ".encode(),
        "§".encode(),
    )
)


def _ipv4(candidate: bytes) -> int:
    try:
        ipaddress.IPv4Address(candidate.decode("ascii"))
    except ValueError:  # an octet over 255 or with a leading zero
        return 0
    return len(candidate)


def _ipv6(candidate: bytes) -> int:
    if b"::" not in candidate and candidate.count(b":") != 7:  # "12:30:45", cheaply
        return 0
    text = candidate.decode("ascii")
    if not any(c.isdigit() for c in text):  # "a::b", C++'s "A::B": no address has no digit
        return 0
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return 0
    return len(candidate)


IPS = (
    # Four octets, not part of a longer dotted run (1.2.3.4.5) nor of a word (v1.2.3.4), nor
    # after a word that makes it a version or a section number.
    Rule(
        "ip_address",
        re.compile(
            rb"(?<![\w.-])"
            + _NOT_AFTER_WORDS
            + rb"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\w-]|\.\d)"
        ),
        _ipv4,
        first=b"0123456789",
        min_digits=4,
        needs=b".",
        needs_within=4,
    ),
    Rule(
        "ip_address",
        re.compile(
            rb"(?<![\w:.])(?:[0-9A-Fa-f]{1,4}:|:)(?:[0-9A-Fa-f]{0,4}:){1,7}"
            rb"(?:\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:.])"
        ),
        _ipv6,
        first=b"0123456789ABCDEFabcdef:",
        min_digits=1,
        needs=b":",
        needs_within=5,
    ),
)

# Every rule that needs digits, for the one combined pattern pii.py searches the text with
# (no rule may use a numbered group: they are joined into one regex).
NUMERIC = (CARD, IBAN, *NATIONAL_IDS, *IPS, *PHONES)

# ---- email: the common address shape, bounded (64 for the local part, as RFC 5321) ----

_LABEL = rb"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL = Rule(
    "email",
    re.compile(
        rb"(?<![\w.%+'-])[\w%+'-](?:[\w.%+'-]{0,62}[\w%+'-])?@"
        + rb"(?:"
        + _LABEL
        + rb"\.){1,8}[A-Za-z]{2,24}(?![\w-]|\.[A-Za-z0-9])"
    ),
    lambda candidate: len(candidate),
)
