"""The lock order of the store, checked (webfs.lockorder; conftest checks
this file's tests): threads storing the same documents at once take their
locks in one order, a deliberate inversion of the store's two locks fails,
and a symlink's target is stored outside the catalog lock."""
from __future__ import annotations

import errno
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from webfs.errors import FsError
from webfs.lockorder import LockOrderError
from webfs.namespace import ROOT_INODE, Namespace


def test_threads_storing_the_same_documents_take_the_locks_in_one_order(store, lock_order):
    docs = [b"page %d\n" % (i % 7) * 50 for i in range(60)]
    with ThreadPoolExecutor(6) as pool:
        rows = list(pool.map(lambda d: store.store(d, name=b"/p"), docs))
    store.commit()
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(store.release, rows))
    store.commit()
    assert not lock_order.violations
    assert ("signature", "catalog") in lock_order.edges()


def test_the_catalog_lock_then_a_signature_lock_is_an_inversion(store, lock_order):
    row = store.store(b"a document", name=b"/a")          # signature, then catalog
    with store.catalog.lock:
        with pytest.raises(LockOrderError, match="'catalog' held while taking 'signature'"):
            with store.block_lock(row.sig):
                pass
    assert len(lock_order.violations) == 1
    lock_order.violations.clear()       # seen: the fixture's own check passes


def test_a_symlink_stores_its_target_outside_the_catalog_lock(store, lock_order):
    ns = Namespace(store)
    ns.ensure_root(0, 0)
    file_row = store.store(b"target", name=b"/f")          # signature -> catalog learnt
    link = ns.create(ROOT_INODE, b"l", stat.S_IFLNK | 0o777, 0, 0, 0, b"target")
    assert ns.readlink(link.id) == b"target"
    refs = store.catalog.block_by_id(file_row.id).refs
    # The name is taken: the target stored ahead is given back.
    with pytest.raises(FsError) as caught:
        ns.create(ROOT_INODE, b"l", stat.S_IFLNK | 0o777, 0, 0, 0, b"target")
    assert caught.value.errno == errno.EEXIST
    assert store.catalog.block_by_id(file_row.id).refs == refs
    assert not lock_order.violations
