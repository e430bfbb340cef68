"""Cache keys and the determinism policy (services/cache/keys.py): what changes a key and what
does not, which requests may be cached, the semantic scope and the question's text."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.cache.keys import IGNORED, cacheable, exact_key, query_text, semantic_scope


def chat(*turns: dict[str, Any], **fields: Any) -> dict[str, Any]:
    messages = list(turns) or [user("How do I reset my password?")]
    return {"model": "gpt", "messages": messages, "temperature": 0, **fields}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def key(body: Any, org: str = "org_1", model: str = "gpt", *, stream: bool = False) -> bytes:
    return exact_key(org, "chat", model, body, stream=stream)


def test_a_key_is_a_sha256_digest_and_deterministic() -> None:
    assert len(key(chat())) == 32
    assert key(chat()) == key(chat())


def test_key_order_whitespace_and_number_spelling_do_not_matter() -> None:
    one = msgspec.json.decode(
        b'{"model":"gpt","temperature":0,"top_p":1,"max_tokens":100,'
        b'"messages":[{"role":"user","content":"hi"}]}'
    )
    other = msgspec.json.decode(
        b'{ "messages" : [ {"content": "hi", "role": "user"} ],\n "max_tokens": 1e2,'
        b' "top_p": 1.0, "temperature": 0.0, "model": "gpt" }'
    )
    assert key(one) == key(other)
    assert key(chat(top_p=0.5)) != key(chat(top_p=0.50000001))


def test_the_text_is_exact() -> None:
    assert key(chat(user("caf\u00e9"))) != key(chat(user("cafe\u0301")))  # not normalised
    assert key(chat(user("hi"))) != key(chat(user("hi ")))
    assert key(chat(user("hi"))) != key(chat(user("Hi")))


@pytest.mark.parametrize("field", sorted(IGNORED["chat"] - {"model", "stream"}))
def test_fields_that_do_not_change_the_answer_are_left_out(field: str) -> None:
    assert key(chat(**{field: {"any": "value"}})) == key(chat())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0.5),
        ("seed", 7),
        ("max_tokens", 10),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("response_format", {"type": "json_object"}),
        ("parallel_tool_calls", False),
        ("fallbacks", ["other"]),
        ("n", 2),
        ("an_unknown_field", True),  # unknown: kept (a miss at worst)
    ],
)
def test_fields_that_may_change_the_answer_are_in_the_key(field: str, value: Any) -> None:
    assert key(chat(**{field: value})) != key(chat())


def test_org_model_stream_and_route_separate_keys() -> None:
    body = chat()
    base = key(body)
    assert key(body, org="org_2") != base
    assert key(body, model="gpt-mini") != base
    assert key(body, stream=True) != base
    assert exact_key("org_1", "responses", "gpt", body, stream=False) != base
    # the model the client named is what counts, not the body's copy
    assert key({**body, "model": "other"}) == base


def test_embeddings_keys() -> None:
    body = {"model": "e", "input": "hello"}
    k = exact_key("o", "embeddings", "e", body, stream=False)
    assert exact_key("o", "embeddings", "e", {**body, "user": "u1"}, stream=False) == k
    assert exact_key("o", "embeddings", "e", {**body, "dimensions": 8}, stream=False) != k
    assert exact_key("o", "embeddings", "e", {**body, "input": ["hello"]}, stream=False) != k


@pytest.mark.parametrize(
    "body", [None, [], [1, 2], "text", 3, 1.5, True, {}, {"messages": "not a list"}]
)
def test_hostile_bodies_are_keyed_without_failing(body: Any) -> None:
    k = key(body)
    assert len(k) == 32 and k == key(body)
    assert query_text("chat", body) is None
    assert len(semantic_scope("o", "chat", "m", body)) == 32
    assert not cacheable("chat", body, explicit=True) or isinstance(body, dict)


def test_a_deeply_nested_body_is_keyed() -> None:
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    body = chat(tools=deep)
    assert key(body) == key(body)
    assert key(body) != key(chat(tools=[deep]))


def test_distinct_values_never_share_an_encoding() -> None:
    keys = {
        key(chat(extra=value))
        for value in [1, "1", True, None, 1.5, [1], {"1": 1}, "true", "null", 0, False, ""]
    }
    assert len(keys) == 12


# --- cacheable --------------------------------------------------------------------------------


def test_greedy_chat_is_cacheable() -> None:
    assert cacheable("chat", chat(), explicit=False)
    assert cacheable("chat", chat(temperature=0.0, n=1, seed=3), explicit=False)
    assert cacheable("responses", {"input": "hi", "temperature": 0}, explicit=False)


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": None},
        {"temperature": 0.2},
        {"temperature": False},  # not a number
        {"temperature": "0"},
        {"n": 2},
        {"n": True},
        {"logprobs": True},
        {"top_logprobs": 3},
        {"web_search_options": {}},
        {"tools": [{"type": "web_search"}]},
        {"tools": ["nonsense"]},
        {"include": ["message.output_text.logprobs"]},
    ],
)
def test_what_is_not_deterministic_needs_the_clients_opt_in(fields: dict[str, Any]) -> None:
    body = {**chat(), **fields}
    assert not cacheable("chat", body, explicit=False)
    assert cacheable("chat", body, explicit=True)


def test_absent_temperature_is_not_zero() -> None:
    body = chat()
    del body["temperature"]
    assert not cacheable("chat", body, explicit=False)
    assert not cacheable("responses", {"input": "hi"}, explicit=False)


def test_embeddings_are_always_cacheable() -> None:
    assert cacheable("embeddings", {"model": "e", "input": "x"}, explicit=False)


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("responses", {"input": "hi", "temperature": 0, "background": True}),
        ("responses", {"input": "hi", "temperature": 0, "conversation": "conv_1"}),
        ("images", {"prompt": "a cat"}),
        ("chat", ["not", "an", "object"]),
    ],
)
def test_some_requests_are_never_cacheable(route: str, body: Any) -> None:
    assert not cacheable(route, body, explicit=True)


# --- semantic scope and the question's text ---------------------------------------------------


def scope(body: Any, org: str = "o", route: str = "chat") -> bytes:
    return semantic_scope(org, route, "gpt", body)


SYSTEM = {"role": "system", "content": "You answer support questions."}


def test_the_scope_leaves_out_the_last_user_text_only() -> None:
    one = chat(SYSTEM, user("How do I reset my password?"))
    other = chat(SYSTEM, user("how can I reset my password"))
    assert scope(one) == scope(other)
    assert scope(one) == scope({**other, "stream": True, "user": "u2"})
    assert scope(one) != scope(one, org="o2")
    assert scope(one) != scope(one, route="responses")
    assert scope(one) != semantic_scope("o", "chat", "gpt-mini", one)


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [{"role": "system", "content": "You are a pirate."}, user("x")]},
        {
            "messages": [
                {"role": "developer", "content": "You answer support questions."},
                user("x"),
            ]
        },
        {"messages": [user("x")]},  # no system prompt at all
        {"messages": [SYSTEM, user("earlier"), {"role": "assistant", "content": "a"}, user("x")]},
        {"messages": [SYSTEM, {"role": "user", "content": "x", "name": "bob"}]},
        {"tools": [{"type": "function", "function": {"name": "lookup"}}]},
        {"response_format": {"type": "json_object"}},
        {"temperature": 0.7},
        {"top_p": 0.5},
        {"seed": 1},
        {"max_tokens": 5},
    ],
)
def test_anything_else_separates_scopes(change: dict[str, Any]) -> None:
    base = chat(SYSTEM, user("x"))
    assert scope({**base, **change}) != scope(base)


def test_the_last_user_turns_position_is_part_of_the_scope() -> None:
    a = chat(SYSTEM, user("q"), {"role": "assistant", "content": "a"})
    b = chat(SYSTEM, user("q"))
    assert scope(a) != scope(b)


def test_query_text_of_chat() -> None:
    assert query_text("chat", chat(SYSTEM, user("first"), user("last"))) == "last"
    assert query_text("chat", chat(user("q"), {"role": "assistant", "content": "a"})) == "q"
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert query_text("chat", chat(user(parts))) == "one\ntwo"


@pytest.mark.parametrize(
    "content",
    [
        [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "x"}},
        ],
        [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}],
        [{"type": "text", "text": 5}],
        [],
        "   ",
        None,
        5,
    ],
)
def test_no_query_text_without_plain_text(content: Any) -> None:
    assert query_text("chat", chat(user(content))) is None


def test_no_query_text_without_a_user_turn() -> None:
    assert query_text("chat", chat(SYSTEM)) is None
    assert query_text("chat", {"messages": None}) is None
    assert query_text("embeddings", {"input": "hello"}) is None


def test_query_text_of_responses() -> None:
    assert query_text("responses", {"input": "What is 2 + 2?"}) == "What is 2 + 2?"
    items = [
        {"role": "user", "content": "earlier"},
        {"type": "message", "role": "assistant", "content": "answer"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now"}]},
        {"type": "function_call_output", "call_id": "c", "output": "42"},
    ]
    assert query_text("responses", {"input": items}) == "now"
    image = {"type": "input_image", "image_url": "https://x/y.png"}
    with_image = [{"role": "user", "content": [{"type": "input_text", "text": "q"}, image]}]
    assert query_text("responses", {"input": with_image}) is None


def test_responses_scopes() -> None:
    one = {"input": "How do I reset my password?", "instructions": "be brief", "temperature": 0}
    other = {**one, "input": "how can I reset my password"}
    assert scope(one, route="responses") == scope(other, route="responses")
    assert scope(one, route="responses") != scope({**one, "instructions": "x"}, route="responses")
    as_items = {**one, "input": [{"role": "user", "content": "How do I reset my password?"}]}
    assert scope(as_items, route="responses") != scope(one, route="responses")
