"""The webfs command started warm, for the tests.

A command of the suite cost 0.2 s of CPU before it did anything (a fresh
interpreter, click and webfs.cli loaded) and a mount 0.6 s (trio, pyfuse3
and the daemon's modules too); some 1,600 commands a run made that a
third of the suite's CPU (webfs-internals(7), TEST SUITE TIME, FIFTH).
So each test process keeps one process with those modules loaded and
nothing else done (``serve``: no thread, no logging set up, no command
run), and ``run`` has it fork a copy per command. That copy is the
command as a user starts it from its first line on: the console script's
``webfs.entry.run`` with the command's argv, environment, working
directory and standard input, output and error, its exit status as the
interpreter's would be (atexit handlers run, non-daemon threads joined);
only the loading of modules, the same files, is done once.

A command whose environment differs from the warm process's in what is
read as the interpreter starts or modules load (PYTHON*, the locale,
webfs.lockorder's switch) is started cold,
as are the commands tests start with subprocess themselves.
``WEBFS_COLD_COMMANDS=1`` starts every command cold.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Optional

# Read as the interpreter starts (its stdio's encoding too) or as modules
# load: only a warm process started with the same values serves.
IMPORT_TIME_ENV = ("WEBFS_LOCK_ORDER", "LANG", "LC_ALL", "LC_CTYPE")


def _import_time_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in IMPORT_TIME_ENV}


class Warm:
    """This test process's warm process (started at its first command)."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="webfs-warm-")
        self.path = os.path.join(self._dir, "socket")
        self.env = _import_time_env(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import warmstart; "
             "warmstart.serve(sys.argv[2])", os.path.dirname(os.path.abspath(__file__)), self.path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = self.proc.stderr.readline()
        if line != b"ready\n":
            raise RuntimeError(f"the warm webfs process did not start: {line + self.proc.stderr.read()!r}")
        atexit.register(self.close)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)

    def run(self, argv: list[str], env: dict, input: Optional[bytes], timeout: Optional[float],
            cwd: Optional[str]) -> subprocess.CompletedProcess:
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, \
                tempfile.TemporaryFile() as err, socket.socket(socket.AF_UNIX) as sock:
            stdin.write(input or b"")
            stdin.seek(0)
            sock.connect(self.path)
            request = json.dumps({"argv": argv, "env": env, "cwd": cwd or os.getcwd()}).encode()
            socket.send_fds(sock, [len(request).to_bytes(8, "big")], [stdin.fileno(), out.fileno(), err.fileno()])
            sock.sendall(request)
            sock.settimeout(timeout)
            answer = sock.makefile("rb")
            pid = answer.readline()
            if not pid:
                raise RuntimeError(f"the warm webfs process did not start the command {argv!r}")
            pid = int(pid)
            try:
                status = answer.readline()
            except socket.timeout:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(argv, timeout) from None
            if not status:
                raise RuntimeError(f"the warm webfs process lost the command {argv!r}")
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(argv, int(status), out.read(), err.read())


_warm: Optional[Warm] = None
_warm_pid: Optional[int] = None


def run(argv: list[str], env: dict, input: Optional[bytes] = None, timeout: Optional[float] = None,
        cwd: Optional[str] = None, **other) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, ...)`` of the webfs command,
    forked from this process's warm process where it can be."""
    global _warm, _warm_pid
    cold = bool(other) or os.environ.get("WEBFS_COLD_COMMANDS", "") not in ("", "0")
    if not cold:
        if _warm is None or _warm_pid != os.getpid():
            _warm, _warm_pid = Warm(), os.getpid()
        cold = _import_time_env(env) != _warm.env
    if cold:
        return subprocess.run(argv, capture_output=True, input=input, env=env, timeout=timeout, cwd=cwd, **other)
    return _warm.run(argv, env, input, timeout, cwd)


# --- in the warm process ---------------------------------------------------

def serve(path: str) -> None:
    """Load what a command loads, then fork a waiter per request (which forks
    the command and reports its pid and exit status); never returns."""
    import webfs.cli           # noqa: F401  (click, the command line)
    import webfs.entry         # noqa: F401
    import webfs.mountstart    # noqa: F401  (trio, pyfuse3, the daemon)
    assert threading.active_count() == 1, "a thread in the warm process would not be in its forks"
    PR_SET_PDEATHSIG = 1                    # ended with the test process, however it ends
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)        # the waiters reap themselves
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)     # nobody reads that pipe from here on
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _wait_for_command(conn)
        conn.close()


def _wait_for_command(conn: socket.socket) -> None:
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        size = int.from_bytes(head, "big")
        body = b""
        while len(body) < size:
            part = conn.recv(size - len(body))
            if not part:            # its test process went away mid-request
                return
            body += part
        request = json.loads(body)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _command(request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(b"%d\n" % pid)
        _, status = os.waitpid(pid, 0)
        conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
    finally:
        os._exit(0)


def _command(request: dict, fds: list[int]) -> None:
    """The command, in a process of its own from here on; never returns."""
    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        from webfs.entry import run
        run()
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
    finally:
        # What the interpreter does at its end: join the threads, run atexit.
        try:
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
