"""The write buffer of an open file: memory up to a bound, then a spill file;
signatures of pieces computed as data arrives in order."""
from __future__ import annotations

import os

from hypothesis import given, settings, strategies as st

from webfs.openfiles import FileBuffer
from webfs.signature import signature


def test_spills_to_a_file_past_the_bound(tmp_path):
    buf = FileBuffer(str(tmp_path / "spill"), bound=1000, piece=300)
    buf.write(0, b"a" * 600)
    assert buf.mem is not None
    buf.write(600, b"b" * 600)                    # past the bound
    assert buf.mem is None and buf.fd is not None
    assert os.listdir(tmp_path / "spill") == []   # the spill file is unlinked: a crash leaves nothing
    assert buf.read(0, 1200) == b"a" * 600 + b"b" * 600
    assert [buf.piece_sig(i) for i in range(4)] == [
        signature(b"a" * 300), signature(b"a" * 300), signature(b"b" * 300), signature(b"b" * 300)]
    buf.truncate(100)
    assert buf.read(0, 1000) == b"a" * 100 and buf.piece_sig(0) is None
    buf.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.binary(min_size=1, max_size=700)), max_size=20),
       st.sampled_from([10 ** 9, 2000]))
def test_random_writes_match_a_bytearray(tmp_path_factory, writes, bound):
    spill = tmp_path_factory.mktemp("spill")
    buf = FileBuffer(str(spill), bound=bound, piece=512)
    model = bytearray()
    for off, data in writes:
        buf.write(off, data)
        if off > len(model):
            model.extend(bytes(off - len(model)))
        model[off:off + len(data)] = data
    assert buf.size == len(model)
    assert buf.read(0, len(model) + 10) == bytes(model)
    for i in range((len(model) + 511) // 512):
        sig = buf.piece_sig(i)
        assert sig is None or sig == signature(bytes(model[i * 512:(i + 1) * 512]))
    buf.close()
