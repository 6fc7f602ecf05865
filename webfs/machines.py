"""Several machines mounting one archive whose catalog is in PostgreSQL: each
mount's lease, a row of its own in the engine (``MachineLease``).

With an SQLite catalog one process writes the archive (the flock of
``webfs.archive``). With a PostgreSQL catalog the flock is shared by mounts,
and what keeps them apart is here: the table ``mounts`` holds a row per
mounted machine (its machine id, host, pid, a fencing token from the
sequence ``mount_tokens``, its renewal period and when the server last saw
it renewed). A machine is a state directory (``machine_id``): two state
directories on one host are two machines, as the tests have them.

The row is renewed every ``renew`` seconds (``-o machine_renew``), by a
thread of its own from the mount to its release (``keep_renewed``): not by
the daemon's loop, which a loaded host holds up and which has ended while an
unmount waits for work in flight (a parity file, an indexing pass); only a
host that stands still stops renewing. A row not
renewed for ``STALE_RENEWALS`` of its own periods, by the server's clock,
belongs to a machine that died: the next renewal of any other mount deletes
it and reports the machines it took over. Every commit of the catalog
checks, in its own transaction, that this mount's row still has its token
(``fence``), holding the row with FOR SHARE until the commit: a mount whose
row was taken over commits nothing more, and a take-over waits for a commit
in flight. The daemon then goes read-only (``Daemon``).

The tables are made here, in statements of their own, by the first mount
that needs them (an archive made before them gets them at its next mount).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Optional

from . import lockorder
from .errors import ArchiveBusy, WebfsError

ROOT_INODE = 1               # webfs.namespace's root, made by the first mount

log = logging.getLogger(__name__)

DEFAULT_RENEW = 2.0          # seconds between renewals of a mount's row
STALE_RENEWALS = 3           # renewals missed before the row is taken over
MACHINE_ID_FILE = "machine-id"
INODE_BLOCK = 64             # inode numbers a mount takes from the sequence at once
MAX_WAIT_RENEW = 10.0        # a newcomer waits for others' renewals at most this period's worth

MOUNTS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS mounts (machine TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, "
    "token BIGINT NOT NULL, renew DOUBLE PRECISION NOT NULL, started TIMESTAMPTZ NOT NULL DEFAULT now(), "
    "renewed_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE SEQUENCE IF NOT EXISTS mount_tokens",
    # When a stripe last changed: a take-over rewrites the parity of those a
    # dead machine changed in its last moments (its parity waited in memory).
    """CREATE OR REPLACE FUNCTION webfs_stripe_touched() RETURNS trigger AS $$
BEGIN NEW.touched := now(); RETURN NEW; END $$ LANGUAGE plpgsql""",
)
# Columns the stripes table gets for several mounts: the machine whose mount
# fills an open stripe (set by the server from the session's webfs.machine,
# so the SQL that makes stripes stays one), and when it last changed.
STRIPE_COLUMNS = {
    "owner": "TEXT DEFAULT current_setting('webfs.machine', true)",
    "touched": "TIMESTAMPTZ DEFAULT now()",
}
STRIPE_TRIGGER = ("CREATE TRIGGER stripes_touched BEFORE UPDATE OF members, length, disks ON stripes "
                  "FOR EACH ROW EXECUTE FUNCTION webfs_stripe_touched()")
# A mount fills only the open stripes it owns (webfs.parity.layout asks with this).
OWN_STRIPES = " AND owner = current_setting('webfs.machine')"
# How far before a dead machine's last renewal its stripes' parity may have waited in memory.
TAKE_OVER_WINDOW = 30

# A row is stale when the server's clock says it missed STALE_RENEWALS of its periods.
_STALE = f"renewed_at < now() - renew * {STALE_RENEWALS} * interval '1 second'"

# The fence: 1/0, an error that aborts the commit's transaction, when this
# mount's row is gone or has another token. One statement sent in the
# commit's pipeline, not a read waited for: no round trip of its own.
FENCE_SQL = ("SELECT 1 / (SELECT count(*) FROM (SELECT 1 FROM mounts WHERE machine = %s AND token = %s "
             "FOR SHARE) AS held)")


class LeaseLost(WebfsError):
    """This mount's row was taken over by another machine: it may write no more."""


def machine_id(state_dir: str) -> str:
    """This machine's id: kept in its state directory, made at its first mount."""
    path = os.path.join(state_dir, MACHINE_ID_FILE)
    try:
        with open(path) as f:
            found = f.read().strip()
        if found:
            return found
    except FileNotFoundError:
        pass
    os.makedirs(state_dir, exist_ok=True)
    made = uuid.uuid4().hex
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(made + "\n")
    os.replace(tmp, path)
    return made


class MachineLease:
    """This mount's row in ``mounts``, on a connection of its own (renewals
    never wait behind the catalog's transaction)."""

    def __init__(self, engine, machine: str, renew: float = DEFAULT_RENEW):
        self.engine = engine
        self.machine = machine
        self.renew = renew
        self.token: Optional[int] = None
        self.lost = False
        self._conn = None
        # Are other machines' mounts holding rows (as of the last renewal)? Then a
        # new name is checked against theirs as it is made (InodeNumbers.checked).
        self.others_mounted = True
        # Counts the renewals that found others: while it stays the same and
        # none are mounted, no other machine has written since (``alone_since``).
        self.others_seen = 0
        self._renewing = lockorder.lock("machine renewal")     # held by a renewal in flight
        self._taking_over = True                # False from the unmount's last writes on
        self._taken: list[str] = []             # machines taken over, their stripes not yet seen to
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def alone_since(self) -> Optional[int]:
        """A token that stays the same while this mount stays alone, or None
        while others are mounted (webfs.catalog's ``solo``): a second machine,
        once counted, ends the lone mount's knowledge for good."""
        seen = self.others_seen
        return None if self.others_mounted else seen

    def take(self) -> None:
        """Make the row (and the tables, the first time), or ArchiveBusy when
        this machine's row is held by a live mount."""
        self._conn = self.engine.connect().conn
        for statement in MOUNTS_SCHEMA:
            self._conn.execute(statement)
        _make_inode_numbers(self._conn)
        _add_stripe_columns(self._conn)
        host, pid = socket.gethostname(), os.getpid()
        with self._conn.transaction():
            row = self._conn.execute(f"SELECT host, pid, {_STALE} FROM mounts WHERE machine = %s FOR UPDATE",
                                     (self.machine,)).fetchone()
            if row is not None and not row[2] and _alive(row[0], row[1]):
                self._conn.close()
                raise ArchiveBusy(f"the archive is mounted from this machine already ({row[0]}, pid {row[1]}); "
                                  "give its mount point instead, or unmount it first")
            self.token = self._conn.execute(
                "INSERT INTO mounts (machine, host, pid, token, renew) VALUES (%s, %s, %s, nextval('mount_tokens'), %s) "
                "ON CONFLICT (machine) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "token = excluded.token, renew = excluded.renew, started = now(), renewed_at = now() "
                "RETURNING token", (self.machine, host, pid, self.renew)).fetchone()[0]
        # Counted after the commit: of two mounts made at once, the later one
        # sees the earlier's row and waits until it has heard of the later.
        self._count_others()
        if self.others_mounted:
            self._until_others_heard()

    def _until_others_heard(self) -> None:
        """Wait until every other live mount has renewed its row since this
        one's was made: each then knows it is not alone (its renewal counts
        the others, in the transaction that renews), and goes on as it must
        with others mounted (names checked, blocks' rows waited for:
        webfs-internals(7)). This row is renewed meanwhile, so that another
        mount waiting for this one at the same moment goes on too."""
        # A renewal that began after this row was committed sees it.
        since = self._conn.execute("SELECT now()").fetchone()[0]
        deadline = time.monotonic() + STALE_RENEWALS * MAX_WAIT_RENEW
        while time.monotonic() < deadline:
            self.touch()
            waiting = self._conn.execute(
                f"SELECT max(renew) FROM mounts WHERE machine != %s AND NOT ({_STALE}) AND renewed_at <= %s",
                (self.machine, since)).fetchone()[0]
            if waiting is None:
                return
            time.sleep(min(waiting, MAX_WAIT_RENEW) / 8)
        log.warning("other mounts of the archive did not renew their leases within %.0f s; going on",
                    STALE_RENEWALS * MAX_WAIT_RENEW)

    def touch(self) -> bool:
        """Renew this mount's row only (no take-over of others): False when it is gone."""
        return bool(self._conn.execute("UPDATE mounts SET renewed_at = now() WHERE machine = %s AND token = %s",
                                       (self.machine, self.token)).rowcount)

    def _count_others(self) -> None:
        others = self._conn.execute("SELECT 1 FROM mounts WHERE machine != %s LIMIT 1",
                                    (self.machine,)).fetchone() is not None
        if others:
            self.others_seen += 1       # before the flag: a reader between the two sees a new token
        self.others_mounted = others

    @property
    def fence(self) -> tuple[str, tuple]:
        """The statement every commit of the catalog sends before COMMIT."""
        return FENCE_SQL, (self.machine, self.token)

    def renew_once(self) -> list[tuple[str, str, int]]:
        """Renew the row (LeaseLost if it was taken over) and take over the
        rows of machines that stopped renewing theirs: (machine, host, pid) of each."""
        if self.lost:
            raise LeaseLost("this mount's lease was taken over by another machine")
        with self._conn.transaction():
            renewed = self._conn.execute("UPDATE mounts SET renewed_at = now() WHERE machine = %s AND token = %s",
                                         (self.machine, self.token)).rowcount
            if not renewed:
                self.lost = True
                raise LeaseLost("this mount's lease was taken over by another machine (it was not renewed for "
                                f"{STALE_RENEWALS} periods of {self.renew:g} s)")
            gone = self._conn.execute(f"DELETE FROM mounts WHERE machine != %s AND {_STALE} "
                                      "RETURNING machine, host, pid, renewed_at", (self.machine,)).fetchall()
            for machine, host, pid, renewed_at in gone:
                # Its stripes are ours now; those it changed lately get their parity rewritten.
                stripes = self._conn.execute(
                    "UPDATE stripes SET owner = %s, state = CASE WHEN touched >= %s - "
                    f"{TAKE_OVER_WINDOW} * interval '1 second' THEN 'dirty' ELSE state END WHERE owner = %s",
                    (self.machine, renewed_at, machine)).rowcount
                log.warning("the mount of machine %s (%s, pid %d) stopped renewing its lease: taken over, "
                            "with its %d stripe(s)", machine, host, pid, stripes)
            self._count_others()
        return [tuple(r[:3]) for r in gone]

    def keep_renewed(self) -> None:
        """Renew the row every period on a thread of its own until ``release``.
        A renewal that finds the row taken over ends the thread (``lost``)."""
        def renewals() -> None:
            while not self._stop.wait(self.renew):
                try:
                    with self._renewing:
                        if self._taking_over:
                            self._taken += [machine for machine, _, _ in self.renew_once()]
                        elif not self.touch():
                            self.lost = True
                            raise LeaseLost("this mount's lease was taken over by another machine as it unmounted")
                except LeaseLost as exc:
                    log.error("%s: the mount is read-only from now on (unmount it and mount again)", exc)
                except Exception:       # noqa: BLE001 - a server gone a moment: the next period tries again
                    log.warning("cannot renew this mount's lease; trying again in %g s", self.renew, exc_info=True)
                if self.lost:
                    return
        self._thread = threading.Thread(target=renewals, name="machine lease", daemon=True)
        self._thread.start()

    def taken_over(self, last: bool = False) -> list[str]:
        """The machines whose rows the renewals took over since the last call:
        their stripes are this mount's to bring up to date. ``last`` (the
        unmount's last writes): from then on the renewals keep this row only,
        taking over nothing that no one would see to."""
        with self._renewing:
            if last:
                self._taking_over = False
            taken, self._taken = self._taken, []
        return taken

    def others(self) -> list[tuple[str, str, int]]:
        """(machine, host, pid) of the other mounts with a row."""
        return [tuple(r) for r in self._conn.execute(
            "SELECT machine, host, pid FROM mounts WHERE machine != %s ORDER BY started", (self.machine,))]

    def release(self) -> None:
        """Stop renewing and delete the row (unmounted): others need not wait
        for it to go stale."""
        if self._conn is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if not self.lost:
                self._conn.execute("DELETE FROM mounts WHERE machine = %s AND token = %s",
                                   (self.machine, self.token))
        finally:
            self._conn.close()
            self._conn = None


def _make_inode_numbers(conn) -> None:
    """The sequence new inodes are numbered from, made by the first mount
    after every number used so far (freed ones too: a kernel may hold them)
    and the root's (made after this by a new archive's first mount)."""
    import psycopg
    try:
        with conn.transaction():
            top = conn.execute("SELECT GREATEST(COALESCE((SELECT max(id) FROM inodes), 0), COALESCE((SELECT "
                               "CAST(value AS BIGINT) FROM meta WHERE key = 'top_freed_inode'), 0))").fetchone()[0]
            conn.execute(f"CREATE SEQUENCE inode_numbers INCREMENT BY {INODE_BLOCK} START WITH {max(top, ROOT_INODE) + 1}")
    except (psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
        pass                # made already (by another mount, maybe at this moment)


def _add_stripe_columns(conn) -> None:
    """The stripes table's columns for several mounts, added once."""
    import psycopg
    have = {r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns "
                                       "WHERE table_name = 'stripes'")}
    try:
        with conn.transaction():
            for name, kind in STRIPE_COLUMNS.items():
                if name not in have:
                    conn.execute(f"ALTER TABLE stripes ADD COLUMN IF NOT EXISTS {name} {kind}")
            if "touched" not in have:
                conn.execute(STRIPE_TRIGGER)
    except psycopg.errors.DuplicateObject:
        pass                # added by another mount at this moment


class InodeNumbers:
    """New inode numbers for a mount that shares the archive: INODE_BLOCK at a
    time from the sequence, so no two machines give one number and a new
    file costs a round trip only once in INODE_BLOCK. ``checked``: while other
    machines are mounted, a new name is checked against theirs as it is made
    (a round trip each: webfs.namespace.rows.add_name)."""

    def __init__(self, lease: Optional[MachineLease] = None):
        self._next = self._end = 0
        self._lease = lease

    @property
    def checked(self) -> bool:
        return self._lease is None or self._lease.others_mounted

    def take(self, catalog) -> int:
        if self._next >= self._end:
            self._next = catalog.scalar("SELECT nextval('inode_numbers')")
            self._end = self._next + INODE_BLOCK
        self._next += 1
        return self._next - 1


def _alive(host: str, pid: int) -> bool:
    """Is the process that made a row still running? Known only on its own
    host; elsewhere it is taken as alive (the row goes stale if it is not)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def lease_for(catalog, state_dir: str, renew: float) -> Optional[MachineLease]:
    """A mount's lease, taken, its fence put on the catalog's connection
    (None: an SQLite catalog, which the archive's flock alone guards)."""
    if catalog.engine.name != "postgresql":
        return None
    catalog.commit()        # nothing of the catalog's connection in the way of the tables' changes
    lease = MachineLease(catalog.engine, machine_id(state_dir), renew)
    lease.take()
    with catalog.lock:
        catalog.db.session("SELECT set_config('webfs.machine', %s, false)", (lease.machine,))
    catalog.db.fence = lease.fence
    catalog.db.alone = lambda: not lease.others_mounted
    catalog.solo = lease.alone_since
    catalog.inode_numbers = InodeNumbers(lease)
    catalog.own_stripes = OWN_STRIPES
    lease.keep_renewed()
    return lease
