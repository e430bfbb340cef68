"""Streaming JSONL validation of `fine-tune` and `batch` uploads: hostile input first (long
lines, bad bytes, splits at every byte), then every rule with its line number."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable

import pytest

from protocol.errors import InvalidFile
from protocol.files import validator_for
from protocol.files.batch import MAX_REQUESTS
from protocol.files.jsonl import FAST_MIN_LINES, MAX_LINE_BYTES

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _request(custom_id: str = "r1", **over: object) -> dict[str, object]:
    request: dict[str, object] = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    }
    request.update(over)
    return request


def _pieces(data: bytes, size: int) -> Iterable[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def _validate(purpose: str, data: bytes, size: int | None = None) -> str | None:
    validator = validator_for(purpose)
    for piece in _pieces(data, size or max(len(data), 1)):
        validator.feed(piece)
    return validator.finish()


def _error(purpose: str, data: bytes, size: int | None = None) -> InvalidFile:
    with pytest.raises(InvalidFile) as caught:
        _validate(purpose, data, size)
    return caught.value


# --- hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize("purpose", ["fine-tune", "batch"])
def test_a_10_mb_line_is_refused_once_past_the_bound_without_reading_the_rest(
    purpose: str,
) -> None:
    validator = validator_for(purpose)
    validator.feed(_line(CHAT if purpose == "fine-tune" else _request()) + b"\n")
    piece = b"x" * 65536
    fed = 0
    with pytest.raises(InvalidFile) as caught:
        while fed < 10 * 1024 * 1024:
            validator.feed(piece)
            fed += len(piece)
    assert fed <= MAX_LINE_BYTES  # refused as soon as the bound was passed
    assert caught.value.code == "invalid_jsonl"
    assert caught.value.message == "line 2: longer than 8 MiB"
    with pytest.raises(InvalidFile):  # the failure is sticky
        validator.feed(b"\n")


def test_a_10_mb_line_in_one_piece_is_refused() -> None:
    data = b'{"messages": "' + b"x" * (10 * 1024 * 1024) + b'"}\n'
    assert _error("fine-tune", data).message == "line 1: longer than 8 MiB"


def test_a_line_at_the_bound_is_accepted_and_one_byte_more_is_not() -> None:
    head = b'{"messages":[{"role":"user","content":"'
    tail = b'"},{"role":"assistant","content":"ok"}]}'
    line = head + b"a" * (MAX_LINE_BYTES - len(head) - len(tail)) + tail
    assert len(line) == MAX_LINE_BYTES
    assert _validate("fine-tune", line + b"\n", 65536) == "application/jsonl"
    longer = line[:-2] + b" ]}"
    assert _error("fine-tune", longer + b"\n", 65536).message == "line 1: longer than 8 MiB"
    assert _error("fine-tune", longer).message == "line 1: longer than 8 MiB"  # no final \n


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"],  # stray, cut, surrogate, overlong
    ids=["stray", "truncated", "surrogate", "overlong"],
)
@pytest.mark.parametrize("where", ["content", "ignored_field", "outside_strings"])
def test_invalid_utf8_names_its_line(bad: bytes, where: str) -> None:
    good = _line(CHAT)
    if where == "content":
        line = good.replace(b'"yo"', b'"y' + bad + b'"')
    elif where == "ignored_field":  # msgspec skips unknown fields without decoding them
        line = good[:-1] + b', "note": "' + bad + b'"}'
    else:
        line = good + bad
    data = good + b"\n" + good + b"\n" + line + b"\n"
    error = _error("fine-tune", data)
    assert (error.code, error.message, error.param) == (
        "invalid_jsonl",
        "line 3: not valid UTF-8",
        "file",
    )


def test_utf8_split_across_pieces_is_accepted() -> None:
    line = _line({"messages": [{"role": "assistant", "content": "żółw 🐢"}]}).replace(
        b"\\u017c\\u00f3\\u0142w \\ud83d\\udc22", "żółw 🐢".encode()
    )
    assert "🐢".encode() in line
    assert _validate("fine-tune", line + b"\n", 1) == "application/jsonl"


def test_a_bom_is_refused_with_a_message_saying_so() -> None:
    error = _error("fine-tune", b"\xef\xbb\xbf" + _line(CHAT) + b"\n", 1)
    assert error.message.startswith("line 1: the file starts with a UTF-8 byte order mark")


def test_crlf_line_endings_are_accepted() -> None:
    data = b"\r\n".join([_line(CHAT)] * 3) + b"\r\n"
    assert _validate("fine-tune", data, 1) == "application/jsonl"
    batch = b"\r\n".join(_line(_request(f"r{i}")) for i in range(3)) + b"\r\n"
    assert _validate("batch", batch, 7) == "application/jsonl"


def test_blank_lines_are_skipped_but_counted() -> None:
    data = b"\n" + _line(CHAT) + b"\n  \r\n\t\n" + _line(CHAT) + b"\n\n\n{}\n"
    assert _error("fine-tune", data, 3).message == "line 8: messages is missing"
    assert _validate("fine-tune", data.replace(b"{}", b""), 3) == "application/jsonl"


@pytest.mark.parametrize("data", [b"", b"\n", b"\r\n \n\t"])
@pytest.mark.parametrize("purpose", ["fine-tune", "batch"])
def test_a_file_without_lines_is_refused(purpose: str, data: bytes) -> None:
    error = _error(purpose, data)
    assert error.code == "invalid_jsonl"
    assert "no lines" in error.message


def test_the_last_line_needs_no_newline_and_is_checked() -> None:
    assert _validate("fine-tune", _line(CHAT) + b"\n" + _line(CHAT)) == "application/jsonl"
    assert _error("fine-tune", _line(CHAT) + b"\n{").message == "line 2: not valid JSON"


def test_error_messages_stay_small_whatever_the_input() -> None:
    role = "r" * 100_000
    line = _line({"messages": [{"role": role, "content": "x"}]})
    assert len(_error("fine-tune", line).message) < 200


@pytest.mark.parametrize("purpose", ["fine-tune", "batch"])
def test_feed_after_finish_is_a_bug(purpose: str) -> None:
    validator = validator_for(purpose)
    validator.feed(_line(CHAT if purpose == "fine-tune" else _request()))
    validator.finish()
    with pytest.raises(RuntimeError):
        validator.feed(b"\n")


# --- fine-tune -----------------------------------------------------------------------------

VALID_EXAMPLES = [
    CHAT,
    {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "really"},
            {"role": "user", "content": "hi", "name": "ann"},
            {"role": "assistant", "content": "no", "weight": 0},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "yes", "weight": 1, "refusal": None},
        ]
    },
    {  # tools
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "w", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"t": 3}'},
            {"role": "assistant", "content": "3 degrees"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
        "parallel_tool_calls": False,
    },
    {  # legacy functions
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "function_call": {"name": "w", "arguments": "{}"}},
            {"role": "function", "name": "w", "content": "3"},
            {"role": "assistant", "content": "3 degrees"},
        ],
        "functions": [{"name": "w", "parameters": {}}],
    },
    {  # vision fine-tuning: content parts
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
        ],
        "metadata": {"source": "ignored"},
    },
]


@pytest.mark.parametrize("size", [1, 2, 7, 65536])
def test_valid_fine_tune_files_pass_whatever_the_piece_size(size: int) -> None:
    data = b"\n".join(_line(example) for example in VALID_EXAMPLES) + b"\n"
    assert _validate("fine-tune", data, size) == "application/jsonl"


FINE_TUNE_ERRORS = [
    ([1, 2], "expected `object`, got `array`"),
    ("x", "expected `object`, got `str`"),
    ({}, "messages is missing"),
    ({"messages": {}}, "messages: expected `array`, got `object`"),
    ({"messages": []}, "messages is empty"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages has no assistant message"),
    (
        {"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "x"}]},
        "messages[1].role 'robot' is not a known role",
    ),
    ({"messages": [{"content": "x"}]}, "messages[0].role is missing"),
    ({"messages": [{"role": 3, "content": "x"}]}, "messages[0].role: expected `str`, got `int`"),
    ({"messages": [{"role": "user"}]}, "messages[0].content is missing"),
    (
        {"messages": [{"role": "assistant", "content": None}]},
        "messages[0].content is missing (an assistant message needs content, tool_calls or "
        "function_call)",
    ),
    (
        {"messages": [{"role": "assistant", "content": 5}]},
        "messages[0].content: expected `str | array | null`, got `int`",
    ),
    (
        {"messages": [{"role": "assistant", "content": [{"type": "audio"}]}]},
        "messages[0].content[0].type: invalid value 'audio'",
    ),
    (
        {"messages": [{"role": "assistant", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text is missing",
    ),
    (
        {"messages": [{"role": "assistant", "content": "x", "weight": 2}]},
        "messages[0].weight: invalid enum value 2",
    ),
    (
        {"messages": [{"role": "user", "content": "x", "weight": 1}, CHAT["messages"][1]]},
        "messages[0].weight is only allowed on assistant messages",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x", "function_call": {"name": "f", "arguments": ""}},
                CHAT["messages"][1],
            ]
        },
        "messages[0].function_call is only allowed on assistant messages",
    ),
    (
        {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]},
        "messages[0].tool_calls[0].function is missing",
    ),
    ({"messages": CHAT["messages"], "tools": "x"}, "tools: expected `array | null`, got `str`"),
]


@pytest.mark.parametrize(("example", "what"), FINE_TUNE_ERRORS)
def test_fine_tune_errors_name_the_first_bad_line_and_what_is_wrong(
    example: object, what: str
) -> None:
    data = _line(CHAT) + b"\n\n" + _line(example) + b"\n" + b"{not json\n"
    for size in (1, len(data)):
        error = _error("fine-tune", data, size)
        expected = ("invalid_jsonl", f"line 3: {what}", "file")
        assert (error.code, error.message, error.param) == expected
        assert error.api_error().status == 400


def test_invalid_json_names_its_line() -> None:
    data = _line(CHAT) + b"\n" + _line(CHAT)[:-1] + b"\n"
    assert _error("fine-tune", data).message == "line 2: not valid JSON"


# --- batch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 65536])
def test_valid_batch_files_pass_whatever_the_piece_size(size: int) -> None:
    urls = ["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"]
    data = b"\n".join(_line(_request(f"r{i}", url=url)) for i, url in enumerate(urls))
    assert _validate("batch", data, size) == "application/jsonl"


BATCH_ERRORS = [
    (_request(method="GET"), "method: invalid enum value 'GET'"),
    (_request(url="/v1/images/generations"), "url: invalid enum value '/v1/images/generations'"),
    (_request(body=[1]), "body must be a JSON object"),
    (_request(body="x"), "body must be a JSON object"),
    (_request(custom_id=""), "custom_id is empty"),
    (_request(custom_id=7), "custom_id: expected `str`, got `int`"),
    ({k: v for k, v in _request().items() if k != "body"}, "body is missing"),
    ({k: v for k, v in _request().items() if k != "custom_id"}, "custom_id is missing"),
    (_request(extra=1), "object contains unknown field `extra`"),
    (_request(custom_id="r0"), "custom_id 'r0' is already used on line 1"),
]


@pytest.mark.parametrize(("request_", "what"), BATCH_ERRORS)
def test_batch_errors_name_the_first_bad_line_and_what_is_wrong(
    request_: object, what: str
) -> None:
    data = _line(_request("r0")) + b"\n" + _line(_request("r1")) + b"\n" + _line(request_) + b"\n"
    for size in (1, len(data)):
        error = _error("batch", data, size)
        assert (error.code, error.message) == ("invalid_jsonl", f"line 3: {what}")


def test_duplicate_custom_ids_are_found_far_apart_and_quoted_shortly() -> None:
    long_id = "id-" + "x" * 10_000
    lines = [_line(_request(long_id))] + [_line(_request(f"r{i}")) for i in range(1000)]
    lines.append(_line(_request(long_id)))
    error = _error("batch", b"\n".join(lines), 65536)
    assert error.message.startswith("line 1002: custom_id 'id-xxx")
    assert error.message.endswith("…' is already used on line 1")
    assert len(error.message) < 120


def test_a_batch_file_holds_at_most_the_request_limit() -> None:
    template = b'{"custom_id":"r%d","method":"POST","url":"/v1/embeddings","body":{}}\n'
    data = b"".join(template % i for i in range(MAX_REQUESTS))
    assert _validate("batch", data, 65536) == "application/jsonl"
    error = _error("batch", data + template % MAX_REQUESTS, 65536)
    assert error.message == f"line {MAX_REQUESTS + 1}: more than 50,000 requests in one batch file"


# --- the fast path (whole pieces) and the line path agree ----------------------------------

GOOD = _line(CHAT)
TRICKY_LINES = [
    GOOD,
    GOOD + b" " + GOOD,  # two objects on one line
    b"",  # blank
    b"   ",
    GOOD[:-1],  # an object continued on the next line
    b"}",
    b'{"messages":',
    b"[" + GOOD + b"]",
    b" " + GOOD,
    GOOD + b"\r",
    GOOD.replace(b"yo", b"\xc3\xa9"),  # é
    GOOD.replace(b"yo", b"\xc3"),  # cut character
    _line({"messages": [{"role": "user", "content": "x"}]}),
    _line({"messages": []}),
    b"{}",
]


@pytest.mark.parametrize("seed", range(300))
def test_whole_pieces_and_single_bytes_give_the_same_verdict(seed: int) -> None:
    rng = random.Random(seed)
    # Many lines in a piece take the fast path, so most are good and a few tricky.
    count = rng.choice([rng.randint(1, 6), rng.randint(FAST_MIN_LINES, 3 * FAST_MIN_LINES)])
    lines = [GOOD] * count
    for _ in range(rng.randint(0, 3)):
        lines[rng.randrange(count)] = rng.choice(TRICKY_LINES)
    newline = rng.choice([b"\n", b"\r\n"])
    data = newline.join(lines) + rng.choice([b"", newline])
    verdicts = []
    for size in (None, 1, rng.randint(2, 40)):
        try:
            verdicts.append(_validate("fine-tune", data, size))
        except InvalidFile as exc:
            verdicts.append(exc.message)
    assert verdicts[0] == verdicts[1] == verdicts[2], data


def test_two_objects_on_a_line_beside_a_blank_line_are_refused_in_one_piece() -> None:
    many = (GOOD + b"\n") * FAST_MIN_LINES
    data = many + GOOD + b" " + GOOD + b"\n\n" + many
    assert _error("fine-tune", data).message == f"line {FAST_MIN_LINES + 1}: not valid JSON"
    spanning = many + b'{"a":{}\n,"b":1}\n' + GOOD + b" " + GOOD + b"\n" + many
    assert _error("fine-tune", spanning).message == f"line {FAST_MIN_LINES + 1}: not valid JSON"


def test_many_short_lines_in_one_piece_are_checked_line_by_line_on_doubt() -> None:
    many = (GOOD + b"\n") * (3 * FAST_MIN_LINES)
    robot = _line({"messages": [{"role": "robot", "content": "x"}, CHAT["messages"][1]]})
    error = _error("fine-tune", many + robot + b"\n" + many)
    assert (
        error.message
        == f"line {3 * FAST_MIN_LINES + 1}: messages[0].role 'robot' is not a known role"
    )
    assert _validate("fine-tune", many + many) == "application/jsonl"


def test_a_file_ending_inside_a_character_is_refused() -> None:
    data = GOOD + b"\n" + GOOD.replace(b'"yo"}', b'"yo"} \xe2\x82')
    assert _error("fine-tune", data).message == "line 2: not valid UTF-8"
    assert _error("fine-tune", data + b"\n").message == "line 2: not valid UTF-8"


def test_batch_duplicates_inside_one_piece_and_across_pieces() -> None:
    lines = [_line(_request(f"r{i}")) for i in range(100)]  # more than FAST_MIN_LINES
    dup_inside = b"\n".join([*lines, _line(_request("r5"))]) + b"\n"
    assert (
        _error("batch", dup_inside).message == "line 101: custom_id 'r5' is already used on line 6"
    )
    assert _error("batch", dup_inside, 1000).message.endswith("already used on line 6")


DEEP = b"[" * 1_000_000 + b"]" * 1_000_000


@pytest.mark.parametrize(
    ("purpose", "line"),
    [
        ("fine-tune", GOOD[:-1] + b', "tools": [{"a": ' + DEEP + b"}]}"),
        ("fine-tune", GOOD[:-1] + b', "ignored": ' + DEEP + b"}"),
        ("batch", _line(_request("deep"))[:-2] + b', "x": ' + DEEP + b"}}"),
    ],
    ids=["typed_field", "ignored_field", "batch_body"],
)
def test_deep_nesting_is_an_invalid_line_not_a_crash(purpose: str, line: bytes) -> None:
    goods = [GOOD if purpose == "fine-tune" else _line(_request(f"r{i}")) for i in range(64)]
    assert len(goods) == FAST_MIN_LINES
    data = b"\n".join(goods) + b"\n" + line + b"\n"
    for size in (None, 65536):
        assert (
            _error(purpose, data, size).message == f"line {FAST_MIN_LINES + 1}: nested too deeply"
        )
