"""KernelCounts, the kernel's lookup counts kept a byte an inode: the same
answers as a plain dict of counts through any run of lookups and forgets,
and memory that stays small where the inodes are dense and goes when they
are forgotten."""
import tracemalloc

from hypothesis import given, settings, strategies as st

from webfs.kernelcounts import RUN, KernelCounts

# Inode numbers in a few runs, near the byte's limit in counts.
inodes = st.one_of(st.integers(1, 3 * RUN), st.integers(2**40, 2**40 + RUN), st.just(2**63 - 1))
steps = st.lists(st.tuples(st.sampled_from(["add", "forget"]), inodes, st.integers(1, 300)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_counts_answer_as_a_dict_of_counts_does(ops):
    counts, model = KernelCounts(), {}
    for op, ino, n in ops:
        if op == "add":
            counts.add(ino, n)
            model[ino] = model.get(ino, 0) + n
        else:
            left = counts.forget(ino, n)
            expected = max(model.get(ino, 0) - n, 0)
            assert left == expected
            if expected:
                model[ino] = expected
            else:
                model.pop(ino, None)
        assert counts.get(ino) == model.get(ino, 0)
        assert len(counts) == len(model)
    assert sorted(counts) == sorted(model)
    for ino in model:
        counts.forget(ino, model[ino])
    assert len(counts) == 0 and not counts._runs and not counts._big     # nothing left behind


def test_dense_inodes_cost_a_few_bytes_each_and_are_given_back():
    """100,000 consecutive inodes known once each (a cp -r the kernel still
    remembers): under 5 bytes an inode, where a dict of ints took about 90;
    all of it freed when the kernel forgets them."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counts = KernelCounts()
        for ino in range(1000, 101_000):
            counts.add(ino)
        held = tracemalloc.get_traced_memory()[0] - before
        assert len(counts) == 100_000
        assert held < 5 * 100_000, held
        for ino in range(1000, 101_000):
            assert counts.forget(ino, 1) == 0
        assert tracemalloc.get_traced_memory()[0] - before < 4096
    finally:
        tracemalloc.stop()
