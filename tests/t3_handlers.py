"""Operations driven without a kernel (issue 11): the FUSE handlers called
directly on a Namespace over an archive in temporary directories."""
from __future__ import annotations

import os

import pytest


# -- item 2: no request kills the daemon ------------------------------------------

def test_every_handler_turns_any_exception_into_an_errno(store, caplog, monkeypatch):
    """The class, not the instance: whatever a handler raises, pyfuse3 gets a
    FUSEError (EIO for the unexpected) and webfs.log one line with the traceback."""
    import errno

    import pyfuse3
    import trio

    from webfs.fs import Operations
    from webfs.namespace import ROOT_INODE, Namespace

    ns = Namespace(store)
    ns.ensure_root()
    ops = Operations(store, ns)

    def boom(*args, **kwargs):
        raise ZeroDivisionError("planted")
    monkeypatch.setattr(ns, "get", boom)
    monkeypatch.setattr(ns, "lookup", boom)
    monkeypatch.setattr(ns, "find", boom)
    for call in (lambda: ops.getattr(ROOT_INODE), lambda: ops.lookup(ROOT_INODE, b"x"),
                 lambda: ops.opendir(ROOT_INODE, None)):
        caplog.clear()
        with pytest.raises(pyfuse3.FUSEError) as info:
            trio.run(call)
        assert info.value.errno == errno.EIO
        assert any("ZeroDivisionError" in (r.exc_text or "") for r in caplog.records), caplog.text
    # forget has no reply: it logs and returns
    monkeypatch.setattr(ops, "control", None)
    trio.run(ops.forget, [(1 << 60 | 5, 1)])


# -- item 3: .webfs/ is for the user who mounted (and root) -----------------------

def test_webfs_tree_checked_by_uid_not_only_modes(store):
    """The handlers refuse another uid themselves (mode bits alone would not do
    without default_permissions, or after a chmod-happy kernel cache)."""
    import errno

    import pyfuse3
    import trio

    from webfs.fs import CONTROL_DIR, Operations
    from webfs.namespace import ROOT_INODE, Namespace

    ns = Namespace(store)
    ns.ensure_root()
    ops = Operations(store, ns)

    class Ctx:
        uid, gid, pid, umask = 65534, 65534, 1, 0o22
    owner = Ctx()
    owner.uid = os.getuid()
    attrs = trio.run(ops.lookup, ROOT_INODE, CONTROL_DIR, owner)
    for call in (lambda: ops.lookup(ROOT_INODE, CONTROL_DIR, Ctx()),
                 lambda: ops.getattr(attrs.st_ino, Ctx()),
                 lambda: ops.opendir(attrs.st_ino, Ctx()),
                 lambda: ops.open(attrs.st_ino, os.O_RDONLY, Ctx()),
                 lambda: ops.getxattr(attrs.st_ino, b"user.x", Ctx()),
                 lambda: ops.listxattr(attrs.st_ino, Ctx())):
        with pytest.raises(pyfuse3.FUSEError) as info:
            trio.run(call)
        assert info.value.errno == errno.EACCES
    assert attrs.st_mode & 0o077 == 0
