"""Names from plain-text records (MANIFEST, JOURNAL) obey the namespace's own
rules whatever the records say (issue 11): a property test over random,
partly hostile journals, and the shared name rule."""
from __future__ import annotations

import stat

from hypothesis import given, settings, strategies as st

from webfs.namespace import NAME_MAX, name_problem
from webfs.commands.records import Entries, _apply, path_problem

PARTS = [b"a", b"b", b"c"] * 6 + [b".", b"..", b"", b"n" * 300, b"x\0y", b"sp ace", b"\xe9"]
paths = st.lists(st.sampled_from(PARTS), min_size=0, max_size=4).map(lambda ps: b"/" + b"/".join(ps))
modes = st.sampled_from([0o100644, 0o40755, 0o120777, 0o10644, 0o644, 0o170000])


def _escape(p: bytes) -> bytes:
    return p.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


lines = st.one_of(
    st.tuples(paths, modes).map(lambda t: b"+\t-\t0\t%o\t1.000000000\t%s" % (t[1], _escape(t[0]))),
    paths.map(lambda p: b"-\t" + _escape(p)),
    st.tuples(st.sampled_from([b">", b"<>"]), paths, paths).map(
        lambda t: t[0] + b"\t" + _escape(t[1]) + b"\t" + _escape(t[2])),
    st.binary(max_size=40),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(lines, max_size=30))
def test_any_journal_leaves_only_valid_names_under_directories(journal):
    entries = Entries()
    problems: list = []
    for n, line in enumerate(journal, 1):
        _apply(entries, line, f"JOURNAL line {n}", problems)
    for path, (_sigs, _size, mode, _mtime, _where) in entries.items():
        assert path_problem(path) is None, path
        parent = path.rpartition(b"/")[0]
        while parent:
            if parent in entries:
                assert stat.S_ISDIR(entries[parent][2]), (parent, path)
            parent = parent.rpartition(b"/")[0]
        if path == b"/":
            assert stat.S_ISDIR(mode)
    for path in entries:
        assert entries.has_below(path) == any(p.startswith(path + b"/") for p in entries)
    for where, what in problems:
        assert where.startswith("JOURNAL line ") and what.endswith("skipped")


def test_the_name_rule():
    assert name_problem(b"ok name \xe9\n") is None
    assert name_problem(b"n" * NAME_MAX) is None
    for bad in (b"", b".", b"..", b"a/b", b"a\0b", b"n" * (NAME_MAX + 1)):
        assert name_problem(bad), bad
    assert path_problem(b"/") is None and path_problem(b"/a/b") is None
    for bad in (b"a", b"/a/", b"//a", b"/a/./b", b"/../x", b"/a/" + b"n" * 256):
        assert path_problem(bad), bad


NUMBERS = st.one_of(st.integers(), st.integers(-2**70, 2**70), st.sampled_from(
    [-99999999999999999999, 99999999999999999999999, 2**63 - 1, 2**63, -2**63, 0]))
FRACTIONS = st.one_of(st.just(""), st.from_regex(r"\A[0-9]{0,30}\Z"), st.text(max_size=5))


@settings(max_examples=500, deadline=None)
@given(NUMBERS, NUMBERS, FRACTIONS)
def test_hostile_sizes_and_mtimes_are_skipped_never_stored_out_of_range(size, secs, frac):
    """A MANIFEST size or mtime past an SQLite INTEGER is a skipped record
    (issue 23 item 3), never an OverflowError at insert time."""
    line = b"+\t-\t%d\t100644\t%d%s\t/f" % (size, secs, (b"." + frac.encode()) if frac else b"")
    entries, problems = Entries(), []
    _apply(entries, line, "MANIFEST line 1", problems)
    if b"/f" in entries:
        _sigs, size_kept, _mode, mtime, _where = entries[b"/f"]
        assert 0 <= size_kept < 2**63 and -2**63 < mtime < 2**63
        assert not problems
    else:
        assert len(problems) == 1 and problems[0][1].endswith("skipped"), problems
