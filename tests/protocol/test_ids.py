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


def test_ordered_ids_sort_by_time_and_stay_random() -> None:
    from protocol.ids import ordered_id

    ids = [
        ordered_id("txn", t)
        for t in (1_700_000_000_000_000, 1_700_000_000_000_001, 1_800_000_000_000_000)
    ]
    assert ids == sorted(ids)
    assert all(i.startswith("txn_") and len(i) == 4 + 24 for i in ids)
    same = {ordered_id("txn", 5) for _ in range(100)}
    assert len(same) == 100  # the random tail keeps ids made in one microsecond apart


def test_to_positional_numbers_each_name_once() -> None:
    from storage.sql import to_positional

    sql, names = to_positional("SELECT :a, :b, :a, x::text, :c")
    assert sql == "SELECT $1, $2, $1, x::text, $3" and names == ("a", "b", "c")
