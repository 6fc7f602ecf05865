"""tests/warmstart.py: a command forked from the warm process answers as
the same command started cold (exit status, stdout, stderr, relative paths
from its working directory, its environment, a failure's traceback-free
message), a test process's death ends its warm process, and a request cut
short ends the waiter forked for it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import warmstart
from conftest import BIN, eventually, wait_dead

WEBFS = str(BIN / "webfs")


def both(argv, cwd, env=None, input=None):
    env = dict(env or os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    warm = warmstart.run([WEBFS, *argv], env=env, input=input, cwd=str(cwd))
    cold = subprocess.run([WEBFS, *argv], env=env, input=input, cwd=str(cwd), capture_output=True)
    return warm, cold


@pytest.mark.parametrize("argv", [["--version"], ["no-such-command"], ["status", "no-such-disk"],
                                  ["mkfs", "--help"]])
def test_a_warm_command_answers_as_a_cold_one(tmp_path, argv):
    warm, cold = both(argv, tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)


def test_relative_paths_and_the_environment_are_the_commands_own(tmp_path):
    for name in ("warm", "cold"):
        (tmp_path / name).mkdir()
    env = dict(os.environ, WEBFS_INDEX="0")
    warm = warmstart.run([WEBFS, "mkfs", "d0", "d1", "d2"], env=env, cwd=str(tmp_path / "warm"))
    cold = subprocess.run([WEBFS, "mkfs", "d0", "d1", "d2"], env=env, cwd=str(tmp_path / "cold"),
                          capture_output=True)
    assert warm.returncode == cold.returncode == 0, warm.stderr
    assert sorted(os.listdir(tmp_path / "warm")) == sorted(os.listdir(tmp_path / "cold")) == ["d0", "d1", "d2"]
    again, again_cold = both(["mkfs", "d0", "d1", "d2"], tmp_path / "warm")
    assert again.returncode == again_cold.returncode != 0
    assert again.stderr == again_cold.stderr


def test_an_environment_read_at_import_starts_the_command_cold(tmp_path, monkeypatch):
    """WEBFS_LOCK_ORDER is read as webfs.lockorder loads: a command given
    another value than the warm process has is not forked from it."""
    warmstart.run([WEBFS, "--version"], env=dict(os.environ))       # the warm process is up
    forked = []
    real = warmstart.Warm.run
    monkeypatch.setattr(warmstart.Warm, "run", lambda self, *a, **kw: forked.append(a) or real(self, *a, **kw))
    flipped = "0" if os.environ.get("WEBFS_LOCK_ORDER", "") not in ("", "0") else "1"
    warmstart.run([WEBFS, "--version"], env=dict(os.environ, WEBFS_LOCK_ORDER=flipped))
    assert forked == []
    warmstart.run([WEBFS, "--version"], env=dict(os.environ))
    assert len(forked) == 1


def test_the_warm_process_ends_with_its_test_process(tmp_path):
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import warmstart; "
            "warmstart.run([sys.argv[2], '--version'], env=dict(os.environ)); "
            "print(warmstart._warm.proc.pid, flush=True); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(warmstart.__file__), WEBFS],
                          capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    wait_dead(int(proc.stdout), "the warm process ending after its test process")


def test_a_request_cut_short_leaves_no_waiter_behind():
    """A test process that dies while it sends a request (its socket closed
    before the whole request came): the waiter forked for it ends, rather
    than reading an empty socket for ever."""
    import socket
    warmstart.run([WEBFS, "--version"], env=dict(os.environ))       # the warm process is up
    warm = warmstart._warm
    before = _children_of(warm.proc.pid)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(warm.path)
        socket.send_fds(sock, [(1000).to_bytes(8, "big")], [0, 1, 2])
        sock.sendall(b'{"argv": ')
        waiters: set[int] = set()
        eventually(lambda: waiters.update(_children_of(warm.proc.pid) - before) or waiters,
                   "the waiter for the request")
    for pid in waiters:
        wait_dead(pid, "the waiter of a request cut short ending", seconds=30)


def _children_of(pid: int) -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out
