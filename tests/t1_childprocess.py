"""webfs.childprocess: a process of webfs's own is deaf to the terminal's
Ctrl-C from its first instruction, the process that started it is not."""
import os
import signal
import subprocess

from webfs import childprocess


def test_a_ctrl_c_while_the_child_starts_is_dropped_not_a_traceback():
    # The SIGINT is sent as soon as the child exists: its interpreter is still
    # starting, well before any code of its own runs (the window a Ctrl-C of an
    # import-warc hit in CI, while the indexing process imported webfs).
    for _ in range(5):
        child = childprocess.start("import webfs.warcread; print('alive')", [],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.kill(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=60)
        assert (child.returncode, out, err) == (0, b"alive\n", b"")


def test_the_child_ignores_sigint_and_blocks_nothing_the_starter_keeps_its_own():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    child = childprocess.start("print(open('/proc/self/status').read())", [], stdout=subprocess.PIPE)
    status = dict(line.split(":\t", 1) for line in child.communicate(timeout=60)[0].decode().splitlines() if ":\t" in line)
    bit = 1 << (signal.SIGINT - 1)
    assert int(status["SigIgn"], 16) & bit
    assert not int(status["SigBlk"], 16) & bit       # so its own children start as any would
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_webfs_is_importable_and_the_arguments_follow():
    child = childprocess.start("import sys, webfs.signature; print(sys.argv[2:])", ["a b", "-c"],
                               stdout=subprocess.PIPE)
    assert child.communicate(timeout=60)[0] == b"['a b', '-c']\n"
