"""The archive's figures: what ``webfs status`` shows, of a mount (asked of
its daemon) or of an unmounted archive. Never waits on a disk: what is
known of each disk's presence is taken as it is (``check_disks`` without
asking).
"""
from __future__ import annotations

from typing import Optional

from . import outages
from .block import HEADER_SIZE
from .signature import ContentKey


def archive_figures(store) -> dict:
    outages.check_disks(store, ask=False)
    cat = store.catalog
    totals = cat.block_totals()
    per_disk = cat.disk_totals()
    disks = []
    for d in store.conf.disks:
        vol = store.archive.volumes.get(d.index)
        free = total = None
        if vol is not None and vol.backend.bounded:
            free, total = vol.backend.free_space()
        blocks, payload = per_disk.get(d.index, (0, 0))
        disks.append({"index": d.index, "uuid": d.uuid, "path": d.path, "weight": d.weight,
                      "domain": d.failure_domain,
                      "state": ("catching up" if d.index in store.catching_up else "present") if vol
                      else "missing",
                      "why": store.archive.missing.get(d.index),
                      "blocks": blocks, "payload_bytes": payload,
                      "free_bytes": free, "total_bytes": total})
    stored_total = totals["stored_bytes"] + HEADER_SIZE * totals["blocks"]
    return {
        "archive": store.conf.uuid, "label": store.conf.label, "depth": store.conf.depth,
        "group_size": store.conf.group_size, "codec": store.conf.codec, "level": store.conf.level,
        "store_mode": store.conf.store_mode, "disks": disks,
        "catalog": _catalog_place(store),
        "catalog_room": cat.room.state(),
        "blocks": totals["blocks"], "references": totals["refs"],
        "logical_bytes": totals["logical_bytes"], "distinct_bytes": totals["distinct_bytes"],
        "payload_bytes": totals["stored_bytes"], "block_bytes": stored_total,
        "dedup_ratio": _ratio(totals["logical_bytes"], totals["distinct_bytes"]),
        "compression_ratio": _ratio(totals["distinct_bytes"], totals["stored_bytes"]),
        "damaged": sorted(str(ContentKey(sig, overflow)) for sig, overflow in store.damaged),
        "protection": store.protection.status(),
    }

def _catalog_place(store) -> str:
    """Where the catalog is: its PostgreSQL URL (never a password: webfs.conf
    holds none), or the SQLite file on the catalog's disk."""
    from .catalogengine import redact
    if store.conf.catalog_url:
        return redact(store.conf.catalog_url)
    return f"sqlite, meta/catalog.db of disk {store.conf.catalog}"


def _ratio(a: int, b: int) -> Optional[float]:
    return round(a / b, 3) if b else None
