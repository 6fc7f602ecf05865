"""What ``webfs status`` says of parity: stripes, overhead, balance, and the
blocks that missing disks took with them."""
from __future__ import annotations

from ..archive import Archive
from ..catalog import Catalog
from ..signature import ContentKey
from .format import REBUILD_MARKER
from .layout import StripeLayout
from .writebehind import WriteBehind


def parity_status(archive: Archive, catalog: Catalog, layout: StripeLayout,
                  write_behind: WriteBehind) -> dict:
    """What ``webfs status`` shows of parity."""
    stripes, open_, dirty, parity_bytes = catalog.query(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN members < ? THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(CASE WHEN state != 'ok' THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(length), 0) FROM stripes", (layout.width,))[0]
    protected, protected_bytes = catalog.query(
        "SELECT COUNT(*), COALESCE(SUM(stored), 0) FROM blocks WHERE stripe IS NOT NULL")[0]
    unprotected = catalog.scalar("SELECT COUNT(*) FROM blocks WHERE stripe IS NULL")
    stale = catalog.scalar("SELECT COUNT(*) FROM blocks WHERE stripe IN "
                           "(SELECT id FROM stripes WHERE state != 'ok')") if dirty else 0
    per_disk = {d: {"parity_files": n, "parity_bytes": b} for d, n, b in catalog.query(
        "SELECT parity_disk, COUNT(*), COALESCE(SUM(length), 0) FROM stripes GROUP BY parity_disk")}
    missing = sorted(archive.missing)
    lost = lost_blocks(catalog, missing)
    pairs = [n for n in layout.pair_counts().values()]
    return {
        "kind": "parity", "group_size": archive.conf.group_size,
        "stripes": stripes, "open_stripes": open_, "dirty_stripes": dirty,
        "protected_blocks": protected, "unprotected_blocks": unprotected, "stale_blocks": stale,
        "written_behind_blocks": write_behind.blocks,
        "can_protect": bool(unprotected and layout.width >= 1 and len(archive.volumes) >= 2),
        "parity_bytes": parity_bytes,
        "parity_overhead": round(parity_bytes / protected_bytes, 4) if protected_bytes else None,
        "expected_overhead": round(1 / layout.width, 4) if layout.width >= 1 else None,
        "parity_per_disk": per_disk,
        "pair_balance": round(max(pairs) / min(pairs), 3) if pairs and min(pairs) else None,
        "missing_disks": missing,
        "lost_blocks": lost["names"], "lost_count": lost["count"],
        "degraded_count": lost["degraded"], "unguarded_count": lost["unguarded"],
        "rebuilding": sorted(d for d, v in archive.volumes.items()
                             if v.backend.exists(REBUILD_MARKER)),
        "last_scrub": catalog.get_meta("last_scrub"),
    }


def lost_blocks(catalog: Catalog, missing: list[int], most: int = 20) -> dict:
    """Blocks the missing disks took with them: on a missing disk and in no
    stripe, or with their parity or another member of their stripe missing
    too. Also how many can be rebuilt (degraded) and how many present blocks
    lost their parity (unguarded)."""
    if not missing:
        return {"names": [], "count": 0, "degraded": 0, "unguarded": 0}
    marks = ",".join("?" * len(missing))
    gone = (f"b.stripe IS NULL OR s.parity_disk IN ({marks}) OR EXISTS (SELECT 1 FROM blocks o "
            f"WHERE o.stripe = b.stripe AND o.id != b.id AND o.disk IN ({marks}))")
    base = f"FROM blocks b LEFT JOIN stripes s ON s.id = b.stripe WHERE b.disk IN ({marks})"
    rows = catalog.query(f"SELECT b.sig, b.overflow, b.disk {base} AND ({gone}) ORDER BY b.id",
                              (*missing, *missing, *missing))
    on_missing = catalog.scalar(f"SELECT COUNT(*) {base}", missing)
    unguarded = catalog.scalar(
        f"SELECT COUNT(*) FROM blocks b JOIN stripes s ON s.id = b.stripe "
        f"WHERE s.parity_disk IN ({marks}) AND b.disk NOT IN ({marks})", (*missing, *missing))
    return {"names": [f"{ContentKey(s.hex(), o, d)}" for s, o, d in rows[:most]], "count": len(rows),
            "degraded": on_missing - len(rows), "unguarded": unguarded}
