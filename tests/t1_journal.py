"""The JOURNAL read after a checkpoint, as a pure function: which lines a
reader of MANIFEST + JOURNAL replays (the kills that make such journals are
in t5_crash_points)."""
from __future__ import annotations

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
