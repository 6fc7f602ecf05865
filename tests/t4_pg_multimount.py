"""Several machines mount one archive whose catalog is in PostgreSQL (a real
server, tests/postgres.py): two state directories and two mount points
stand for two machines, the disks are the same local directories. Each
mount holds a row in the catalog's ``mounts`` table (webfs.machines)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import BIN, REPO, eventually, sh, unmount, webfs
from webfs.control import CONTROL_XATTR

# Seconds between renewals of a mount's row: take-over after 3 s. Not less: under
# a loaded machine's cp -r, 0.3 s periods let a busy mount's row go stale.
RENEW = 1.0


class Machine:
    """One machine's mount of the archive: its own state directory and mount point."""

    def __init__(self, root: Path, name: str, disk: Path):
        self.name = name
        self.disk = disk
        self.state = root / f"state-{name}"
        self.mnt = root / f"mnt-{name}"
        self.mnt.mkdir()
        self.env = dict(os.environ, WEBFS_STATE_DIR=str(self.state))

    def mount(self, renew: float = RENEW) -> None:
        webfs("mount", "-o", f"machine_renew={renew}", self.disk, self.mnt, env=self.env)

    def umount(self) -> None:
        unmount(self.mnt)

    def pid(self) -> int:
        return int(os.getxattr(self.mnt, "user.webfs.pid"))

    def machine(self) -> str:
        """Its machine id (made at its first mount)."""
        return (self.state / "machine-id").read_text().strip()


@pytest.fixture(scope="module")
def crawls(tmp_path_factory) -> Path:
    """Two small crawls (tools/make-corpus): a few hundred files each, no
    document in both; and a flat directory of files of each (flat-a, flat-b)."""
    out = tmp_path_factory.mktemp("crawls") / "crawls"
    subprocess.run([sys.executable, str(REPO / "tools" / "make-corpus"), "--seed", "11", "--pages", "150",
                    "--crawls", "2", str(out)], check=True, capture_output=True)
    for path in (out / "crawl-002").rglob("*"):
        if path.is_file():
            with open(path, "ab") as f:
                f.write(b"<!-- crawl 2 -->")
    # What each machine writes into the one directory both write: its own names.
    for name, crawl in (("a", "crawl-001"), ("b", "crawl-002")):
        flat = out / f"flat-{name}"
        flat.mkdir()
        for n, path in enumerate(sorted(p for p in (out / crawl).rglob("*") if p.is_file())[:120]):
            shutil.copy(path, flat / f"{name}-{n:03d}{path.suffix}")
    return out


@pytest.fixture
def machines(tmp_path, pg_catalog):
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    webfs("mkfs", "--catalog", pg_catalog, *disks)
    pair = [Machine(tmp_path, name, disks[i]) for i, name in enumerate("ab")]
    for m in pair:
        m.mount()
    yield pair
    for m in pair:
        m.umount()


def database(pg_catalog: str) -> str:
    return urllib.parse.urlsplit(pg_catalog).path.strip("/")


def poll(what, deadline: float, step: float = 0.02):
    """``what()`` until it is true, at most ``deadline`` seconds: its last value
    (False while it raises FileNotFoundError: a name another machine made shows
    here once its notice is heard, a moment after its commit)."""
    end = time.monotonic() + deadline
    while True:
        try:
            got = what()
        except FileNotFoundError:   # the other machine's notice not heard yet
            got = False
        if got or time.monotonic() > end:
            return got
        time.sleep(step)


def mounted_machines(postgres, pg_catalog) -> list[str]:
    return postgres.psql(database(pg_catalog), "SELECT host FROM mounts ORDER BY started").split()


def test_two_machines_copy_at_once_and_each_reads_back_both(machines, crawls, postgres, pg_catalog):
    """Each copies a crawl into a directory of its own and, at the same time,
    files of its own into one directory both write."""
    a, b = machines
    assert len(mounted_machines(postgres, pg_catalog)) == 2
    (a.mnt / "both").mkdir()
    assert poll(lambda: (b.mnt / "both").is_dir(), 10.0)
    copies = [subprocess.Popen(["cp", "-r", str(crawls / crawl), str(m.mnt / m.name)])
              for m, crawl in ((a, "crawl-001"), (b, "crawl-002"))]
    copies += [subprocess.Popen(f"cp '{crawls}'/flat-{m.name}/* '{m.mnt}/both/'", shell=True) for m in machines]
    assert [c.wait() for c in copies] == [0] * 4
    for m in machines:
        sh(f"diff -r '{crawls}/crawl-001' '{m.mnt}/a'")
        sh(f"diff -r '{crawls}/crawl-002' '{m.mnt}/b'")
        assert sorted(os.listdir(m.mnt / "both")) == sorted(os.listdir(crawls / "flat-a") + os.listdir(crawls / "flat-b"))
        for name in ("a", "b"):
            sh(f"cd '{crawls}/flat-{name}' && for f in *; do cmp \"$f\" '{m.mnt}/both'/\"$f\"; done")
    for m in machines:
        m.umount()
    assert mounted_machines(postgres, pg_catalog) == []
    assert webfs("fsck", a.disk).returncode == 0


def test_two_machines_storing_the_same_documents_at_once_share_their_blocks(machines, crawls, postgres, pg_catalog):
    """Both copy the same files at the same moment: one block per document,
    counted by both in the database (fsck checks every count), and each
    block's Refs header, written behind each machine's commits under the
    row's lock, says the database's count (before, it could keep one
    machine's older count: fsck exit 4)."""
    a, b = machines
    copies = [subprocess.Popen(["cp", "-r", str(crawls / "flat-a"), str(m.mnt / m.name)]) for m in machines]
    assert [c.wait() for c in copies] == [0, 0]
    for m in machines:
        for name in ("a", "b"):
            sh(f"diff -r '{crawls}/flat-a' '{m.mnt}/{name}'")
    db = database(pg_catalog)
    documents = {p.read_bytes() for p in (crawls / "flat-a").iterdir()}
    assert postgres.psql(db, "SELECT count(*) FROM blocks").split() == [str(len(documents))]
    for m in machines:
        m.umount()
    assert webfs("fsck", a.disk).returncode == 0


def test_a_killed_machine_is_taken_over_and_a_cut_off_one_writes_nothing(machines, postgres, pg_catalog):
    a, b = machines
    db = database(pg_catalog)
    (a.mnt / "from-a").write_bytes(b"a" * 5000)
    os.kill(a.pid(), signal.SIGKILL)
    subprocess.run(["fusermount3", "-uz", str(a.mnt)], check=False)
    shutil.rmtree(a.state)          # the machine is gone for good: a closed file is in the engine already
    # b's renewals find a's row stale (3 periods without renewal) and delete it.
    assert poll(lambda: postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "1", 10.0)
    # ... and, a period later, brings the parity of a's stripes up to date. Cut off before
    # then, b would leave them dirty for whoever took its row (none does here).
    log = a.disk / "meta" / "webfs.log"
    assert poll(lambda: b"took over 1 machine(s)' mounts" in log.read_bytes(), 10.0)
    (b.mnt / "from-b").write_bytes(b"b" * 5000)
    assert (b.mnt / "from-a").read_bytes() == b"a" * 5000
    # b is cut off: its row taken (as another machine would after b stopped renewing).
    postgres.psql(db, "UPDATE mounts SET token = token + 1000")
    with pytest.raises(OSError):
        with open(b.mnt / "after-the-cut", "wb") as f:
            f.write(b"c" * 5000)
            f.flush()
            os.fsync(f.fileno())
    # Both daemons log to the first disk's meta/webfs.log.
    assert poll(lambda: b"read-only from now on" in log.read_bytes(), 10.0)
    b.umount()
    names = postgres.psql(db, "SELECT convert_from(name, 'UTF8') FROM dentries WHERE parent = 1").split()
    assert "from-b" in names and "after-the-cut" not in names
    assert webfs("fsck", a.disk).returncode == 0


def test_the_same_machine_cannot_mount_twice(machines, tmp_path):
    a, _ = machines
    other = tmp_path / "mnt-a2"
    other.mkdir()
    out = webfs("mount", a.disk, other, env=a.env, check=False)
    assert out.returncode != 0 and b"mounted from this machine already" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_an_sqlite_archive_still_refuses_a_second_mount(tmp_path):
    disks = [tmp_path / f"disk{i}" for i in range(3)]
    webfs("mkfs", *disks)
    first, second = tmp_path / "m1", tmp_path / "m2"
    first.mkdir(), second.mkdir()
    webfs("mount", disks[0], first)
    try:
        out = webfs("mount", disks[0], second, env=dict(os.environ, WEBFS_STATE_DIR=str(tmp_path / "s2")),
                    check=False)
        assert out.returncode != 0 and b"in use" in out.stderr
    finally:
        webfs("umount", first)


def test_names_and_contents_made_on_one_show_on_the_other_within_a_second(machines):
    """B has looked the names up (misses the kernel keeps) and read the file
    (pages and attributes the kernel keeps): A's changes reach it anyway."""
    a, b = machines
    (a.mnt / "d").mkdir()
    (a.mnt / "d" / "f").write_bytes(b"first" * 100)
    assert poll(lambda: (b.mnt / "d" / "f").exists(), 10.0)
    delays = []
    for i in range(5):
        name = f"new-{i}"
        assert not (b.mnt / "d" / name).exists() and name not in os.listdir(b.mnt / "d")
        assert (b.mnt / "d" / "f").read_bytes() == (b"first" if i == 0 else b"v%d" % (i - 1)) * 100
        start = time.monotonic()
        (a.mnt / "d" / name).write_bytes(b"x")
        (a.mnt / "d" / "f").write_bytes(b"v%d" % i * 100)          # closed: whole on B
        assert poll(lambda: name in os.listdir(b.mnt / "d") and (b.mnt / "d" / name).exists(), 1.0)
        assert poll(lambda: (b.mnt / "d" / "f").read_bytes() == b"v%d" % i * 100, 1.0)
        delays.append(time.monotonic() - start)
    print(f"a name and a new content made on one machine seen on the other after "
          f"{', '.join(f'{d * 1000:.0f}' for d in delays)} ms")
    os.rename(a.mnt / "d" / "new-0", a.mnt / "d" / "renamed")
    assert poll(lambda: (b.mnt / "d" / "renamed").exists() and not (b.mnt / "d" / "new-0").exists(), 1.0)
    os.unlink(b.mnt / "d" / "renamed")
    assert poll(lambda: not (a.mnt / "d" / "renamed").exists(), 1.0)


def test_changes_in_directories_the_other_never_showed_are_not_told_to_its_kernel(machines, crawls):
    """A copies a crawl into a directory B's kernel never looked up: B's
    listener forgets it in its memo and tells its kernel only of the root
    (its entries for the new directory and the marker, its attributes);
    before, of every name and inode."""
    a, b = machines
    assert not (b.mnt / "marker").exists()      # a miss B's kernel keeps: A's marker must clear it
    sh(f"cp -r '{crawls / 'crawl-001'}' '{a.mnt / 'copy'}'")
    files = int(sh(f"find '{a.mnt / 'copy'}' -type f | wc -l").stdout)
    (a.mnt / "marker").write_bytes(b"last")
    # The notices reach B in A's commit order: once the marker shows, B has handled the copy's.
    assert poll(lambda: (b.mnt / "marker").exists(), 60.0)
    told = json.loads(os.getxattr(b.mnt, "user.webfs.requests")).get("others-invalidated", 0)
    assert files > 100 and told <= 6, (files, told)      # root's entries and attributes
    assert int(sh(f"find '{b.mnt / 'copy'}' -type f | wc -l").stdout) == files


def test_a_transaction_the_server_aborts_for_a_deadlock_is_sent_again(postgres):
    """Two machines' commits lock two rows in opposite orders: PostgreSQL
    aborts one (40P01); its writes are sent again in a new transaction, a new
    row's id as it was given, and both commits hold."""
    from webfs.catalogengine import PostgresEngine
    db = postgres.new_database()
    postgres.psql(db, "CREATE TABLE counts (id INT PRIMARY KEY, n INT); INSERT INTO counts VALUES (1, 0), (2, 0);"
                      "CREATE TABLE blocks (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, n INT)")
    engine = PostgresEngine(postgres.url(db))
    first, second = engine.connect(), engine.connect()
    made = first.execute("INSERT INTO blocks (n) VALUES (?)", (7,)).lastrowid
    for conn, row in ((first, 1), (second, 2)):
        assert conn.execute("UPDATE counts SET n=n+1 WHERE id=?", (row,)).rowcount == 1     # waited for: held
    first.execute("UPDATE counts SET n=n+1 WHERE id=?", (2,))
    second.execute("UPDATE counts SET n=n+1 WHERE id=?", (1,))
    errors = []

    def commit(conn):
        try:
            conn.commit()
        except Exception as exc:        # noqa: BLE001 - reported below
            errors.append(exc)
    other = threading.Thread(target=commit, args=(first,))
    other.start()
    commit(second)
    other.join()
    assert errors == [] and first.replays + second.replays >= 1
    assert postgres.psql(db, "SELECT n FROM counts ORDER BY id").split() == ["2", "2"]
    assert postgres.psql(db, "SELECT id, n FROM blocks").split() == [f"{made}|7"]
    first.close(), second.close()


def test_a_deadlock_met_where_a_row_count_is_asked_is_sent_again_and_counts_the_replay(postgres):
    """The deadlock met at the sync that a statement's row count waits for (a
    name's ON CONFLICT DO NOTHING, say), not at the commit: the transaction is
    sent again on a new connection and the count is the replayed statement's.
    Seen in make test as mkdir's EIO, "the connection is closed": the sync
    was retried on the pipeline of the connection just replaced."""
    from webfs.catalogengine import PostgresEngine
    db = postgres.new_database()
    postgres.psql(db, "CREATE TABLE counts (id INT PRIMARY KEY, n INT); INSERT INTO counts VALUES (1, 0), (2, 0)")
    engine = PostgresEngine(postgres.url(db))
    first, second = engine.connect(), engine.connect()
    for conn, row in ((first, 1), (second, 2)):
        assert conn.execute("UPDATE counts SET n=n+1 WHERE id=?", (row,)).rowcount == 1     # holds its row
    counted, errors = {}, []

    def cross(conn, row):
        try:
            counted[row] = conn.execute("UPDATE counts SET n=n+1 WHERE id=?", (row,)).rowcount
            conn.commit()
        except Exception as exc:        # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=cross, args=args) for args in ((first, 2), (second, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and counted == {1: 1, 2: 1} and first.replays + second.replays >= 1
    assert postgres.psql(db, "SELECT n FROM counts ORDER BY id").split() == ["2", "2"]
    first.close(), second.close()


def test_a_deadlock_at_a_commit_carrying_the_notice_and_the_fence_is_sent_again(postgres):
    """The lock a commit takes last (the fence's FOR SHARE of its lease row)
    closes a cycle with another machine's transaction: PostgreSQL aborts this
    one at its COMMIT (the other waits with a long deadlock_timeout, so the
    victim is known); it is sent again, notice and fence with it, and holds,
    its notice delivered once."""
    import psycopg
    from webfs import changes
    from webfs.catalogengine import PostgresEngine
    db = postgres.new_database()
    postgres.psql(db, "CREATE TABLE counts (id INT PRIMARY KEY, n INT); INSERT INTO counts VALUES (1, 0);"
                      "CREATE TABLE lease (id INT PRIMARY KEY); INSERT INTO lease VALUES (1)")
    engine = PostgresEngine(postgres.url(db))
    listening = psycopg.connect(postgres.url(db), autocommit=True)
    listening.execute(f"LISTEN {changes.CHANNEL}")
    mine = engine.connect()
    mine.fence = ("SELECT 1 / (SELECT count(*) FROM (SELECT 1 FROM lease WHERE id = %s FOR SHARE) AS held)", (1,))
    mine.notice = lambda: (changes.NOTIFY_SQL, ("here 5",))
    assert mine.execute("UPDATE counts SET n=n+1 WHERE id=?", (1,)).rowcount == 1      # holds the row
    other = psycopg.connect(postgres.url(db))
    other.execute("SET deadlock_timeout = '120s'")
    other.execute("SELECT 1 FROM lease WHERE id=1 FOR UPDATE")
    other_pid = other.info.backend_pid
    errors = []

    def other_machine():
        try:
            other.execute("UPDATE counts SET n=n+1 WHERE id=1")         # waits for mine
            other.commit()
        except Exception as exc:        # noqa: BLE001 - reported below
            errors.append(exc)
    thread = threading.Thread(target=other_machine)
    thread.start()
    assert poll(lambda: postgres.psql(db, f"SELECT count(*) FROM pg_locks WHERE pid={other_pid} "
                                          "AND NOT granted").strip() == "1", 60.0)
    mine.commit()
    thread.join(60)
    assert errors == [] and mine.replays == 1
    assert postgres.psql(db, "SELECT n FROM counts").strip() == "2"
    assert [n.payload for n in listening.notifies(timeout=60, stop_after=1)] == ["here 5"]
    assert list(listening.notifies(timeout=0)) == []
    assert mine.execute("SELECT n FROM counts").fetchone() == (2,)     # the connection goes on
    mine.execute("UPDATE counts SET n=n+1 WHERE id=?", (1,))
    mine.commit()
    assert postgres.psql(db, "SELECT n FROM counts").strip() == "3"
    for conn in (mine, other, listening):
        conn.close()


def test_a_connection_whose_pipeline_is_left_out_of_step_is_replaced_with_its_session(postgres):
    """A failed pipeline that libpq cannot leave (a result nobody asked for
    still in it: here a Sync sent behind psycopg's back) fails its own commit
    only (which the server may have made); the connection is replaced, its session settings taken again, and
    the next transactions read their own answers, not "unexpected result
    status: PIPELINE_SYNC"."""
    from webfs.catalogengine import PostgresEngine
    db = postgres.new_database()
    postgres.psql(db, "CREATE TABLE counts (id INT PRIMARY KEY, n INT); INSERT INTO counts VALUES (1, 0)")
    conn = PostgresEngine(postgres.url(db)).connect()
    conn.session("SELECT set_config('webfs.machine', %s, false)", ("m-1",))
    conn.execute("UPDATE counts SET n=n+1 WHERE id=?", (1,))
    conn.conn.pgconn.pipeline_sync()                # a result psycopg does not expect
    with pytest.raises(Exception):
        conn.commit()           # its fate is the server's, as a commit's whose answer was lost
    before = conn.execute("SELECT n FROM counts").fetchone()[0]
    for _ in range(3):
        conn.execute("UPDATE counts SET n=n+1 WHERE id=?", (1,))
        conn.commit()
    assert conn.execute("SELECT n FROM counts").fetchone() == (before + 3,)
    assert conn.execute("SELECT current_setting('webfs.machine')").fetchone() == ("m-1",)
    assert conn.reconnects == 1
    conn.close()


def test_one_name_made_on_both_machines_at_once_is_made_once(machines, postgres, pg_catalog):
    """mkdir, ln -s and open(O_CREAT|O_EXCL) of one name on both at the same
    moment: one wins, the other gets EEXIST (as from a local race), and the
    name is the winner's on both."""
    a, b = machines
    # The first mount learns of the second at a renewal (its names are checked from then on).
    assert others_checked(postgres, pg_catalog)
    makers = {"mkdir": lambda path, m: os.mkdir(path),
              "symlink": lambda path, m: os.symlink(m.name, path),
              "excl": lambda path, m: os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))}
    for round_ in range(4):
        for kind, make in makers.items():
            name = f"{kind}-{round_}"
            start = threading.Barrier(2)
            outcome = {}

            def attempt(m, make=make, name=name, start=start, outcome=outcome):
                start.wait()
                try:
                    make(m.mnt / name, m)
                    outcome[m.name] = "made"
                except OSError as exc:
                    outcome[m.name] = errno.errorcode.get(exc.errno, str(exc.errno))
            threads = [threading.Thread(target=attempt, args=(m,)) for m in machines]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(outcome.values()) == ["EEXIST", "made"], (name, outcome)
            winner = a if outcome["a"] == "made" else b
            if kind == "symlink":
                assert poll(lambda: all(os.readlink(m.mnt / name) == winner.name for m in machines), 10.0)
            else:
                assert all((m.mnt / name).exists() for m in machines)
    (b.mnt / "after").write_bytes(b"still writes")
    assert poll(lambda: (a.mnt / "after").exists() and (a.mnt / "after").read_bytes() == b"still writes", 10.0)
    for m in machines:
        m.umount()
    assert webfs("fsck", a.disk).returncode == 0


# -- races with another machine's names (its commit held by the test) --------------

def others_checked(postgres, pg_catalog) -> bool:
    """Has each mount renewed since the last one came (so each checks its new
    names against the other machines')?"""
    return poll(lambda: postgres.psql(database(pg_catalog), "SELECT count(*) FROM mounts WHERE renewed_at > "
                                      "(SELECT max(started) FROM mounts) + interval '200 ms'").strip() == "2", 10.0, 0.2)


def hold_name(pg_catalog: str, parent: int, name: bytes, mode: int = 0o100644):
    """Another machine's new empty file ``name`` in directory ``parent``, in a
    transaction not yet committed: a mount's statement that meets the name
    waits for it, as for another mount's commit. The connection: commit() it."""
    import psycopg
    conn = psycopg.connect(pg_catalog)
    ino = conn.execute("SELECT nextval('inode_numbers')").fetchone()[0]
    t = time.time_ns()
    conn.execute("INSERT INTO inodes (id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev) "
                 "VALUES (%s, %s, 0, 0, 0, %s, %s, %s, %s, 0)", (ino, mode, 2 if mode & 0o040000 else 1, t, t, t))
    conn.execute("INSERT INTO dentries (parent, name, inode) VALUES (%s, %s, %s)", (parent, name, ino))
    return conn


def someone_waits(postgres, pg_catalog) -> bool:
    """Does a statement on the catalog's database wait for a lock?"""
    return postgres.psql(database(pg_catalog), "SELECT count(*) FROM pg_stat_activity WHERE "
                         "datname = current_database() AND wait_event_type = 'Lock'").strip() not in ("", "0")


def import_meeting_held_name(postgres, pg_catalog, other, src: Path, dest: Path):
    """webfs import of src/ into dest, started while ``other`` (hold_name's
    connection) holds a name it meets; committed once the import waits for
    it: (the process, its stdout, its stderr)."""
    imported = subprocess.Popen([str(BIN / "webfs"), "import", f"{src}/", str(dest)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert poll(lambda: someone_waits(postgres, pg_catalog), 60.0, 0.05)
    finally:
        other.commit()
        other.close()
    out, err = imported.communicate(timeout=120)
    return imported, out, err


def in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    """fn(*args) in a thread of its own: its outcome ('done' or the errno's name) in the dict."""
    outcome = {}

    def run():
        try:
            fn(*args)
            outcome["got"] = "done"
        except OSError as exc:
            outcome["got"] = errno.errorcode.get(exc.errno, str(exc.errno))
    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def unmounted_with_one_problem_repaired(machines, kind: str) -> None:
    """Both machines unmounted: fsck finds exactly one problem, of this kind,
    that --repair mends (exit 1), and is clean after."""
    for m in machines:
        m.umount()
    disk = machines[0].disk
    check = webfs("fsck", disk, check=False)
    problems = [x for x in check.stdout.decode().splitlines() if "[NOT repaired" in x]
    assert check.returncode == 4 and len(problems) == 1 and problems[0].startswith(kind), check.stdout
    assert webfs("fsck", "--repair", disk, check=False).returncode == 1
    assert webfs("fsck", disk).returncode == 0


def test_a_rename_onto_a_name_another_machine_makes_at_once_replaces_it(machines, postgres, pg_catalog):
    """A's rename meets B's new name, not yet committed, as its target: the
    engine waits for B's commit, and the rename then replaces B's file, as if
    B's create came first (before: the name was taken twice, A's commit failed,
    EIO, and the rename was lost)."""
    a, b = machines
    assert others_checked(postgres, pg_catalog)
    (a.mnt / "src").write_bytes(b"renamed" * 100)
    other = hold_name(pg_catalog, 1, b"dst")
    try:
        thread, outcome = in_thread(os.rename, a.mnt / "src", a.mnt / "dst")
        assert poll(lambda: someone_waits(postgres, pg_catalog), 30.0, 0.05)
    finally:
        other.commit()          # (A's mount waits for it: its loop, its renewals)
        other.close()
    thread.join()
    assert outcome["got"] == "done"
    for m in machines:
        assert poll(lambda: (m.mnt / "dst").read_bytes() == b"renamed" * 100 and not (m.mnt / "src").exists(), 10.0)
    assert sorted(os.listdir(a.mnt)) == ["dst"]
    for m in machines:
        m.umount()
    assert postgres.psql(database(pg_catalog), "SELECT count(*) FROM inodes i WHERE id <> 1 AND NOT EXISTS "
                         "(SELECT 1 FROM dentries d WHERE d.inode = i.id)").strip() == "0"
    assert webfs("fsck", a.disk).returncode == 0


def test_an_import_meeting_another_machines_new_name_says_so_and_loses_nothing(machines, postgres, pg_catalog,
                                                                                tmp_path):
    """webfs import into A makes names in bulk; one of them is B's new name,
    not yet committed: the import waits for B's commit, leaves B's file alone,
    reports that name as a problem (exit 4) and imports the rest; no inode is
    left without a name (before: the import said all was imported and kept a
    nameless inode)."""
    a, b = machines
    assert others_checked(postgres, pg_catalog)
    # Each mount's own control socket (before: one per archive, the last mount's,
    # so A's import ran in B's daemon, which may not have had A's "crawl" yet).
    assert os.getxattr(a.mnt, CONTROL_XATTR) != os.getxattr(b.mnt, CONTROL_XATTR)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for n in range(5):
        (src / f"f{n}.html").write_bytes(b"page %d " % n * 200)
    (src / "sub" / "inner.html").write_bytes(b"inner" * 100)
    (a.mnt / "crawl").mkdir()
    crawl = os.stat(a.mnt / "crawl").st_ino
    # B names f2.html in a directory it can see: A's "crawl" committed (a
    # directory no other machine sees yet is one A names in without asking).
    assert poll(lambda: (b.mnt / "crawl").is_dir(), 10.0)
    imported, out, err = import_meeting_held_name(postgres, pg_catalog, hold_name(pg_catalog, crawl, b"f2.html"),
                                                  src, a.mnt / "crawl")
    assert imported.returncode == 4, (out, err)
    assert b"f2.html" in out and b"another machine made this name at the same moment" in out, out
    for m in machines:
        assert poll(lambda: sorted(os.listdir(m.mnt / "crawl")) == sorted(os.listdir(src)), 10.0)
        assert (m.mnt / "crawl" / "f2.html").read_bytes() == b""          # B's file, left alone
        assert (m.mnt / "crawl" / "f3.html").read_bytes() == b"page 3 " * 200
        assert (m.mnt / "crawl" / "sub" / "inner.html").read_bytes() == b"inner" * 100
    for m in machines:
        m.umount()
    assert postgres.psql(database(pg_catalog), "SELECT count(*) FROM inodes i WHERE id <> 1 AND NOT EXISTS "
                         "(SELECT 1 FROM dentries d WHERE d.inode = i.id)").strip() == "0"
    assert webfs("fsck", a.disk).returncode == 0


def test_an_import_whose_new_destination_another_machine_makes_at_once_merges_into_it(machines, postgres,
                                                                                     pg_catalog, tmp_path):
    """DEST is missing; B makes it (not yet committed) as A's import makes it:
    the import waits for B's commit and imports into B's directory, as
    mkdir -p would (before: a bare "File exists", exit 1, nothing imported)."""
    a, b = machines
    assert others_checked(postgres, pg_catalog)
    src = tmp_path / "src"
    src.mkdir()
    (src / "page.html").write_bytes(b"a page" * 100)
    imported, out, err = import_meeting_held_name(postgres, pg_catalog, hold_name(pg_catalog, 1, b"dest", 0o040755),
                                                  src, a.mnt / "dest")
    assert imported.returncode == 0, (out, err)
    for m in machines:
        assert poll(lambda: os.path.exists(m.mnt / "dest" / "page.html"), 10.0)
        assert (m.mnt / "dest" / "page.html").read_bytes() == b"a page" * 100


def test_a_block_another_machine_releases_as_this_one_adds_a_reference_is_stored_anew(machines, postgres,
                                                                                       pg_catalog):
    """B unlinks the one file that holds a document (its last reference: the
    block's row deleted, not yet committed) while A writes the same document:
    A's new reference waits for B's commit, finds the row gone, and A stores
    the document anew, under another overflow number than the file B then
    removes (before: A's file pointed at the gone block, EIO)."""
    import psycopg
    a, b = machines
    assert others_checked(postgres, pg_catalog)
    db = database(pg_catalog)
    doc = b"one document, two machines " * 300
    (b.mnt / "b-copy").write_bytes(doc)
    assert poll(lambda: postgres.psql(db, "SELECT count(*) FROM blocks").strip() == "1", 10.0)
    block, sig, disk = postgres.psql(db, "SELECT id, encode(sig, 'hex'), disk FROM blocks").strip().split("|")
    ino = os.stat(b.mnt / "b-copy").st_ino
    other = psycopg.connect(pg_catalog)          # B's unlink of the name, as its commit will send it
    for sql in ("DELETE FROM dentries WHERE inode = %(ino)s", "DELETE FROM contents WHERE inode = %(ino)s",
                "DELETE FROM inodes WHERE id = %(ino)s", "UPDATE blocks SET refs = refs - 1 WHERE id = %(block)s",
                "DELETE FROM blocks WHERE id = %(block)s AND refs <= 0"):
        other.execute(sql, {"ino": ino, "block": int(block)})
    try:
        thread, outcome = in_thread((a.mnt / "a-copy").write_bytes, doc)
        assert poll(lambda: someone_waits(postgres, pg_catalog), 30.0, 0.05)
    finally:
        other.commit()
        other.close()
    (a.disk.parent / f"disk{disk}" / "blocks" / sig[:2] / sig[2:4] / sig[4:]).unlink()     # B's removal
    thread.join()
    assert outcome["got"] == "done"
    for m in machines:
        assert poll(lambda: (m.mnt / "a-copy").read_bytes() == doc, 10.0)
    assert postgres.psql(db, "SELECT overflow, refs FROM blocks").split() == ["1|1"]
    # The one thing the stand-in for B leaves undone, the gone block's stripe's
    # parity, is marked out of date by the catalog's trigger: the unmounts
    # write it (as every stripe whose parity is out of date), and fsck is clean.
    for m in machines:
        m.umount()
    assert webfs("fsck", a.disk).returncode == 0


def test_a_failed_commit_leaves_its_new_block_files_while_other_machines_are_mounted(machines, postgres, pg_catalog):
    """A's commit fails (its lease taken): the new block it wrote stays on its
    disk, since B may be storing the same document under that name at that
    moment; fsck calls it an orphan and --repair removes it (before: removed
    at once, which could take B's block)."""
    from webfs.signature import signature
    a, b = machines
    assert others_checked(postgres, pg_catalog)
    doc = b"written on a machine cut off " * 200
    sig = signature(doc)
    import psycopg
    machine = (a.state / "machine-id").read_text().strip()
    # A renews its lease once an hour here: a renewal after the token's change
    # and before the commit would turn the mount read-only first, and nothing
    # would be stored to be kept.
    a.umount()
    a.mount(renew=3600)
    # The premise: B still holds its row. Were a renewal of B's held up 3 s on
    # a loaded machine, A's first mount could take B's row over, and A, alone,
    # would rightly remove the block: said as such, not as a lost block.
    mounts = postgres.psql(database(pg_catalog), "SELECT count(*) FROM mounts").strip()
    assert mounts == "2", f"B's lease was taken over before the test began ({mounts} row(s))"
    with psycopg.connect(pg_catalog, autocommit=True) as cut:
        with pytest.raises(OSError):
            with open(a.mnt / "lost", "wb") as f:
                f.write(doc)
                f.flush()
                # A's token changed just before its commit, not before the open.
                cut.execute("UPDATE mounts SET token = token + 1000 WHERE machine = %s", (machine,))
                os.fsync(f.fileno())
    kept = [p for p in a.disk.parent.glob(f"disk*/blocks/{sig[:2]}/{sig[2:4]}/{sig[4:]}")]
    assert len(kept) == 1
    unmounted_with_one_problem_repaired(machines, "orphan: ")


def test_files_in_a_fetched_read_ahead_window_changed_elsewhere_are_not_served_stale(machines):
    """A opens the first file of a directory: the read-ahead lookup keeps the
    blocks of the next files for their readers. B then overwrites one, renames
    one and unlinks one: A's change notification drops what it kept of them."""
    a, b = machines
    d = a.mnt / "d"
    d.mkdir()
    for n in range(30):
        (d / f"f{n:02d}").write_bytes(b"old %d " % n * 300)
    a.umount()
    a.mount()
    assert (d / "f00").read_bytes() == b"old 0 " * 300        # the window: f01 .. f29
    bd = b.mnt / "d"
    with open(bd / "f10", "r+b") as f:
        f.write(b"NEW")
    os.rename(bd / "f11", bd / "f11.moved")
    os.unlink(bd / "f12")
    new10 = b"NEW" + (b"old 10 " * 300)[3:]
    assert poll(lambda: (d / "f10").read_bytes() == new10, 10.0)
    assert poll(lambda: not (d / "f12").exists() and not (d / "f11").exists(), 10.0)
    assert (d / "f11.moved").read_bytes() == b"old 11 " * 300
    assert (d / "f13").read_bytes() == b"old 13 " * 300


def test_an_unmount_that_waits_for_work_in_flight_keeps_its_lease(tmp_path, pg_catalog, postgres):
    """A's unmount waits, its loop ended, for work its daemon has in flight (a
    parity file written behind, held on a FIFO here; an indexing pass on a
    loaded machine in CI) longer than three renewal periods: its row is
    renewed meanwhile by a thread of its own, so B does not take it for
    dead, and A's last commit is kept (before: refused, the unmount exited 1)."""
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    webfs("mkfs", "--catalog", pg_catalog, *disks)
    a, b = (Machine(tmp_path, name, disks[i]) for i, name in enumerate("ab"))
    fifo = tmp_path / "point.fifo"
    os.mkfifo(fifo)
    a.env["WEBFS_TEST_KILL_AT"] = f"parity-before-write:1:wait:{fifo}"
    db = database(pg_catalog)
    page = b"<html><body>written last on a</body></html>" * 100
    a.mount()
    b.mount()
    try:
        (a.mnt / "last.html").write_bytes(page)
        held = os.open(fifo, os.O_WRONLY)   # returns once A's parity flush waits at the point
        try:
            umount = subprocess.Popen([str(BIN / "webfs"), "umount", str(a.mnt)], env=a.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            eventually(lambda: not os.path.ismount(a.mnt), "A's FUSE loop ending", every=0.05)
            since = postgres.psql(db, "SELECT now()").strip()
            # B renews every period; a renewal 4 periods on would find A's row stale, were it not renewed.
            eventually(lambda: postgres.psql(db, f"SELECT count(*) FROM mounts WHERE machine = '{b.machine()}' "
                                                 f"AND renewed_at > '{since}'::timestamptz + interval '{4 * RENEW} s'"
                                                 ).strip() == "1",
                       "B renewing 4 periods after A's loop ended", every=0.1)
            assert postgres.psql(db, f"SELECT count(*) FROM mounts WHERE machine = '{a.machine()}'").strip() == "1"
        finally:
            os.close(held)                  # A's parity flush goes on, then its unmount
        out, _ = umount.communicate(timeout=120)
        assert umount.returncode == 0, out.decode(errors="replace")
        assert (b.mnt / "last.html").read_bytes() == page
        assert postgres.psql(db, "SELECT machine FROM mounts").split() == [b.machine()]
    finally:
        for m in (a, b):
            if os.path.ismount(m.mnt):
                m.umount()
    assert webfs("fsck", a.disk).returncode == 0
