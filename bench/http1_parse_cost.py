"""CPU cost of framing one upstream response: protocol/http1_client.py (llhttp) against the
hand-written parser it replaced (commit 92e4871, loaded with `git show`), on the same bytes.

    python -m bench.http1_parse_cost [N]

Two shapes: a JSON answer (7 headers, 1 KiB body, one read) and an SSE answer of 20 chunks,
one per read. Prints the best of three runs of N (default 100,000) parses, in µs each.
"""

from __future__ import annotations

import subprocess
import sys
import time
import types
from collections.abc import Callable

from protocol.http1_client import ResponseParser

OLD_COMMIT = "92e4871"
HEAD = (
    b"HTTP/1.1 200 OK\r\nDate: Mon, 23 Nov 2026 23:00:00 GMT\r\n"
    b"Content-Type: application/json\r\nConnection: keep-alive\r\n"
    b"x-request-id: req_0123456789abcdef\r\nopenai-processing-ms: 312\r\n"
    b"x-ratelimit-remaining-requests: 9999\r\n"
)
JSON = [HEAD + b"Content-Length: 1024\r\n\r\n" + b"x" * 1024]
EVENT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk",'
    b'"choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'
)
CHUNK = b"%x\r\n" % len(EVENT) + EVENT + b"\r\n"
SSE = [HEAD + b"Transfer-Encoding: chunked\r\n\r\n"] + [CHUNK] * 19 + [CHUNK + b"0\r\n\r\n"]


def _old_module() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:protocol/http1.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("old_http1")
    module.__dict__["__name__"] = "old_http1"
    sys.modules["old_http1"] = module  # dataclasses look their module up
    exec(compile(source, "old_http1.py", "exec"), module.__dict__)
    return module


def _new(parts: list[bytes]) -> bytes:
    parser = ResponseParser()
    body = b"".join([parser.feed(part) for part in parts])
    assert parser.done and parser.reusable
    return body


def _old_parser(old: types.ModuleType) -> Callable[[list[bytes]], bytes]:
    def parse(parts: list[bytes]) -> bytes:
        parsed = old.parse_head(parts[0])
        assert parsed is not None
        head, offset = parsed
        reader = old.BodyReader(head)
        out = [reader.feed(parts[0][offset:])]
        out += [reader.feed(part) for part in parts[1:]]
        assert reader.done and reader.reusable and head.keep_alive
        return b"".join(out)

    return parse


def best_us(parse: Callable[[list[bytes]], bytes], parts: list[bytes], n: int) -> float:
    """µs per call of `parse(parts)`, the best of three runs of `n` calls."""
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            parse(parts)
        runs.append((time.perf_counter() - started) / n * 1e6)
    return min(runs)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    old = _old_parser(_old_module())
    for name, parts in (("JSON, 1 KiB", JSON), ("SSE, 20 chunks", SSE)):
        assert old(parts) == _new(parts)
        before, after = best_us(old, parts, n), best_us(_new, parts, n)
        print(f"{name:15} old {before:6.2f} µs   new {after:6.2f} µs   ({after / before:.2f}x)")


if __name__ == "__main__":
    main()
