"""Reading SSE bodies in tests: split into (event name, data) pairs."""

from __future__ import annotations

import json
from typing import Any


def events(body: str) -> list[tuple[str | None, str]]:
    """Each `\\n\\n`-separated block as (its `event:` value or None, its joined `data:` lines)."""
    out: list[tuple[str | None, str]] = []
    for block in body.split("\n\n"):
        if not block:
            continue
        name = None
        data: list[str] = []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        out.append((name, "\n".join(data)))
    return out


def openai_chunks(body: str) -> list[dict[str, Any]]:
    """The JSON chunks of an OpenAI stream, checking it ends with exactly one `[DONE]`."""
    datas = [data for _, data in events(body)]
    assert datas[-1] == "[DONE]" and datas.count("[DONE]") == 1
    return [json.loads(d) for d in datas[:-1]]
