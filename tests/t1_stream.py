"""webfs.stream's reader: one thread per disk, each disk's work in the
stream's order, results handed back in that order, never more than a few
jobs a disk ahead; and its tokens (a stream's and an export's kept apart)."""
from __future__ import annotations

import random
import threading

import pytest

from webfs import stream
from webfs.errors import WebfsError


def test_each_disk_is_read_by_one_thread_in_order_and_results_come_in_order():
    rng = random.Random(4)
    disks = [rng.randrange(3) for _ in range(400)]
    ran: dict[int, list[tuple[str, int]]] = {}
    lock, most_ahead, handed = threading.Lock(), [0], [0]

    def work(disk: int, n: int):
        def run():
            with lock:
                ran.setdefault(disk, []).append((threading.current_thread().name, n))
                most_ahead[0] = max(most_ahead[0], n - handed[0])
            return n
        return run

    got = []
    for result, tag in stream.read_in_order(((d, work(d, n), n) for n, d in enumerate(disks)), 3):
        assert result == tag
        got.append(result)
        with lock:
            handed[0] = len(got)
    assert got == list(range(len(disks)))
    assert sorted(ran) == [0, 1, 2]
    for disk, runs in ran.items():
        assert len({name for name, _ in runs}) == 1                 # one thread a disk
        assert [n for _, n in runs] == sorted(n for _, n in runs)  # in the stream's order
    assert len({runs[0][0] for runs in ran.values()}) == 3         # a thread of its own each
    assert most_ahead[0] <= stream.READ_AHEAD * 3


def test_a_failed_read_is_raised_in_its_turn():
    def boom():
        raise OSError("disk gone")
    jobs = [(0, lambda: 1, "a"), (1, boom, "b"), (0, lambda: 3, "c")]
    it = stream.read_in_order(iter(jobs), 2)
    with pytest.raises(OSError, match="disk gone"):
        list(it)


def test_tokens_of_a_stream_and_of_an_export_are_not_taken_for_each_other():
    plain = stream.Position(10, "ab", 3, "host:x.org")
    export = stream.Position(10, "ab", 3, "", {"collection": "/c", "files": 1, "size": 99})
    assert stream.Position.from_token(plain.token()) == plain
    assert stream.Position.from_token(export.token(), "export-warc") == export
    with pytest.raises(WebfsError, match="a token of export-warc, not of webfs stream"):
        stream.Position.from_token(export.token())
    with pytest.raises(WebfsError, match="a token of webfs stream, not of export-warc"):
        stream.Position.from_token(plain.token(), "export-warc")
    with pytest.raises(WebfsError, match="not a token printed by export-warc"):
        stream.Position.from_token("bm90IGEgdG9rZW4", "export-warc")
