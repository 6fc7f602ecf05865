"""The admin commands by name: the one table from which ``webfs CMD`` runs
a command on an unmounted archive (``cli.run_admin_command``) and a mount's
daemon runs it on the live archive (its control socket), so both do the same
work. An admin command is ``fn(archive, progress, **options) -> admin.Result``
with ``archive`` an ``assembly.OpenArchive`` (see ``webfs.admin``); one that
needs only the store is written as ``fn(store, ...)`` and named here through
``on_store``. A new one is written in its module and named here.
"""
from __future__ import annotations

from . import admin, indexer, ingest, recovery, searching, warc, warcexport, warcimport, warcview
from .assembly import OpenArchive
from .commands import cooling, rebalance, rebuild_disk, scrub


def on_store(fn) -> admin.AdminCommand:
    """An admin command made of a function of the store alone."""
    def command(archive: OpenArchive, progress: admin.Progress, **options) -> admin.Result:
        return fn(archive.store, progress, **options)
    command.__doc__ = fn.__doc__
    return command


def disks_changed(fn) -> admin.AdminCommand:
    """``on_store(fn)`` for a command that may change the archive's disks (one
    rebuilt, added or removed): the records (MANIFEST, JOURNAL) are then put
    on the disks the rule names (webfs.recovery.records_where_they_belong)."""
    def command(archive: OpenArchive, progress: admin.Progress, **options) -> admin.Result:
        result = fn(archive.store, progress, **options)
        said = recovery.records_where_they_belong(archive)
        if said:
            result.say(said)
        return result
    command.__doc__ = fn.__doc__
    return command


ADMIN_COMMANDS: dict[str, admin.AdminCommand] = {
    "status": on_store(admin.status),
    "scrub": on_store(scrub.scrub),
    "rebuild": disks_changed(rebuild_disk.rebuild),
    "add-disk": disks_changed(rebalance.add_disk),
    "rebalance": on_store(rebalance.rebalance),
    "remove-disk": disks_changed(rebalance.remove_disk),
    "cool": on_store(cooling.cool),
    "heat": on_store(cooling.heat),
    # Imports index what they made when they finish (webfs.indexer).
    "import": indexer.indexed(ingest.import_),
    "import-warc": indexer.indexed(warcimport.import_warc),
    "export-warc": warcexport.export_warc,
    "search": on_store(searching.search),
    "reindex": on_store(searching.reindex),
    "file-sizes": warc.file_sizes,        # replay of a collection in a mount: every capture's size at once
    "warc-view": warcview.warc_view,      # ... and its virtual WARC files shown in .webfs/warc
}
