"""The secret rules of the PII recognizer (services/guardrails/pii.py): provider API keys, PEM
private keys and JWTs. Every secret starts with a fixed literal, so each is looked for only
where that literal is (`SECRET_ANCHORS`), never by a pass over the whole text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from services.guardrails.pii_rules import Rule

# The whole of a long secret is matched (a PEM block up to 400 lines, a JWT up to some 14 KB);
# pii.py cuts it into pieces of at most MAX_MATCH_CHARS.


def _jwt(candidate: bytes) -> int:
    """A JWT's header part decodes to a JSON object naming its `alg`: that and the dot after
    it are enough (a stream guard sees the start of a token before its end)."""
    header = candidate.split(b".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + b"=" * (-len(header) % 4)))
    except (binascii.Error, ValueError):
        return 0
    return len(candidate) if isinstance(decoded, dict) and "alg" in decoded else 0


_KEY_TAIL = rb"(?![\w-])"
KEYS = Rule(
    "secret",
    re.compile(
        rb"(?<![\w-])(?:"
        rb"sk-(?:ant-|proj-|svcacct-|admin-)?[\w-]{20,250}"  # OpenAI, Anthropic
        rb"|[sr]k_live_[A-Za-z0-9]{16,250}"  # Stripe
        rb"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key id
        rb"|gh[pousr]_[A-Za-z0-9]{30,250}|github_pat_\w{20,250}"  # GitHub
        rb"|xox[abposr]-[A-Za-z0-9-]{10,250}"  # Slack
        rb"|AIza[\w-]{35}"  # Google API key
        rb")" + _KEY_TAIL
    ),
    lambda candidate: len(candidate),
)
# A PEM private key: the header line is the evidence; the match runs over the body and
# the END line when they follow, so that redaction removes the key, not just its label.
PEM = Rule(
    "secret",
    re.compile(
        rb"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----"
        rb"(?:(?:\r?\n(?:Proc-Type|DEK-Info):[^\r\n]{0,100}){1,2}\r?\n)?"
        rb"(?:\r?\n[A-Za-z0-9+/=]{1,100}){0,400}"
        rb"(?:\r?\n-----END (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----)?"
    ),
    lambda candidate: len(candidate),
)
JWT = Rule(
    "secret",
    re.compile(rb"(?<![\w-])eyJ[\w-]{10,2000}\.(?:[\w-]{0,8000}(?:\.[\w-]{0,4000})?)?(?![\w-])"),
    _jwt,
)

# Every secret starts with one of these literals. Each is looked for at one of its bytes
# that prose has less often ("-", "_", "A", "J") with a regex that starts with that byte: the
# regex engine skips to a pattern's leading literal in a tight loop (some 0.5 ns a byte)
# where it tests a class at 10–25 ns a byte, and the rest of the literal is checked around
# it (look-behinds) without a step in Python. (the regex, then each literal with the offset
# of the anchor byte in it, and its rule.)
SECRET_ANCHORS: tuple[tuple[re.Pattern[bytes], tuple[tuple[bytes, int, Rule], ...]], ...] = (
    (
        re.compile(rb"-(?:(?<=sk-)|(?<=xox[abposr]-)|----BEGIN )"),
        ((b"sk-", 2, KEYS), (b"xox", 4, KEYS), (b"-----BEGIN ", 0, PEM)),
    ),
    (
        re.compile(rb"_(?:(?<=[sr]k_)live_|(?<=gh[pousr]_)|(?<=github_)pat_)"),
        (
            (b"sk_live_", 2, KEYS),
            (b"rk_live_", 2, KEYS),
            (b"gh", 3, KEYS),
            (b"github_pat_", 6, KEYS),
        ),
    ),
    (re.compile(rb"A(?:KIA|SIA|Iza)"), ((b"A", 0, KEYS),)),
    (re.compile(rb"J(?<=eyJ)"), ((b"eyJ", 2, JWT),)),
)
SECRETS = (KEYS, PEM, JWT)
