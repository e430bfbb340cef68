"""What keeps the console's pages safe in a browser: response headers (CSP and friends), the
session cookie's attributes, the CSRF check of every state-changing POST, and the reading of
form bodies (bounded, UTF-8, never a 5xx for a malformed one).

CSRF: a POST must carry the session's token in the `csrf` field (compared in constant time)
and, when the browser sends them, `Sec-Fetch-Site: same-origin` (or, from a browser too old
to send it, an `Origin` naming this host). The SameSite=Strict cookie already keeps other
sites' requests unauthenticated; the token and the origin check are two further locks.
Sign-in has no session yet: it is guarded by the origin check alone.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl, urlsplit

COOKIE = "gateway_console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 50


class FormError(Exception):
    """The body is not a form the console reads (400)."""


def session_cookie(session_id: str) -> bytes:
    return f"{COOKIE}={session_id}; Path=/console; HttpOnly; Secure; SameSite=Strict".encode()


def cleared_cookie() -> bytes:
    return f"{COOKIE}=; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age=0".encode()


def cookie_value(cookie_header: str | None) -> str | None:
    """The session id from a `Cookie` header (the first cookie of that name)."""
    if not cookie_header:
        return None
    for part in cookie_header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE:
            return value.strip() or None
    return None


def same_origin(origin: str | None, fetch_site: str | None, host: str | None) -> bool:
    """False when the browser says the request came from elsewhere.

    `Sec-Fetch-Site` (set by the browser, never by a page's script) decides when present: only
    `same-origin` passes. Under `Referrer-Policy: no-referrer` Chromium sends `Origin: null`
    with a same-origin form, so Origin is only judged without Sec-Fetch-Site (an older
    browser): it must then name this host and port (a proxy terminating TLS changes the scheme
    it sees, not the host). Neither header (not a browser): the token alone decides."""
    if fetch_site is not None:
        return fetch_site.strip().lower() == "same-origin"
    if origin is None:
        return True
    if origin.strip() == "null" or not host:
        return False
    try:
        netloc = urlsplit(origin.strip()).netloc
    except ValueError:
        return False
    return netloc.lower() == host.strip().lower()


def token_ok(expected: str, presented: str | None) -> bool:
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode("utf-8", "surrogateescape"))


def parse_form(content_type: str | None, body: bytes) -> dict[str, str]:
    """An application/x-www-form-urlencoded body as a dict (the first value of a repeated
    field); FormError for another type, invalid UTF-8, too many fields or a control
    character."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if body and kind != "application/x-www-form-urlencoded":
        raise FormError("The form must be sent as application/x-www-form-urlencoded.")
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise FormError("The form is not valid.") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if any(ord(c) < 32 and c not in "\t\r\n" for c in name + value):
            raise FormError("The form holds a control character.")
        form.setdefault(name, value)
    return form
