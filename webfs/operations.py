"""The admin operations by name: the one table from which ``webfs CMD`` runs
an operation on an unmounted archive (``commandline.run_operation``) and a mount's
daemon runs it on the live archive (its control socket), so both do the same
work. An operation is ``fn(store, progress, **options) -> admin.Result``
(see ``webfs.admin``); a new one is written in its module and named here.
"""
from __future__ import annotations

from . import admin, indexer, ingest, searching, warcexport, warcimport
from .commands import cooling, rebalance, rebuild_disk, scrub

OPERATIONS: dict[str, admin.Operation] = {
    "status": admin.status,
    "scrub": scrub.scrub,
    "rebuild": rebuild_disk.rebuild,
    "add-disk": rebalance.add_disk,
    "rebalance": rebalance.rebalance,
    "remove-disk": rebalance.remove_disk,
    "cool": cooling.cool,
    "heat": cooling.heat,
    # Imports index what they made when they finish (webfs.indexer).
    "import": indexer.indexed(ingest.import_),
    "import-warc": indexer.indexed(warcimport.import_warc),
    "export-warc": warcexport.export_warc,
    "search": searching.search,
    "reindex": searching.reindex,
}
