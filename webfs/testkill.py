"""A test-only kill switch: the daemon kills itself at a named point (and
import-warc's reading process, and the stream commands, at their one point).

Like SnapRAID's ``--test-kill-after-sync``: tests set ``WEBFS_TEST_KILL_AT``
to one of ``POINTS`` (optionally ``POINT:N``, the N-th time it is reached;
default the first), the daemon reads it once when it starts (``arm``), and
``point(name)`` sends it SIGKILL there, leaving the disks exactly as a
crash at that instant would. ``POINT:N:stop`` sends SIGSTOP instead, once:
the process stands still there until the test, having seen it stop
(waitpid with WUNTRACED) and changed the archive beside it, sends SIGCONT,
so an interleaving is made without a race against the clock.
``POINT:N:wait:FIFO`` holds only the thread that reaches it, once: it
opens FIFO (a named pipe the test made) for reading, which the test's open
for writing waits for, and reads it to its end, the test's close. That is
the stop of a point in a mount's daemon (an import run in it), where
SIGSTOP would stop the very mount the test changes the archive through.
Unset (always, outside tests), ``point`` costs one comparison.
"""
from __future__ import annotations

import logging
import os
import signal
from typing import Optional

from . import lockorder

log = logging.getLogger(__name__)

ENV = "WEBFS_TEST_KILL_AT"
POINTS = {
    "commit-after-catalog": "a commit is durable in the catalog; the JOURNAL lines not yet appended",
    "commit-after-journal": "a commit and its JOURNAL lines are on the disks; removals and parity not yet",
    "parity-before-write": "a written-behind parity file is about to be written",
    "parity-after-write": "a written-behind parity file is on its disk; its intent not yet released",
    "parity-full-before-write": "a full stripe's parity file is about to be written by the parity writer",
    "parity-full-after-write": "a full stripe's parity file is on its disk; its intent not yet released",
    "checkpoint-after-marker": "the checkpoint marker is appended to every JOURNAL; no MANIFEST written",
    "checkpoint-after-manifest": "the new MANIFEST is on the first disk; its JOURNAL not yet cut",
    "checkpoint-after-journal": "MANIFEST and JOURNAL are replaced on the first disk; not on the others",
    "unmount-after-loop": "the mount's FUSE loop ended (it is unmounting); its last commit and records' copy not yet",
    "export-after-member": "export-warc wrote a record's gzip member into its OUT.part file",
    "stream-after-token": "webfs stream, or export-warc as a stream, printed a resume token",
    "stream-after-walk": "webfs stream, or export-warc as a stream, found a page's path; its blocks not yet",
    "warc-reader-after-batch": "import-warc's reading process sent a batch of records",
    "index-after-file": "an import's or a mount's indexing process indexed a file (not committed yet)",
    "import-before-refs": "an import is about to take the blocks of a file stored before it, found by its "
                          "inode (a revisit's original, a hard link's first name)",
    "scrub-after-read": "scrub --repair read a block in no stripe; its row not yet read again",
    "import-after-refs": "an import took the blocks of a hard link's first name stored before it; "
                         "the link's name not made yet",
}

_armed: Optional[str] = None
_left = 0
_signal = signal.SIGKILL
_fifo: Optional[str] = None         # POINT:N:wait:FIFO: the pipe the thread waits on, instead of a signal
_lock = lockorder.lock("kill points")


def arm() -> None:
    """Read WEBFS_TEST_KILL_AT once (the daemon calls this when it starts)."""
    global _armed, _left, _signal, _fifo
    text = os.environ.get(ENV, "")
    if not text:
        _armed = None
        return
    name, _, count = text.partition(":")
    count, _, how = count.partition(":")
    how, _, fifo = how.partition(":")
    if name not in POINTS or how not in ("", "stop", "wait") or (how == "wait") != bool(fifo):
        raise ValueError(f"{ENV}={text!r}: no such point; the points are {', '.join(POINTS)} "
                         "(POINT[:N[:stop|:wait:FIFO]])")
    _armed, _left, _fifo = name, int(count or 1), fifo or None
    _signal = signal.SIGSTOP if how == "stop" else signal.SIGKILL
    log.warning("test %s armed at %s (time %d)", how or "kill", name, _left)


def point(name: str) -> None:
    """Die (or stop, or wait) here if armed at this point (test builds only do anything)."""
    global _left, _armed
    if _armed != name:
        return
    with _lock:
        _left -= 1
        if _left > 0:
            return
        if _signal == signal.SIGSTOP or _fifo:
            _armed = None           # stopped once, then the process runs on to its end
    if _fifo:
        log.warning("test wait at %s, on %s", name, _fifo)
        with open(_fifo, "rb") as pipe:     # opened once the test opens it to write; read to its close
            pipe.read()
        return
    log.warning("test %s at %s", "stop" if _signal == signal.SIGSTOP else "kill", name)
    for h in logging.getLogger().handlers:
        try:
            h.flush()
        except Exception:
            pass
    os.kill(os.getpid(), _signal)
