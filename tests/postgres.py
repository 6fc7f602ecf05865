"""A real PostgreSQL server for the tests of the PostgreSQL catalog: Debian's
``postgresql`` package (``make deps`` installs it), ``initdb`` into a
temporary directory and ``pg_ctl start`` on a Unix socket there only (no TCP
port), run as the ``postgres`` user when the tests run as root (PostgreSQL
refuses to run as root). Local connections are trusted, except for the role
``webfs_pw``, which must give its password (PASSWORD): the tests of
credentials use it. Each test asks for a database of its own (``database``)."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

PASSWORD_ROLE = "webfs_pw"
PASSWORD = "webfs-test-password"
START_TIMEOUT = 60


def pg_bindir() -> Optional[str]:
    """The newest installed server's binaries (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


class Postgres:
    """One PostgreSQL server on a socket in its own temporary directory."""

    def __init__(self):
        self.bindir = pg_bindir()
        if self.bindir is None:
            raise RuntimeError("PostgreSQL is not installed: no initdb (make deps installs "
                               "Debian's postgresql package)")
        # Not under pytest's directory: that is root's alone (mode 700), and the
        # server runs as the postgres user.
        self.dir = Path(tempfile.mkdtemp(prefix="webfs-pg-"))
        self.data = self.dir / "data"
        self.socket_dir = str(self.dir)
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            owner = pwd.getpwnam(self.user)
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.databases = 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=reject", "-E", "UTF8", "--locale=C")
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"local all {PASSWORD_ROLE} scram-sha-256\n" + hba.read_text())
        opts = (f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
                " -c log_lock_waits=on -c deadlock_timeout=200ms")
        self._run("pg_ctl", "start", "-w", "-t", str(START_TIMEOUT), "-D", str(self.data),
                  "-l", str(self.dir / "server.log"), "-o", opts)
        self.psql("postgres", f"CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "stop", "-m", "fast", "-D", str(self.data), check=False)
        keep = os.environ.get("WEBFS_TEST_PG_LOG")
        if keep and (self.dir / "server.log").exists():     # the server's log, kept for a failure's cause
            shutil.copy(self.dir / "server.log", keep)
        shutil.rmtree(self.dir, ignore_errors=True)

    def psql(self, db: str, sql: str) -> str:
        return self._run("psql", "-h", self.socket_dir, "-U", "postgres", "-d", db, "-At",
                         "-v", "ON_ERROR_STOP=1", "-c", sql).stdout

    def new_database(self, template: str = "") -> str:
        """A fresh empty database (or a copy of ``template``); its name."""
        self.databases += 1
        name = f"archive{self.databases}"
        self.psql("postgres", f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        return name

    def url(self, db: str, user: str = "postgres") -> str:
        """The catalog URL of a database on this server (socket directory as a query)."""
        return f"postgresql://{user}@/{db}?host={self.socket_dir}"
