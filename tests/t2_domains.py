"""Failure domains on directory disks: webfs.conf's ``domain`` key read and
written, and no parity stripe with two members (blocks or parity file) in one
domain, so every disk of one domain lost at once costs nothing."""
from __future__ import annotations

import shutil

from conftest import make_archive
from t2_parity import documents, fill
from webfs.archive import Archive, Config
from webfs.assembly import open_archive
from webfs.placement import domain_mask


def test_a_stripe_has_one_member_per_domain_and_a_lost_domain_costs_nothing(tmp_path):
    disks = make_archive(tmp_path, disks=5, group_size=4)
    archive = Archive.open(str(disks[0]))
    for d in archive.conf.disks:
        d.domain = {0: "rack-a", 1: "rack-a", 2: "rack-b", 3: "rack-b"}.get(d.index, "")
    archive.save_config()
    text = (disks[3] / "webfs.conf").read_text()
    assert Config.from_ini(text, "webfs.conf").disks[1].domain == "rack-a"
    assert [d.failure_domain for d in Config.from_ini(text, "x").disks] == \
        ["rack-a", "rack-a", "rack-b", "rack-b", "disk 4"]
    assert domain_mask(Config.from_ini(text, "x").disks, 2) == 0b01100

    docs = documents(60, seed=13)
    store = open_archive(str(disks[0]), holder="test")
    try:
        stored = fill(store, docs)
        masks = [m for (m,) in store.catalog.query("SELECT disks FROM stripes")]
    finally:
        store.close()
    assert masks
    for mask in masks:
        assert bin(mask & 0b00011).count("1") <= 1 and bin(mask & 0b01100).count("1") <= 1, bin(mask)

    # rack-b goes (disks 2 and 3, one of them not the catalog's): every document reads back.
    keep = tmp_path / "keep"
    keep.mkdir()
    for d in disks[2:4]:
        shutil.move(str(d), str(keep / d.name))
    store = open_archive(str(disks[0]), holder="test")
    try:
        assert {2, 3} <= set(store.archive.missing)
        for row, doc in stored:
            assert store.read(row) == doc
    finally:
        store.close()
