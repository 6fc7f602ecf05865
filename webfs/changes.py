"""What one machine's mount changed, told to the other mounts of the archive
(a PostgreSQL catalog: ``webfs.machines``): ``ChangeLog`` gathers the inodes
and names a transaction changed and sends them with its commit;
``Listener`` hears the other machines' and hands them to the daemon, which
drops them from its namespace memo and the kernel's caches.

PostgreSQL's LISTEN/NOTIFY carries them: a ``pg_notify`` sent in the
commit's pipeline is delivered when (and only if) the transaction commits,
costs no round trip and no table to trim. CockroachDB has no LISTEN: there
a change log polled every half second would take its place
(webfs-internals(7), SEVERAL MOUNTS OF ONE ARCHIVE).

A notice is one line: the sending machine's id, then ``INO`` for an inode
whose attributes or content changed and ``PARENT/HEXNAME`` for a name made,
removed or pointed elsewhere; ``*`` for more than one notice can carry
(8000 bytes): the listener then forgets everything.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

log = logging.getLogger(__name__)

CHANNEL = "webfs_changes"
NOTIFY_SQL = f"SELECT pg_notify('{CHANNEL}', %s)"
# A commit's notice, sent only when another machine holds a lease row: a lone
# mount's would reach nobody but its own listener (a wake-up of it and of the
# server a commit; webfs-internals(7), POSTGRESQL CP, ONE MOUNT). Sent after
# the fence, which holds this mount's lease row FOR SHARE until the commit:
# a newcomer goes on only once this mount has renewed that row since its own
# was made (MachineLease._until_others_heard), and the renewal waits for the
# commit; so a newcomer whose row this statement does not see reads the
# catalog after the commit, and needs no notice of it.
NOTIFY_IF_OTHERS_SQL = NOTIFY_SQL + " WHERE EXISTS (SELECT 1 FROM mounts WHERE machine != %s)"
MOST = 7900                     # bytes of a notice (PostgreSQL takes 8000)
EVERYTHING = "*"
WAKE = 0.5                      # seconds the listener waits for a notice before it looks whether to stop


class ChangeLog:
    """The inodes and names changed since the last commit (kept by the
    namespace memo's changes, under the catalog lock)."""

    def __init__(self, machine: str):
        self.machine = machine
        self.inodes: set[int] = set()
        self.names: set[tuple[int, bytes]] = set()

    def inode(self, ino: int) -> None:
        self.inodes.add(ino)

    def name(self, parent: int, name: bytes) -> None:
        self.names.add((parent, name))

    def notice(self) -> Optional[tuple[str, tuple]]:
        """The statement that tells the others, if any are mounted (None:
        nothing changed), taken: the next commit starts afresh."""
        if not self.inodes and not self.names:
            return None
        words = [self.machine, *map(str, self.inodes), *(f"{p}/{n.hex()}" for p, n in self.names)]
        self.inodes, self.names = set(), set()
        text = " ".join(words)
        if len(text) > MOST:
            text = f"{self.machine} {EVERYTHING}"
        return NOTIFY_IF_OTHERS_SQL, (text, self.machine)


def parse(text: str) -> tuple[str, set[int], set[tuple[int, bytes]], bool]:
    """(machine, inodes, names, everything) of a notice."""
    machine, *words = text.split()
    inodes, names = set(), set()
    for word in words:
        parent, slash, name = word.partition("/")
        if slash:
            names.add((int(parent), bytes.fromhex(name)))
        elif word != EVERYTHING:
            inodes.add(int(word))
    return machine, inodes, names, EVERYTHING in words


class Listener:
    """A thread that listens, on a connection of its own, for the other
    machines' notices and calls ``changed(inodes, names, everything)`` with
    each (never its own machine's)."""

    def __init__(self, engine, machine: str, changed: Callable[[set, set, bool], None]):
        self.machine = machine
        self.changed = changed
        self._conn = engine.connect().conn
        self._conn.execute(f"LISTEN {CHANNEL}")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="change listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                # A timeout, so that close() is heard within it; then whatever
                # else came meanwhile (timeout 0), all handed on at once.
                notices = list(self._conn.notifies(timeout=WAKE, stop_after=1))
                if notices:
                    notices += self._conn.notifies(timeout=0)
                    self._hand_on(notices)
        except Exception as exc:
            if not self._stopping.is_set():
                log.error("no longer hears the other machines' changes (%s): what they change may show "
                          "here only after the kernel's timeouts", exc)

    def _hand_on(self, notices) -> None:
        """The other machines' notices among these, as one change (a call to
        ``changed`` costs the daemon a hand-off to its loop: one per batch)."""
        inodes: set[int] = set()
        names: set[tuple[int, bytes]] = set()
        everything = False
        for notice in notices:
            machine, its_inodes, its_names, its_everything = parse(notice.payload)
            if machine != self.machine:
                inodes |= its_inodes
                names |= its_names
                everything = everything or its_everything
        if inodes or names or everything:
            self.changed(inodes, names, everything)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5 * WAKE)
        self._conn.close()
