"""CPU cost of reading one request in the simulated upstream: bench/upstream/http.py over the
gateway's llhttp wrapper (protocol/http1_server.py) against the hand-written parser it replaced
(commit 9ddc9f9, loaded with `git show`), on the same bytes.

    python -m bench.upstream_parse_cost [N]

Two shapes: a chat completion as the gateway sends it (8 headers, a 300-byte JSON body, one
read) and a 20 KiB body sent in 20 chunks, one per read; each on a kept connection (one parser
for every request) and on a new one (a parser per request). Prints the best of three runs of N
(default 100,000) requests, in µs each.
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any, Protocol

from bench.http1_parse_cost import best_us
from bench.upstream.http import RequestReader

OLD_COMMIT = "9ddc9f9"
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9100\r\n"
    b"authorization: Bearer sk-sim-0123456789abcdef\r\ncontent-type: application/json\r\n"
    b"accept: application/json\r\nuser-agent: gateway/0.1\r\n"
    b"x-request-id: req_0123456789abcdef\r\nx-stainless-retry-count: 0\r\n"
)
BODY = (
    b'{"model":"sim-small","messages":[{"role":"system","content":"You are terse."},'
    b'{"role":"user","content":"Say hello in one short sentence, and then another one, '
    b'and then a third, so that the body is about three hundred bytes long."}],'
    b'"max_tokens":20,"stream":false,"temperature":0.2}'
)
CHAT = [HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY]
PIECE = b"x" * 1024
CHUNK = b"%x\r\n" % len(PIECE) + PIECE + b"\r\n"
CHUNKED = [HEAD + b"Transfer-Encoding: chunked\r\n\r\n"] + [CHUNK] * 19 + [CHUNK + b"0\r\n\r\n"]


def _old_module() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:bench/upstream/http.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("old_upstream_http")
    sys.modules["old_upstream_http"] = module  # dataclasses look their module up
    exec(compile(source, "old_upstream_http.py", "exec"), module.__dict__)
    return module


class _Parser(Protocol):
    def feed(self, data: bytes) -> None: ...
    def next_request(self) -> Any: ...


def _reader(make: Callable[[], _Parser], fresh: bool) -> Callable[[list[bytes]], bytes]:
    """One request read from `parts`, the parser asked after each read as the server asks it:
    by a parser made for it (`fresh`, a new connection) or by one kept (keep-alive)."""
    kept = make()

    def parse(parts: list[bytes]) -> bytes:
        parser = make() if fresh else kept
        for part in parts:
            parser.feed(part)
            request = parser.next_request()
        assert request is not None and request.keep_alive
        assert request.headers["authorization"].startswith("Bearer ")
        body: bytes = request.body
        return body

    return parse


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    old_parser = _old_module().RequestParser
    for fresh in (False, True):
        old, new = _reader(old_parser, fresh), _reader(RequestReader, fresh)
        for name, parts in (("chat, 300 B", CHAT), ("chunked, 20 KiB", CHUNKED)):
            assert old(parts) == new(parts)
            before, after = best_us(old, parts, n), best_us(new, parts, n)
            label = f"{name}, {'new connection' if fresh else 'keep-alive'}"
            print(
                f"{label:32} old {before:6.2f} µs   new {after:6.2f} µs   ({after / before:.2f}x)"
            )


if __name__ == "__main__":
    main()
