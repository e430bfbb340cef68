"""Throughput of the file upload pipeline's CPU stages, in process, on generated data: the
streaming validators (protocol/files/) and the chunked encryption (protocol/blobcrypt.py), each
fed in 64 KiB pieces as an upload arrives. The issue's goal for a whole upload (validation,
encryption and the store) is 150 MB/s on this machine, so each stage must be well above it.

    python -m bench.file_pipeline [--mb 100]

Not an HTTP bench: the upload route does not exist yet (issue #11); this measures what it will
run per byte. Prints one line per stage: MB, seconds (best of three), MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable, Iterable

from protocol.blobcrypt import Decryptor, Encryptor, new_data_key
from protocol.files import validator_for

PIECE = 64 * 1024
_WORDS = "the quick brown fox jumps over a lazy dog while gateways stream bytes".split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _repeat_to(block: bytes, size: int) -> bytes:
    data = block * (size // len(block) + 1)
    return data[: data.rfind(b"\n", 0, size) + 1]


def fine_tune_jsonl(size: int, *, short: bool = False, seed: int = 1) -> bytes:
    """Chat-format lines (~1.4 KB each, or ~110 B with `short`) up to about `size` bytes."""
    rng = random.Random(seed)
    lines = []
    for _ in range(500):
        if short:
            messages = [
                {"role": "user", "content": _text(rng, 3)},
                {"role": "assistant", "content": _text(rng, 3)},
            ]
        else:
            messages = [
                {"role": "system", "content": _text(rng, 20)},
                {"role": "user", "content": _text(rng, rng.randint(20, 200))},
                {"role": "assistant", "content": _text(rng, rng.randint(20, 200))},
            ]
        lines.append(json.dumps({"messages": messages}).encode())
    return _repeat_to(b"\n".join(lines) + b"\n", size)


def batch_jsonl(size: int, *, seed: int = 1) -> bytes:
    """Batch requests (~1.4 KB each) up to about `size` bytes, at most the 50,000 a batch file
    may hold."""
    rng = random.Random(seed)
    lines = []
    count = 0
    total = 0
    while total < size and count < 50_000:
        body = {"model": "m", "messages": [{"role": "user", "content": _text(rng, 220)}]}
        line = {"custom_id": f"r{count}", "method": "POST", "url": "/v1/chat/completions"}
        encoded = json.dumps({**line, "body": body}).encode()
        lines.append(encoded)
        total += len(encoded) + 1
        count += 1
    return b"\n".join(lines) + b"\n"


def _pieces(data: bytes) -> list[bytes]:
    return [data[i : i + PIECE] for i in range(0, len(data), PIECE)]


def _best(run: Callable[[], object], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best


def _validate(purpose: str, pieces: list[bytes]) -> Callable[[], object]:
    def run() -> object:
        validator = validator_for(purpose)
        for piece in pieces:
            validator.feed(piece)
        return validator.finish()

    return run


def _encrypt(key: bytes, pieces: list[bytes]) -> list[bytes]:
    encryptor = Encryptor(key, "file_bench")
    out: list[bytes] = []
    for piece in pieces:
        out += encryptor.feed(piece)
    return out + encryptor.finish()


def _decrypt(key: bytes, chunks: Iterable[bytes]) -> int:
    decryptor = Decryptor(key, "file_bench")
    size = 0
    for chunk in chunks:
        size += sum(map(len, decryptor.feed(chunk)))
    return size + len(decryptor.finish())


def measure(megabytes: int) -> list[tuple[str, int, float]]:
    """(stage, bytes, best seconds) for each stage over about `megabytes` MB of input."""
    size = megabytes * 1_000_000
    results = []
    for name, purpose, data in (
        ("validate fine-tune (~1.4 KB lines)", "fine-tune", fine_tune_jsonl(size)),
        ("validate fine-tune (~110 B lines)", "fine-tune", fine_tune_jsonl(size, short=True)),
        ("validate batch", "batch", batch_jsonl(size)),
    ):
        results.append((name, len(data), _best(_validate(purpose, _pieces(data)))))
    key = new_data_key()
    plain = _pieces(os.urandom(size))
    sealed = _encrypt(key, plain)
    results.append(("encrypt", size, _best(lambda: _encrypt(key, plain))))
    results.append(("decrypt", size, _best(lambda: _decrypt(key, sealed))))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.file_pipeline")
    parser.add_argument("--mb", type=int, default=100, help="input size per stage, MB")
    args = parser.parse_args(argv)
    for stage, size, seconds in measure(args.mb):
        print(f"{stage:38} {size / 1e6:7.1f} MB {seconds:6.3f} s {size / seconds / 1e6:8.0f} MB/s")


if __name__ == "__main__":
    main()
