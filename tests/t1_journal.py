"""The JOURNAL read after a checkpoint, as a pure function: which lines a
reader of MANIFEST + JOURNAL replays (the kills that make such journals are
in t5_crash_points)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from conftest import FAST
from webfs.manifest import checkpoint_line, checkpoint_of, journal_after_checkpoint


def test_journal_after_checkpoint_rules():
    man = checkpoint_line(7) + b"-\t0\t40755\t1.000000000\t/\n"
    assert checkpoint_of(man) == 7
    old = b"+\tx\n" + checkpoint_line(6) + b"<>\t/a\t/b\n" + checkpoint_line(7) + b"-\t/c\n"
    assert journal_after_checkpoint(man, old) == b"-\t/c\n"
    assert journal_after_checkpoint(man, checkpoint_line(7) + b"-\t/d\n") == b"-\t/d\n"
    # A marker written again by a later attempt: the last one counts.
    twice = checkpoint_line(7) + b"-\t/x\n" + checkpoint_line(7) + b"-\t/y\n"
    assert journal_after_checkpoint(man, twice) == b"-\t/y\n"
    # Old disks (no numbers) and journals without the marker: replay everything.
    assert journal_after_checkpoint(b"-\t0\t40755\t1.0\t/\n", old) == old
    assert journal_after_checkpoint(man, b"<>\t/a\t/b\n") == b"<>\t/a\t/b\n"


def test_gunzip_tolerant_reads_what_zcat_reads():
    import gzip
    from webfs.manifest import gunzip_tolerant
    lines = b"".join(b"-\t0\t100644\t1.000000000\t/f%d\n" % i for i in range(2000))
    packed = gzip.compress(lines)
    assert gunzip_tolerant(packed) == (lines, None)
    # Members one after another (a hostile or hand-made append): all of them, as zcat.
    assert gunzip_tolerant(packed + gzip.compress(b"x\n")) == (lines + b"x\n", None)
    # Cut short: the lines before the cut, and what was wrong.
    got, why = gunzip_tolerant(packed[:len(packed) // 2])
    assert why == "the gzip stream is cut short" and got and lines.startswith(got)
    # Damaged in the middle, or not gzip at all: said, never raised.
    bad = bytearray(packed)
    bad[len(bad) // 2] ^= 0xff
    got, why = gunzip_tolerant(bytes(bad))
    assert why and lines.startswith(got[:len(got) // 2])
    assert gunzip_tolerant(b"plain text\n")[1].startswith("not a whole gzip stream")
    assert gunzip_tolerant(b"") == (b"", None)


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=12), st.binary(max_size=12)), max_size=6),
       st.integers(1, 3))
@settings(max_examples=300 if not FAST else 75)
def test_attribute_lines_escape_what_needs_it(xattrs, nlink):
    """attribute_lines writes a name or value as it is only where escape_path
    and xattr_field would leave it so (its fast path for most xattrs)."""
    import stat
    from types import SimpleNamespace
    from webfs.manifest import INODE, OWNER, XATTR, attribute_lines, escape_path, xattr_field
    node = SimpleNamespace(uid=1000, gid=100, nlink=nlink, mode=stat.S_IFREG | 0o644, id=42)
    want = (b"#\t%s\t1000\t100\n" % OWNER
            + b"".join(b"#\t%s\t%s\t%s\n" % (XATTR, escape_path(n), xattr_field(v)) for n, v in xattrs)
            + (b"#\t%s\t42\n" % INODE if nlink > 1 else b""))
    assert attribute_lines(node, xattrs) == want
