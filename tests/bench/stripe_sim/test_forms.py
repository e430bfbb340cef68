"""Stripe's form encoding read back (bench/stripe/forms.py): what the SDK and other clients
send, and hostile bodies refused."""

from __future__ import annotations

import pytest

from bench.stripe.forms import MAX_DEPTH, MAX_FIELDS, FormError, encode_form, parse_form


def test_nested_hashes_lists_booleans_and_blanks() -> None:
    form = parse_form(
        "amount=100&metadata[org]=o1&metadata[empty]=&expand[0]=payment_method"
        "&expand[1]=customer&confirm=true&a[b][c]=v&tags[]=x&tags[]=y&items[0][price]=p"
    )
    assert form == {
        "amount": "100",
        "metadata": {"org": "o1", "empty": ""},
        "expand": ["payment_method", "customer"],
        "confirm": "true",
        "a": {"b": {"c": "v"}},
        "tags": ["x", "y"],
        "items": [{"price": "p"}],
    }


def test_escaped_brackets_and_utf8() -> None:
    assert parse_form("metadata%5Bk%5D=%C3%A9t%C3%A9+x") == {"metadata": {"k": "été x"}}


def test_what_the_sdk_encodes_reads_back() -> None:
    params: dict[str, object] = {
        "amount": 700,
        "confirm": True,
        "off_session": False,
        "metadata": {"a": "1", "b": "two words"},
        "expand": ["payment_method"],
        "created": {"gte": 5},
    }
    assert parse_form(encode_form(params)) == {
        "amount": "700",
        "confirm": "true",
        "off_session": "false",
        "metadata": {"a": "1", "b": "two words"},
        "expand": ["payment_method"],
        "created": {"gte": "5"},
    }


@pytest.mark.parametrize(
    "body",
    [
        "a" + "[x]" * MAX_DEPTH + "=1",  # nested too deep
        "&".join(f"k{i}=v" for i in range(MAX_FIELDS + 1)),  # too many fields
        "x=" + "y" * 300_000,  # too large
        "a=1&a[b]=2",  # a value and a hash
        "a[b]=2&a=1",
        "a=1&a=2",  # repeated
        "list[0]=a&list[2]=b",  # a gap
        "[x]=1",  # no name
        "a[b=1",  # unbalanced
        "a]b[=1",
        "m=%ff",  # not UTF-8
    ],
)
def test_hostile_forms_are_refused(body: str) -> None:
    with pytest.raises(FormError):
        parse_form(body)
