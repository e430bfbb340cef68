from collections import Counter

from protocol.ids import new_id, random_token


def test_tokens_have_the_length_and_alphabet_asked() -> None:
    for length in (1, 4, 24, 48):
        token = random_token(length)
        assert len(token) == length and token.isalnum() and token.isascii()


def test_ids_are_prefixed_and_distinct() -> None:
    ids = {new_id("req") for _ in range(2000)}
    assert len(ids) == 2000 and all(i.startswith("req_") and len(i) == 28 for i in ids)


def test_characters_are_spread_over_the_alphabet() -> None:
    counts = Counter("".join(random_token(48) for _ in range(500)))
    assert len(counts) == 62
    assert max(counts.values()) < 3 * min(counts.values())
