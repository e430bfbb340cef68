"""Named parameters for PostgreSQL: `:name` in our SQL becomes `$n` for asyncpg. No I/O."""

from __future__ import annotations

import re
from functools import lru_cache

from storage.database import Params

# `:name` but not `::type` casts.
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


@lru_cache(maxsize=1024)
def to_positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite once per distinct statement; returns the SQL and the parameter order."""
    order: dict[str, int] = {}  # name -> its $n (a dict: statements may have many names)

    def number(match: re.Match[str]) -> str:
        return f"${order.setdefault(match.group(1), len(order) + 1)}"

    return _NAMED.sub(number, sql), tuple(order)


def positional_args(names: tuple[str, ...], params: Params) -> list[object]:
    try:
        return [params[name] for name in names]
    except KeyError as exc:
        raise KeyError(f"missing SQL parameter {exc}") from None
