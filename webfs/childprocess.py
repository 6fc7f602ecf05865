"""The Python processes of webfs's own that a command starts (import-warc's
reading process, the indexing process): started so that a Ctrl-C at the
terminal is the starting command's alone to act on (it stops at a safe
point, then ends them), from the child's first instruction on.

Ignoring SIGINT in the child's own code comes too late: the child's
interpreter starts and imports webfs (up to a second on a busy machine)
before it gets there, and a Ctrl-C then ends it with a KeyboardInterrupt
traceback. So SIGINT is blocked in the starting thread while the child is
made (a blocked signal stays blocked across fork and exec; a Ctrl-C meant
for the command still reaches its other threads, or waits until the mask
is put back), and the child sets it to be ignored before unblocking it,
which drops one that came meanwhile.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

_FIRST = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
          "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); sys.path.insert(0, sys.argv[1]); ")
_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(main: str, args: list[str], **popen) -> subprocess.Popen:
    """``python -c main`` with webfs importable, ``args`` as sys.argv[2:],
    deaf to SIGINT (see above); ``popen``: subprocess.Popen's arguments."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return subprocess.Popen([sys.executable, "-c", _FIRST + main, _CODE, *args], **popen)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
