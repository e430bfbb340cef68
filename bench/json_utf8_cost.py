"""CPU cost of refusing a JSON body that is not UTF-8 (protocol/decoding.require_utf8), next to
what the chat route already does with the same body (decode the fields it needs, rewrite
`model` for the provider).

    python -m bench.json_utf8_cost [N]

Six bodies: a typical chat request (about 1.6 KB) and a long one (about 100 KB), each all
ASCII, with one non-ASCII character (the check's two paths), and in Japanese (every character
non-ASCII: the decode's worst case). Prints the best of five runs of N (default 20,000) calls,
in µs each, and the check's share of the route's body work (which runs it once: the body is decoded
once, and the rewrite re-joins its top level without reading it again). The whole request, HTTP
and the provider's answer included, costs far more: `gateway bench compare` measures that.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import msgspec

from protocol.decoding import require_utf8
from protocol.openai_chat import parse_chat_request

_TEXT = "Explain the difference between a process and a thread, with examples. " * 3
_JAPANESE = "プロセスとスレッドの違いを例を挙げて説明してください。" * 4
_KINDS = ("ASCII", "non-ASCII", "Japanese")


def _body(messages: int, kind: str) -> bytes:
    text = _JAPANESE if kind == "Japanese" else _TEXT
    message = {"role": "user", "content": text}
    body = msgspec.json.encode({"model": "small", "messages": [message] * messages})
    return body.replace(b"examples", "exämples".encode(), 1) if kind == "non-ASCII" else body


def _best_us(work: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            work()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main(n: int) -> None:
    print(f"{'body':<26}{'bytes':>8}{'check µs':>10}{'parse+rewrite µs':>18}{'share':>8}")
    for label, messages in (("typical chat", 7), ("long chat", 420)):
        for kind in _KINDS:
            body = _body(messages, kind)
            runs = n if len(body) < 10_000 else max(n // 50, 100)

            def check_only(body: bytes = body) -> None:
                require_utf8(body)

            def route(body: bytes = body) -> None:
                parse_chat_request(body).rewrite(model="sim-small", force_include_usage=False)

            check = _best_us(check_only, runs)
            total = _best_us(route, runs)
            name = f"{label}, {kind}"
            print(f"{name:<26}{len(body):>8}{check:>10.3f}{total:>18.2f}{check / total:>8.1%}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
