"""The check a job's training (and validation) file passes before anything is sent to a
provider, and its token count. It reuses the upload validator (protocol/files/fine_tune.py:
the same line rules, the same messages), counting each example's tokens on the way:

- an example's tokens are estimated from the UTF-8 bytes of what a model reads of it (each
  message's role, name, text parts, tool call names and arguments, and the `tools`/`functions`
  declarations), about 4 bytes a token (protocol/pricing.estimate_tokens);
- an example over `max_example_tokens` fails the job with `token_limit_exceeded`;
- a line the validator refuses fails it with `invalid_format`; both name the 1-based line and
  carry `param` = the file's field (`training_file` or `validation_file`).
"""

from __future__ import annotations

import msgspec

from protocol.errors import DatasetError, InvalidFile
from protocol.files.fine_tune import Example, FineTuneValidator, TextPart
from protocol.pricing import estimate_tokens

INVALID_FORMAT = "invalid_format"
TOKEN_LIMIT_EXCEEDED = "token_limit_exceeded"
_encode = msgspec.json.encode


def example_tokens(example: Example) -> int:
    size = 0
    for message in example.messages:
        size += len(message.role) + len((message.name or "").encode())
        content = message.content
        if isinstance(content, str):
            size += len(content.encode())
        elif content is not None:
            for part in content:
                if isinstance(part, TextPart):
                    size += len(part.text.encode())
        for call in message.tool_calls or ():
            size += len(call.function.name.encode()) + len(call.function.arguments.encode())
        if message.function_call is not None:
            fc = message.function_call
            size += len(fc.name.encode()) + len(fc.arguments.encode())
    if example.tools:
        size += len(_encode(example.tools))
    if example.functions:
        size += len(_encode(example.functions))
    return estimate_tokens(size)


class _Counting(FineTuneValidator):
    """The upload validator, plus a token count per example and the per-example limit."""

    def __init__(self, max_example_tokens: int) -> None:
        super().__init__()
        self.tokens = 0
        self.examples = 0
        self.too_long: tuple[int, int] | None = None  # (line, tokens) of the first
        self._max = max_example_tokens

    def _count(self, example: Example, number: int) -> None:
        tokens = example_tokens(example)
        self.tokens += tokens
        self.examples += 1
        if tokens > self._max and self.too_long is None:
            self.too_long = (number, tokens)

    def _accept(self, objs: list[Example]) -> bool:
        if not super()._accept(objs):
            return False
        first = self._line + 1  # the fast path numbers its lines from here
        for i, example in enumerate(objs):
            self._count(example, first + i)
        return True

    def _example(self, example: Example, number: int) -> None:
        super()._example(example, number)
        self._count(example, number)


class DatasetCheck:
    """Feed a file's plaintext in pieces, then `finish()` for its token count; raises
    DatasetError at the first problem."""

    def __init__(self, param: str, max_example_tokens: int) -> None:
        self._param = param
        self._max = max_example_tokens
        self._validator = _Counting(max_example_tokens)

    def _failed(self, exc: InvalidFile) -> DatasetError:
        return DatasetError(INVALID_FORMAT, f"{self._param}: {exc.message}", self._param)

    def _check_limit(self) -> None:
        too_long = self._validator.too_long
        if too_long is not None:
            line, tokens = too_long
            raise DatasetError(
                TOKEN_LIMIT_EXCEEDED,
                f"{self._param}: line {line}: the example has about {tokens} tokens, more than"
                f" the {self._max} a training example may have.",
                self._param,
            )

    def feed(self, piece: bytes) -> None:
        try:
            self._validator.feed(piece)
        except InvalidFile as exc:
            raise self._failed(exc) from None
        self._check_limit()

    def finish(self) -> int:
        try:
            self._validator.finish()
        except InvalidFile as exc:
            raise self._failed(exc) from None
        self._check_limit()
        return self._validator.tokens
