"""The labelled corpus for the PII recognizer: values of each kind, and clean strings that look
like them (order numbers, versions, timestamps, ISBNs, tracking numbers, UUIDs, hashes,
prices, dates, product codes) including checksummed values whose checksum is wrong.

Generated values are computed here with this file's own Luhn, mod-97, Verhoeff and check
digit code, written from the published algorithms, never with the recognizer or the
libraries it uses, so the expectations do not come from the code under test. Generation is
seeded: the corpus is the same on every run. Used by tests/services/guardrails/test_pii.py
and bench/pii_eval.py.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

SENTENCES = (
    "Please use {} for this.",
    "{}",
    "The value was {}, as agreed.",
    "see ({}) below",
    "Kunde: {} — bitte prüfen",
)


@dataclass(frozen=True)
class Sample:
    text: str
    entity: str | None  # None: clean, nothing should be found
    start: int = 0  # the value's span in text (for a positive)
    end: int = 0
    note: str = ""


def _embed(rng: random.Random, value: str, entity: str | None, note: str = "") -> Sample:
    template = rng.choice(SENTENCES)
    text = template.format(value)
    start = template.index("{}")
    return Sample(text, entity, start, start + len(value), note)


# ---- checksums, from the published algorithms ----


def luhn_digit(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:  # doubled: the check digit will sit to the right of this one
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def _mod97(s: str) -> int:
    return int("".join(str(int(c, 36)) for c in s)) % 97


def iban(country: str, bban: str) -> str:
    check = 98 - _mod97(bban + country + "00")
    return f"{country}{check:02d}{bban}"


_VERHOEFF_D = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
    [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
    [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
    [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
    [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
    [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
]
_VERHOEFF_P = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
    [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
    [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
    [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
    [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
]
_VERHOEFF_INV = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]


def verhoeff_digit(payload: str) -> str:
    c = 0
    for i, ch in enumerate(reversed(payload)):
        c = _VERHOEFF_D[c][_VERHOEFF_P[(i + 1) % 8][int(ch)]]
    return str(_VERHOEFF_INV[c])


def cpf_digits(nine: str) -> str:
    def digit(s: str) -> str:
        total = sum(int(c) * w for c, w in zip(s, range(len(s) + 1, 1, -1), strict=True))
        r = total * 10 % 11
        return str(0 if r == 10 else r)

    first = digit(nine)
    return first + digit(nine + first)


DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


# ---- positives ----


def _cards(rng: random.Random) -> list[Sample]:
    specs = [("4", 16)] * 11 + [("4", 19)]  # no 13-digit Visa: retired, and EAN-13 look-alike
    specs += [(str(rng.randint(51, 55)), 16) for _ in range(6)]
    specs += [(str(rng.randint(2221, 2720)), 16) for _ in range(3)]
    specs += [("34", 15), ("37", 15), ("37", 15), ("6011", 16), ("65", 16), ("3530", 16)]
    specs += [("36", 14), ("62", 16), ("62", 19)]
    out = []
    for i, (prefix, length) in enumerate(specs):
        payload = prefix + "".join(str(rng.randint(0, 9)) for _ in range(length - len(prefix) - 1))
        number = payload + luhn_digit(payload)
        if length == 15:
            groups = [number[:4], number[4:10], number[10:]]
        else:
            groups = [number[j : j + 4] for j in range(0, length, 4)]
        sep = ("", " ", "-")[i % 3]
        out.append(_embed(rng, sep.join(groups), "credit_card"))
    return out


def _ibans(rng: random.Random) -> list[Sample]:
    def digits(n: int) -> str:
        return "".join(str(rng.randint(0, 9)) for _ in range(n))

    def letters(n: int) -> str:
        return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(n))

    made = []
    for _ in range(6):
        made.append(iban("DE", digits(18)))
        made.append(iban("GB", letters(4) + digits(14)))
        made.append(iban("AT", digits(16)))
        made.append(iban("CH", digits(17)))
        made.append(iban("IE", letters(4) + digits(14)))
    known = [  # the published examples of their banks' associations
        "DE89 3704 0044 0532 0130 00",
        "GB82 WEST 1234 5698 7654 32",
        "FR14 2004 1010 0505 0001 3M02 606",
        "NL91 ABNA 0417 1643 00",
        "BE68 5390 0754 7034",
        "ES91 2100 0418 4502 0005 1332",
        "IT60 X054 2811 1010 0000 0123 456",
        "CH93 0076 2011 6238 5295 7",
    ]
    out = [_embed(rng, value, "iban") for value in known]
    for i, value in enumerate(made):
        if i % 2:
            value = " ".join(value[j : j + 4] for j in range(0, len(value), 4))
        out.append(_embed(rng, value, "iban"))
    return out


def _national_ids(rng: random.Random) -> list[Sample]:
    values = []
    for _ in range(10):  # US SSN in the issued ranges
        area = rng.choice([rng.randint(1, 665), rng.randint(667, 899)])
        sep = rng.choice("- ")
        values.append(f"{area:03d}{sep}{rng.randint(1, 99):02d}{sep}{rng.randint(1, 9999):04d}")
    for _ in range(8):  # UK NINO
        first = rng.choice("ABCEHJKLMPRSTWY")
        second = rng.choice("ABCEHJLMPRSTWXY")
        d = "".join(str(rng.randint(0, 9)) for _ in range(6))
        suffix = rng.choice("ABCD")
        spaced = rng.random() < 0.5
        nino = (
            f"{first}{second} {d[:2]} {d[2:4]} {d[4:]} {suffix}"
            if spaced
            else (f"{first}{second}{d}{suffix}")
        )
        values.append(nino)
    for _ in range(5):  # Brazil CPF
        nine = "".join(str(rng.randint(0, 9)) for _ in range(9))
        d = nine + cpf_digits(nine)
        values.append(f"{d[:3]}.{d[3:6]}.{d[6:9]}-{d[9:]}")
    for _ in range(5):  # Canada SIN
        payload = str(rng.randint(1, 7)) + "".join(str(rng.randint(0, 9)) for _ in range(7))
        d = payload + luhn_digit(payload)
        values.append(f"{d[:3]}-{d[3:6]}-{d[6:]}")
    for _ in range(5):  # India Aadhaar
        payload = str(rng.randint(2, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(10))
        d = payload + verhoeff_digit(payload)
        values.append(f"{d[:4]} {d[4:8]} {d[8:]}")
    for _ in range(5):  # Spain DNI
        n = rng.randint(10_000_000, 99_999_999)
        values.append(f"{n}{DNI_LETTERS[n % 23]}")
    values += ["RSSMRA85T10A562S", "MRTMTT91D08F205J"]  # Italian codici fiscali (examples)
    return [_embed(rng, v, "national_id") for v in values]


def _phones(rng: random.Random) -> list[Sample]:
    values = [
        "+44 20 7946 0958",
        "+44 161 496 0123",
        "+44 7911 123456",
        "020 7946 0321",
        "0161 496 0754",
        "07911 654321",
        "+1 415 555 2671",
        "+1-212-555-0187",
        "(415) 555-2671",
        "212-555-0143",
        "312.555.0199",
        "1 617 555 0110",
        "+14155552671",
        "+49 30 901820",
        "+49 89 12345678",
        "030 12345678",
        "+33 1 42 68 53 00",
        "01 42 68 53 00",
        "+33 6 12 34 56 78",
        "+61 2 9876 5432",
        "(02) 9876 5432",
        "+91 98765 43210",
        "+81 3-1234-5678",
        "+34 912 345 678",
        "+39 06 6982 1234",
        "+31 20 123 4567",
        "+46 8 123 456 78",
        "+353 1 234 5678",
        "+55 11 91234-5678",
        "+27 21 123 4567",
        "+41 44 668 18 00",
        "+43 1 53114 0",
        "+32 2 511 12 34",
        "+1 (604) 555-0132",
        "+52 55 1234 5678",
    ]
    return [_embed(rng, v, "phone") for v in values]


def _emails(rng: random.Random) -> list[Sample]:
    firsts = ["john", "maria", "li.wei", "o'brien", "anna-lena", "x", "dev+alerts", "j_smith"]
    domains = ["example.com", "mail.example.org", "uni-bonn.de", "example.co.uk", "corp.io"]
    out = [
        _embed(rng, f"{rng.choice(firsts)}{rng.choice(['', '.doe', '42', '_x'])}@{d}", "email")
        for d in domains * 6
    ]
    return out


def _ips(rng: random.Random) -> list[Sample]:
    values = [
        f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        for _ in range(20)
    ]
    values += ["8.8.8.8", "192.168.0.1", "10.0.0.12", "172.16.254.3", "255.255.255.0"]
    values += [
        "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
        "2001:db8::8a2e:370:7334",
        "fe80::1ff:fe23:4567:890a",
        "::1",
        "2001:db8::",
        "::ffff:192.0.2.128",
        "2606:4700:4700::1111",
        "fd00:1234:5678::42",
    ]
    return [_embed(rng, v, "ip_address") for v in values]


def _b64url(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _secrets(rng: random.Random) -> list[Sample]:
    def chars(n: int, alphabet: str) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    values = []
    for _ in range(3):
        values.append("sk-" + chars(48, alnum))
        values.append("sk-proj-" + chars(156, alnum + "_-"))
        values.append("sk-ant-api03-" + chars(95, alnum + "_-"))
        values.append("AKIA" + chars(16, upper))
        values.append("ghp_" + chars(36, alnum))
        values.append("github_pat_" + chars(82, alnum + "_"))
        values.append("xoxb-" + chars(12, "0123456789") + "-" + chars(24, alnum))
        values.append("sk_live_" + chars(24, alnum))
        values.append("rk_live_" + chars(24, alnum))
        values.append("AIza" + chars(35, alnum + "_-"))
        header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
        payload = {"sub": chars(8, alnum), "iat": rng.randint(1_600_000_000, 1_800_000_000)}
        values.append(f"{_b64url(header)}.{_b64url(payload)}.{chars(43, alnum + '_-')}")
    values.append("-----BEGIN RSA PRIVATE KEY-----")
    values.append("-----BEGIN OPENSSH PRIVATE KEY-----")
    body = "\n".join(chars(64, alnum + "+/") for _ in range(4))
    values.append(f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----")
    values.append(f"-----BEGIN EC PRIVATE KEY-----\n{body}\n-----END EC PRIVATE KEY-----")
    return [_embed(rng, v, "secret") for v in values]


# ---- negatives: clean look-alikes, and checksummed values with a wrong checksum ----


def _invalid_checksums(rng: random.Random) -> list[Sample]:
    out = []
    for card in _cards(rng):  # each card with its check digit changed
        value = card.text[card.start : card.end]
        last = value[-1]
        value = value[:-1] + str((int(last) + rng.randint(1, 9)) % 10)
        out.append(_embed(rng, value, None, "card, Luhn wrong"))
    for sample in _ibans(rng):  # check digits changed: mod 97 fails
        value = sample.text[sample.start : sample.end]
        check = (int(value[2:4]) + rng.randint(1, 90)) % 100
        out.append(_embed(rng, f"{value[:2]}{check:02d}{value[4:]}", None, "IBAN, mod 97 wrong"))
    for _ in range(8):  # SSNs in never-issued ranges
        area = rng.choice(["000", "666", f"{rng.randint(900, 999)}"])
        out.append(_embed(rng, f"{area}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}", None))
    out.append(_embed(rng, "123-00-4567", None, "SSN group 00"))
    out.append(_embed(rng, "123-45-0000", None, "SSN serial 0000"))
    for _ in range(5):
        nine = "".join(str(rng.randint(0, 9)) for _ in range(9))
        good = cpf_digits(nine)
        bad = f"{(int(good) + rng.randint(1, 98)) % 100:02d}"
        out.append(_embed(rng, f"{nine[:3]}.{nine[3:6]}.{nine[6:]}-{bad}", None, "CPF wrong"))
    for _ in range(5):
        payload = str(rng.randint(1, 7)) + "".join(str(rng.randint(0, 9)) for _ in range(7))
        bad = str((int(luhn_digit(payload)) + rng.randint(1, 9)) % 10)
        d = payload + bad
        out.append(_embed(rng, f"{d[:3]}-{d[3:6]}-{d[6:]}", None, "SIN, Luhn wrong"))
    for _ in range(5):
        payload = str(rng.randint(2, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(10))
        bad = str((int(verhoeff_digit(payload)) + rng.randint(1, 9)) % 10)
        d = payload + bad
        out.append(_embed(rng, f"{d[:4]} {d[4:8]} {d[8:]}", None, "Aadhaar wrong"))
    for _ in range(5):
        n = rng.randint(10_000_000, 99_999_999)
        out.append(_embed(rng, f"{n}{DNI_LETTERS[(n + rng.randint(1, 22)) % 23]}", None, "DNI"))
    return out


CLEAN = [
    # order numbers, invoices, references
    "Order #48213 shipped",
    "order no. 2024-000123",
    "ORD-7734-2210-9981",
    "Invoice INV-000045821",
    "Ref: 88213409",
    "ticket 4471-2209",
    "Case 00123456",
    "PO 4500012345",
    "Booking ref 7X9KQ2",
    "confirmation 1234567890",
    "account 00012345678",
    "item 0012-3456-78",
    "reservation 2024031500017",
    "claim 991-22-33-44",
    "order 555 1234 9876 000",
    "Lot 2024-11-27-03",
    # versions and builds
    "v1.2.3",
    "version 2.10.4",
    "Python 3.11.7",
    "node 20.11.1",
    "release 2024.1.0",
    "build 10.0.19041",
    "1.0.0-beta.2",
    "libssl 3.0.13",
    "kernel 6.1.0-18-amd64",
    "v0.9.12",
    "ver 4.2",
    "2.7.18",
    "CUDA 12.4.131",
    "SDK 35.0.0",
    "chrome 120.0.6099",
    "9.0.43",
    # timestamps, dates, durations
    "2024-01-15",
    "2024-01-15T10:30:00Z",
    "12:30:45",
    "15/01/2024",
    "01.02.2024",
    "2024/01/15",
    "Jan 15, 2024",
    "1700000000",
    "1732712345678",
    "10:30 AM",
    "00:01:23.456",
    "2024-11-27 09:15:00",
    "Mon, 27 Nov 2026 10:00:00 GMT",
    "20240115",
    "2024-W48",
    "T+00:15:00",
    "1999-12-31 23:59:59",
    "Q3 2024",
    "11/27/26",
    "27.11.2026 14:05",
    "from 2019 to 2023",
    "2023-05-01/2023-05-31",
    # ISBNs, ISSNs, EANs, tracking numbers
    "ISBN 978-3-16-148410-0",
    "ISBN 0-306-40615-2",
    "ISBN-13: 9780306406157",
    "ISSN 0317-8471",
    "EAN 4006381333931",
    "UPC 036000291452",
    "1Z999AA10123456784",
    "9400 1000 0000 0000 0000 00",
    "tracking 420 12345 9205 5000 0000 0000 00",
    "JD014600006281234567",
    "DHL 1234567890",
    "FedEx 7489 2345 6789",
    "RR123456785CH",
    "LZ123456789CN",
    # UUIDs, hashes, ids
    "123e4567-e89b-12d3-a456-426614174000",
    "550e8400-e29b-41d4-a716-446655440000",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "d41d8cd98f00b204e9800998ecf8427e",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "sha1 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12",
    "req_01HZX8K2M4N6P8R0T2V4X6Z8B0",
    "chatcmpl-8abc123def456ghi789",
    "msg_01XFDUDYJgAACzvnptvVoYEL",
    "file-abc123XYZ456",
    "0x5f3759df",
    "0xDEADBEEF",
    "#FF5733",
    "rgb(255, 87, 51)",
    "id 6f1c2b9a",
    "MAC 00:1A:2B:3C:4D:5E",
    "00-1A-2B-3C-4D-5E",
    "serial SN-4411-2299-0042",
    "IMEI-like 35-209900-176148-1",
    # prices, amounts, measures
    "$1,299.99",
    "€ 12.345,67",
    "£4,500.00",
    "USD 1 234 567.89",
    "¥120,000",
    "12.5%",
    "total: 4 111 111 units",
    "1,234,567",
    "3.14159",
    "6.022e23",
    "1e-9",
    "9.81 m/s²",
    "5 kg",
    "120/80 mmHg",
    "37.5 °C",
    "1080x1920",
    "3840 x 2160",
    "48 kHz",
    "2.4 GHz",
    "400 000 km",
    "10 000 000 tokens",
    "0.000123 BTC",
    "CHF 1'250.00",
    "₹ 2,50,000",
    # phone-like product codes and numbers that are not phone numbers
    "SKU 555-1234-A",
    "part 0800-123",
    "model XR-2300-15",
    "ext. 1234",
    "ZIP 94103",
    "Room 415-B",
    "Gate B22",
    "route 66",
    "EN 60950-1",
    "ISO 8601",
    "RFC 5321",
    "IEC 61000-4-2",
    "DIN 476",
    "M8 x 1.25",
    "Bolt 12-24",
    "code 0000",
    "PIN 1234",
    "pages 123-145",
    "Section 4.2.1",
    "§ 823 BGB",
    "Art. 6(1)(f) GDPR",
    "Fig. 3-12",
    "lines 100-200",
    "chapter 12.3.4.5.6",
    "score 98-102",
    "4-3-3 formation",
    "1-2-3-4-5",
    "12-34-56",
    "catalogue 978 0 306",
    "(123) 456",
    "+5 points",
    "+/- 0.5 mm",
    "-12.5 dBm",
    "+20 °C",
    "PR #1234",
    "issue #23",
    "port 8080",
    "localhost:8000",
    "127.0.0:80",
    "HTTP/1.1 200 OK",
    "tel: n/a",
    "Call 911",
    "dial 112",
    "1-800-FLOWERS",
    "0800 FREEPHONE",
    # versions and addresses that are not IPs
    "1.2.3",
    "RFC 3986 6.2.2.2",
    "version 2.4.1.0",
    "Section 1.2.3.4",
    "10.0.1",
    "256.1.1.1",
    "192.168.1",
    "1.2.3.4.5",
    "999.999.999.999",
    "192.168.001.001",
    "12.34.56",
    "v1.2.3.4",
    "a::b",
    "std::vector<int>",
    "Foo::Bar::baz",
    "10:30:45:12",
    "ratio 16:9",
    "12:30 to 14:45",
    "C:\\Users\\x",
    "ns::func()",
    # words and codes that look like keys or ids
    "risk-free",
    "task-based",
    "sk-learn",
    "ask-me-anything",
    "AKIA is a prefix",
    "ghp is a word",
    "xoxo",
    "AIzaWord",
    "eyJ alone",
    "-----BEGIN CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----",
    "BEGIN PRIVATE KEY (prose)",
    "sk_test_notlive",
    "GB is the country code",
    "DE and FR",
    "AB 12 CD",
    "XY123456Z",
    "ZZ123456A",
    "TN 12 34 56 A",
    "CASE12345678",
    "REF AB12 3456 7890",
    # emails that are not addresses
    "user@localhost",
    "@mention",
    "name at example dot com",
    "a@b",
    "foo@bar@baz",
    "twitter @openai",
    "x@y.z",
    "email@",
    "@example.com",
    "git@:repo",
    # mixed prose
    "The meeting is at 10:30 on 2024-01-15 in room 415.",
    "We shipped 4 111 units in Q3 and 12,345 in Q4.",
    "Version 3.2.1 fixes bug #4471 (see PR 2209).",
    "The Luhn algorithm was patented in 1960 (US 2,950,048).",
    "Call count rose 15% to 1.2 million per day.",
    "Temperature 21.5 °C, humidity 45 %, pressure 1013 hPa.",
    "Der Preis beträgt 1.299,00 € inkl. MwSt.",
    "価格は12,800円です。",
    "Номер заказа 2024-0001",
    "订单号 20240115001",
]


def corpus(seed: int = 23) -> list[Sample]:
    rng = random.Random(seed)
    positives = (
        _cards(rng)
        + _ibans(rng)
        + _national_ids(rng)
        + _phones(rng)
        + _emails(rng)
        + _ips(rng)
        + _secrets(rng)
    )
    clean = [_embed(rng, value, None, "clean") for value in CLEAN]
    return positives + _invalid_checksums(rng) + clean


# ---- scoring ----


@dataclass
class Score:
    positives: int = 0
    found: int = 0  # positives found with their exact span
    false_matches: int = 0  # matches of this kind that are not a positive's value
    negatives_hit: int = 0  # clean samples with at least one match of this kind

    @property
    def recall(self) -> float:
        return self.found / self.positives if self.positives else 1.0

    @property
    def precision(self) -> float:
        reported = self.found + self.false_matches
        return self.found / reported if reported else 1.0


def _joined(matches: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Touching matches of one kind as one (the pieces of a long secret)."""
    out: list[tuple[str, int, int]] = []
    for entity, start, end in matches:
        if out and out[-1][0] == entity and out[-1][2] == start:
            out[-1] = (entity, out[-1][1], end)
        else:
            out.append((entity, start, end))
    return out


def score(
    samples: list[Sample], find: Callable[[str], list[tuple[str, int, int]]]
) -> tuple[dict[str, Score], int, list[str]]:
    """Per kind scores, the number of clean samples, and a line for each miss or false match.

    `find` gives (entity, start, end) for a text. A positive is found when a match of its kind
    has exactly its span; every other match is a false one of its kind."""
    scores: dict[str, Score] = {}
    misses: list[str] = []
    negatives = 0
    for sample in samples:
        matches = _joined(find(sample.text))
        if sample.entity is None:
            negatives += 1
        else:
            scores.setdefault(sample.entity, Score()).positives += 1
        hit_kinds = set()
        for entity, start, end in matches:
            s = scores.setdefault(entity, Score())
            if (entity, start, end) == (sample.entity, sample.start, sample.end):
                s.found += 1
                continue
            s.false_matches += 1
            if sample.entity is None:
                hit_kinds.add(entity)
            misses.append(f"false {entity}: {sample.text[start:end]!r} in {sample.text!r}")
        for entity in hit_kinds:
            scores[entity].negatives_hit += 1
        if sample.entity is not None and (sample.entity, sample.start, sample.end) not in matches:
            misses.append(f"missed {sample.entity}: {sample.text!r} -> {matches}")
    return scores, negatives, misses
