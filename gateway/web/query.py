"""A request's query string, parsed strictly: the one place query values are decoded.

Every parameter is split on `&` and `=`, `+` is a space, and percent-escapes are decoded to
bytes that must be UTF-8. Then, for every parameter (declared by the route or not):
- invalid UTF-8 or a control character (C0, DEL, C1) in its name or value is 400; a value no
  id, cursor, date or enum can hold must not reach a handler or storage (PostgreSQL refuses
  NUL in text);
and for the parameters the route declares (`Operation.query`):
- an empty value (`?limit=`, or `?limit`) is 400 naming it: a client that sends one meant
  something, and guessing "absent" hides its bug;
- a parameter given twice is 400 naming it: which copy a proxy in front of us acted on is
  unknowable.
Parameters a route does not declare are otherwise ignored (the first copy is kept). No I/O.
"""

from __future__ import annotations

from collections.abc import Container
from urllib.parse import unquote_to_bytes

from protocol.errors import APIError, invalid_request
from protocol.labels import has_control


def parse_query(raw: bytes, declared: Container[str]) -> dict[str, str]:
    """The parameters of `raw` (the query string, without `?`); APIError 400 as above."""
    query: dict[str, str] = {}
    for piece in raw.split(b"&"):
        if not piece:
            continue  # `a=1&&b=2`, a trailing `&`
        raw_name, _, raw_value = piece.partition(b"=")
        name = _decode(raw_name, None)
        value = _decode(raw_value, name)
        if name in declared:
            if not value:
                raise invalid_request(f"`{name}` must not be empty.", param=name)
            if name in query:
                raise invalid_request(f"`{name}` is given more than once.", param=name)
        query.setdefault(name, value)
    return query


def _decode(raw: bytes, name: str | None) -> str:
    """One name (`name` None) or value: `+` and percent-escapes decoded, UTF-8, no controls."""
    try:
        text = unquote_to_bytes(raw.replace(b"+", b" ")).decode()
    except UnicodeDecodeError:
        raise _refused(name, "is not valid UTF-8 once percent-decoded") from None
    if has_control(text):
        raise _refused(name, "holds a control character")
    return text


def _refused(name: str | None, problem: str) -> APIError:
    if name is None:
        return invalid_request(f"A query parameter's name {problem}.")
    return invalid_request(f"The value of `{name}` {problem}.", param=name)
