"""A periodic task of the mount that fails does not end the mount: the
failure is logged with its traceback in meta/webfs.log and the task runs
again at its next period (issue 14). Driven without a kernel: the daemon's
archive is opened as a mount opens it, and its periodic runner is run in
trio as the mount's nursery runs it."""
from __future__ import annotations

import logging
import os
import sqlite3

import trio

from webfs import daemon
from webfs.mkfs import mkfs
from webfs.mountoptions import MountOptions
from webfs.manifest import MANIFEST_GZ


def test_a_checkpoint_that_fails_once_is_logged_and_runs_again(tmp_path, monkeypatch):
    disks = [str(tmp_path / f"d{i}") for i in range(3)]
    mkfs(disks)
    (tmp_path / "mnt").mkdir()
    d = daemon.Daemon(disks[0], str(tmp_path / "mnt"), MountOptions(), admin_commands={})
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    d.open()
    try:
        manifest = os.path.join(d.store.archive.first_volume.root, MANIFEST_GZ)
        before = os.stat(manifest).st_mtime_ns if os.path.exists(manifest) else None
        snapshot = d.store.catalog.snapshot
        calls = []

        def failing_once():
            calls.append(len(calls))
            if len(calls) == 1:
                raise sqlite3.OperationalError("disk I/O error (made by the test)")
            return snapshot()
        monkeypatch.setattr(d.store.catalog, "snapshot", failing_once)

        async def mount_for_a_while():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(d.run_every, 0.05, d.checkpoint, "checkpoint")
                with trio.fail_after(60):
                    while len(calls) < 3:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        trio.run(mount_for_a_while)
    finally:
        d.close()
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        root.setLevel(level)
    assert os.stat(manifest).st_mtime_ns != before          # a later run wrote it
    with open(os.path.join(disks[0], "meta", "webfs.log")) as f:
        text = f.read()
    assert "checkpoint failed; it runs again in 0.05 s" in text, text
    assert "Traceback" in text and "sqlite3.OperationalError: disk I/O error (made by the test)" in text, text
