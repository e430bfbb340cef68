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


def test_ordered_ids_carry_the_time_in_base62() -> None:
    from protocol.ids import _SORTED, ordered_id

    for t in (0, 61, 62**3 - 1, 62**3, 1_763_900_000_123_456, 62**11 - 1):
        head, n = ordered_id("txn", t)[4:15], 0
        for ch in head:
            n = n * 62 + _SORTED.index(ch)
        assert n == t


def test_id_characters_are_handed_out_once_across_refills() -> None:
    ids = [new_id("x") for _ in range(1000)]  # 24,000 characters: several 4 KiB reads
    assert len(set(ids)) == 1000
    tokens = {random_token(5) for _ in range(200)}
    assert all(len(t) == 5 and t.isalnum() for t in tokens)


def test_a_forked_child_does_not_repeat_the_parents_ids() -> None:
    import os

    new_id("x")  # the pool holds characters when the child is forked
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next id and leave at once
        os.write(write, new_id("x").encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert child.startswith("x_") and child != new_id("x")
