"""The command line: ``webfs`` and ``mount.webfs``. It translates; the store decides.

Errors raised below (``WebfsError``) become one line on stderr and a
non-zero exit status here, and nowhere else. Wrong arguments are click's
usage errors (exit 2).
"""
from __future__ import annotations

import gc
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Optional

import click

from . import __version__
from . import control
from .admin import human
from .backends import is_url, options as backend_options
from .cli_query import COMMANDS as QUERY_COMMANDS
from .cli_warc import COMMANDS as WARC_COMMANDS
from .commandline import (DiskPath, disk_location, import_target, open_store, options_given, progress_bar,
                          run_admin_command)
from .errors import WebfsError, os_error_text
from .quickimport import import_options
from .settings import DEFAULT_DEPTH, DEFAULT_LEVEL, MAX_DEPTH, MIN_DEPTH, STORE_MODES

if TYPE_CHECKING:
    from .signature import ContentKey

# The store, the admin commands and the daemon are loaded by the commands that
# use them: `webfs --help`, and a command a mount's daemon runs, start in a
# third of the time.

log = logging.getLogger("webfs")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="webfs: %(message)s", stream=sys.stderr)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="webfs")
@click.option("-v", "--verbose", count=True, help="Say more (repeat for debug output).")
@click.option("--take-lease", is_flag=True,
              help="Take over the lease of an S3 disk that another machine's mount left and no "
                   "longer renews (that machine died); a lease still renewed is never taken.")
@click.pass_context
def main(ctx: click.Context, verbose: int, take_lease: bool) -> None:
    """webfs: a filesystem for web archives.

    Every distinct document is stored once, as a block file at a path
    computed from its signature, spread over several disks. Any one disk
    names the archive. See webfs(1) and webfs-format(5).
    """
    _setup_logging(verbose)
    options = environment_options()
    ctx.obj = options.taking_lease() if take_lease else options


# The commands of web archives (webfs.cli_warc) and of query access (webfs.cli_query).
for command in WARC_COMMANDS + QUERY_COMMANDS:
    main.add_command(command)


@main.command()
@click.option("--depth", type=click.IntRange(MIN_DEPTH, MAX_DEPTH), default=DEFAULT_DEPTH,
              show_default=True, help="Depth of the signature tree (directory levels + 1).")
@click.option("--group-size", "group_size", type=click.IntRange(1), default=None,
              help="Parity group size G: G-1 blocks + 1 parity file (default: min(disks, 5)).")
@click.option("--label", default="", help="A name for the archive.")
@click.option("--codec", type=click.Choice(["gzip", "identity"]), default="gzip", show_default=True,
              help="Codec for compressible documents.")
@click.option("--level", type=click.IntRange(1, 9), default=DEFAULT_LEVEL, show_default=True,
              help="gzip compression level.")
@click.option("--store-mode", type=click.Choice(STORE_MODES), default="compare",
              show_default=True, help="Default dedup mode: compare (same signature, size and "
              "SHA-256), regular (same signature and size) or force-new (none).")
@click.option("--force", is_flag=True, help="Make the archive even if a directory is not empty.")
@click.option("--catalog", "catalog_url", default="", metavar="URL",
              help="Keep the catalog in this PostgreSQL database (postgresql://[user@]host[:port]/db, "
              "no password in it) instead of an SQLite file on the first disk.")
@click.argument("disks", nargs=-1, required=True, type=DiskPath(file_okay=False))
def mkfs(depth, group_size, label, codec, level, store_mode, force, catalog_url, disks):
    """Make a new archive on the DISKS (empty directories), each root made
    mode 0700: its blocks and catalog show every file, whatever its mode."""
    from .mkfs import mkfs as make_archive
    conf = make_archive(list(disks), depth=depth, group_size=group_size, label=label,
                        codec=codec, level=level, store_mode=store_mode, force=force,
                        options=options_given(), catalog_url=catalog_url)
    click.echo(f"made archive {conf.uuid} on {len(conf.disks)} disk(s), depth {conf.depth}, "
               f"parity group size {conf.group_size}")
    click.echo("each disk's root is mode 0700 (an S3 disk's: its local state directory): its blocks "
               "and catalog show every file and name, whatever their own modes, so only you read them")
    if len(conf.disks) == 1:
        click.echo(f"webfs: warning: one disk, so no parity: losing {conf.disks[0].path} loses the "
                   "archive; to add parity later, 'webfs add-disk NEWDIR DISK' then "
                   "'webfs scrub --repair DISK'" + ("" if conf.group_size > 1 else
                                                     " (and group_size = 2 in webfs.conf)"), err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def status(as_json, target):
    """Show the disks, blocks, sizes and ratios of an archive. Of an unmounted
    archive, an S3 disk that does not answer within 5 s is shown missing."""
    if control.is_mountpoint(target):
        st = control.call(target, "status", {}).figures
    else:
        from .assembly import open_archive
        from .backends.s3endpoint import PRESENT_SECONDS
        from .figures import archive_figures
        # Never the client's timeouts (20 s and more) for a hung server: asked
        # as long as a mount's presence check waits, it is missing.
        store = open_archive(target, lock=False, wait=PRESENT_SECONDS, options=options_given())
        try:
            st = archive_figures(store)
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    for line in format_status(st):
        click.echo(line)


def format_status(st: dict) -> list[str]:
    lines = [f"archive {st['archive']}" + (f" ({st['label']})" if st["label"] else ""),
             f"  depth {st['depth']}, parity group size {st['group_size']}, "
             f"codec {st['codec']} level {st['level']}, store mode {st['store_mode']}",
             *([f"  catalog: {st['catalog']}"] if "catalog" in st else []),
             *_catalog_room_lines(st.get("catalog_room")),
             f"  {'disk':>4}  {'state':11} {'blocks':>9} {'payload':>11} {'free':>11}  {'domain':21} path"]
    for d in st["disks"]:
        lines.append(f"  {d['index']:>4}  {d['state']:11} {d['blocks']:>9} {human(d['payload_bytes']):>11} "
                     f"{human(d['free_bytes']):>11}  {d.get('domain', ''):21} {d['path']}")
    lines += [f"  blocks {st['blocks']}, references {st['references']}",
              f"  logical {human(st['logical_bytes'])}, distinct {human(st['distinct_bytes'])}, "
              f"stored {human(st['block_bytes'])} (payload {human(st['payload_bytes'])})",
              f"  dedup ratio {st['dedup_ratio'] or '-'}, compression ratio {st['compression_ratio'] or '-'}"]
    return lines + protection_lines(st)


def _catalog_room_lines(room: Optional[dict]) -> list[str]:
    if not room or room["free_bytes"] >= room["refused_below"]:
        return []
    return [f"  NEARLY FULL: the catalog's disk has {human(room['free_bytes'])} free; new names, xattrs "
            f"and file contents are refused (ENOSPC) until it has {human(room['refused_below'])}"]


def protection_lines(st: dict) -> list[str]:
    """What status says about parity: overhead, balance, and what is missing, lost or damaged."""
    p = st.get("protection", {})
    if p.get("kind") != "parity":
        return ["  no parity"]
    lines = [f"  parity: {p['stripes']} stripes ({p['open_stripes']} open, {p['dirty_stripes']} dirty), "
             f"{human(p['parity_bytes'])} = {p['parity_overhead'] or 0:.3f} of the protected payload "
             f"(1/(G-1) = {p['expected_overhead'] or 0:.3f}), pair balance {p['pair_balance'] or '-'}",
             "  parity files: " + ", ".join(f"disk {d} {v['parity_files']} ({human(v['parity_bytes'])})"
                                            for d, v in sorted(p["parity_per_disk"].items()))]
    if p["unprotected_blocks"]:
        lines.append(f"  {p['unprotected_blocks']} block(s) in no parity stripe"
                     + ("; 'webfs scrub --repair' protects them" if p["can_protect"] else ""))
    if p.get("stale_blocks"):
        lines.append(f"  {p['stale_blocks']} block(s) in the {p['dirty_stripes']} stripe(s) whose parity is out of "
                     "date: not protected until it is written ('webfs sync' of a mount, or "
                     "'webfs scrub --repair', tries again; a full disk needs room first)")
    for d in p["missing_disks"]:
        lines.append(f"  MISSING disk {d}: its blocks are read from parity; "
                     f"'webfs rebuild --disk {d} --to NEWDIR' replaces it")
    if p["missing_disks"]:
        lines.append(f"  {p['degraded_count']} block(s) readable only through parity, "
                     f"{p['unguarded_count']} present block(s) without their parity")
    if p["lost_count"]:
        lines.append(f"  LOST: {p['lost_count']} block(s) on missing disks that parity cannot rebuild: "
                     + " ".join(p["lost_blocks"]) + (" ..." if p["lost_count"] > len(p["lost_blocks"]) else ""))
    if st.get("damaged"):
        lines.append(f"  damaged (read through parity): {' '.join(st['damaged'])}")
    for d in p["rebuilding"]:
        lines.append(f"  disk {d}: rebuild not finished; run 'webfs rebuild' again")
    if p["last_scrub"]:
        last = json.loads(p["last_scrub"])
        lines.append(f"  last scrub {last['finished']}: {last['blocks']} blocks, {last['problems']} problem(s), "
                     f"{last['left']} left" + (f": {' '.join(last['damaged'])}" if last["damaged"] else "")
                     + (" (interrupted)" if last["interrupted"] else ""))
    return lines


@main.command()
@click.option("--repair", is_flag=True, help="Fix what can be fixed.")
@click.option("--rebuild-catalog", "rebuild", is_flag=True,
              help="Build a catalog from block headers, parity headers and the MANIFEST and JOURNAL on "
                   "the disks and say what it would change; with --repair put it in place, then check.")
@click.option("--force", is_flag=True,
              help="With --rebuild-catalog --repair: replace a catalog that opens and is this archive's.")
@click.argument("disk", type=DiskPath(exists=True, file_okay=False))
def fsck(repair, rebuild, force, disk):
    """Check an unmounted archive: headers, signatures, references, orphans, parity.

    Without --repair nothing on the disks is written (as e2fsck -n): the
    catalog is checked in a private copy (a rebuilt one is built off the
    disks and compared), and what --repair would mend is said. Exit
    status: 0 clean, 1 problems found and all repaired, 4 problems left,
    8 the check could not run (or --repair would replace a sound catalog
    without --force).
    """
    import sqlite3
    from .commands import fsck as fsckmod
    from .commands.report import EXIT_FAILED, files_hit_lines
    skipped: list = []
    if force and not (rebuild and repair):
        raise click.UsageError("--force goes with --rebuild-catalog --repair")
    on_disk = is_url(disk) or os.path.isfile(os.path.join(disk, "WEBFS-DISK"))
    in_mount = None if on_disk else control.mount_of(disk)
    if in_mount is not None:        # a mount point, or a path in one: not its disk
        click.echo(f"webfs fsck: {disk}: {_mounted_archive(in_mount[0])}", err=True)
        sys.exit(EXIT_FAILED)
    try:
        if rebuild:
            from .commands.rebuild_catalog import RebuildRefused, rebuild_step
            try:
                with progress_bar(None, "reading headers") as bar:
                    status = rebuild_step(disk, repair, force, click.echo, skipped, progress=bar.update,
                                          options=options_given())
            except RebuildRefused as exc:
                click.echo(f"webfs fsck: {exc}", err=True)
                sys.exit(EXIT_FAILED)
            if status is not None:
                for where, what in skipped:
                    click.echo(f"{where}: {what}")
                sys.exit(status)
        store = open_store(disk, "fsck") if repair else fsckmod.open_readonly(disk, options=options_given())
        try:
            with progress_bar(None, "checking") as bar:
                report = fsckmod.check(store, repair=repair, progress=bar.update)
            hit = files_hit_lines(*report.files_hit(store))
        finally:
            store.close()
    except WebfsError as exc:       # a bad catalog, the archive held (a mount, a lease): not run
        click.echo(f"webfs fsck: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    except sqlite3.DatabaseError as exc:    # found in the private copy (read-only check)
        if type(exc) is not sqlite3.DatabaseError:
            raise           # an integrity or operational error is not a damaged file
        from .archive import Archive
        from .catalog import CATALOG_FILE, catalog_path
        try:
            archive = Archive.open(disk, options=options_given())
            where = catalog_path(archive.volumes[archive.conf.catalog].root)
        except (WebfsError, KeyError, OSError):
            where = f"{CATALOG_FILE} of the archive of {disk}"
        click.echo(f"webfs fsck: {where}: not a usable catalog ({exc}); keep a copy of it, then "
                   f"'webfs fsck --rebuild-catalog --repair {disk}' rebuilds it from the disks", err=True)
        sys.exit(EXIT_FAILED)
    for where, what in skipped:
        report.add("record", where, what, fixable=False)
    for f in report.findings:
        click.echo(str(f))
    for line in hit:
        click.echo(line)
    left = sum(not f.repaired for f in report.findings)
    degraded = sum(report.degraded.values())
    click.echo(f"{report.blocks_checked} block files checked, {len(report.findings)} problem(s), "
               f"{len(report.findings) - left} repaired, {left} left"
               + (f"; {degraded} block(s) degraded (read back through parity), none of them lost"
                  if degraded else "")
               + ("; read-only check: nothing was written" if not repair else ""))
    if left and not repair:
        click.echo(f"'webfs fsck --repair {disk}' mends what can be mended")
    sys.exit(report.exit_code)


def _mounted_archive(mnt: str) -> str:
    """Why fsck does not run on the archive mounted at ``mnt``, and what to do."""
    try:
        pid = os.getxattr(mnt, "user.webfs.pid").decode()
        disk = os.getxattr(mnt, "user.webfs.disks").decode().split("\n")[0]
    except OSError:
        pid, disk = "?", "DISK"
    return (f"the archive is in use (webfs mount on {mnt}, pid {pid}); fsck checks an unmounted "
            f"archive's disk: 'webfs umount {mnt}', then 'webfs fsck {disk}'")


@main.command()
@click.option("--repair", is_flag=True, help="Rewrite damaged blocks and parity from redundancy.")
@click.option("--max-rate", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MB/S",
              help="Read at most this many MB per second (leave the disks room for other work).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def scrub(repair, max_rate, as_json, target):
    """Read every block and parity file; check signatures and parity.

    Damaged blocks are rewritten byte for byte from their stripe, wrong
    parity is recomputed (with --repair). Exit status: 0 no damage left,
    4 damage left (or a missing disk), 8 the scrub could not run.
    """
    run_admin_command(target, "scrub", as_json=as_json, repair=repair, max_rate=max_rate)


@main.command()
@click.option("--disk", "index", type=int, required=True, help="Index of the dead disk.")
@click.option("--to", "new_dir", type=DiskPath(file_okay=False), required=True,
              help="Empty directory for the replacement (or one whose rebuild was interrupted).")
@click.option("--max-rate", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MB/S",
              help="Write at most this many MB per second (leave the other disks room).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def rebuild(index, new_dir, max_rate, as_json, target):
    """Rebuild disk N's blocks and parity files from the others into NEWDIR
    (its root made mode 0700).

    Resumable: run it again after an interruption. Exit status: 0 all
    rebuilt, 4 something could not be rebuilt (or interrupted).
    """
    run_admin_command(target, "rebuild", as_json=as_json, disk=index, to=disk_location(new_dir),
                  max_rate=max_rate)


@main.command("import")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("sources", metavar="SRC...", nargs=-1, required=True)
@click.argument("dest", metavar="DEST")
def import_(as_json, sources, dest):
    """Copy the SRC trees into DEST, like 'cp -a SRC... DEST/', without a
    FUSE round trip per file.

    DEST is a directory in a mounted archive (the mount's daemon reads SRC
    and does the work) or DISK:/PATH of an unmounted one (an S3 disk's URL
    too: s3+http://HOST:PORT/BUCKET:/PATH); it is made if missing. A SRC directory x becomes DEST/x; x/ puts its contents into
    DEST. Owners, modes, times, symlinks, hard links and xattrs are kept.
    Run it again to resume: what is already there is skipped. Exit status:
    0 all imported, 4 something could not be imported (each is listed).
    """
    target, path = import_target(dest)
    run_admin_command(target, "import", as_json=as_json, unit="file", **import_options(sources, target, path))


@main.command()
@click.option("--mode", type=click.Choice(STORE_MODES), default=None,
              help="Dedup mode (default: the archive's).")
@click.argument("disk", type=DiskPath(exists=True, file_okay=False))
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def put(mode, disk, files):
    """Store FILES in the archive without a mount; print one contentkey per file."""
    from .store import key_of
    store = open_store(disk, "put")
    try:
        for path in files:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) > store.conf.max_block:
                raise WebfsError(f"{path}: {len(data)} bytes is over the largest block "
                                 f"({store.conf.max_block}); copy it in through a mount")
            row = store.store(data, name=os.fsencode(path), mode=mode, pin=True)
            store.commit()
            click.echo(f"{key_of(row)}\t{path}")
    finally:
        store.close()


@main.command()
@click.argument("disk", type=DiskPath(exists=True, file_okay=False))
@click.argument("key")
def get(disk, key):
    """Write the document with contentkey KEY to standard output."""
    ck = _parse_key(key)
    from .assembly import open_archive
    store = open_archive(disk, lock=False, options=options_given())
    try:
        data = store.retrieve(ck)
    finally:
        store.close()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@main.command()
@click.argument("disk", type=DiskPath(exists=True, file_okay=False))
@click.argument("keys", nargs=-1, required=True)
def delete(disk, keys):
    """Drop the reference that 'webfs put' took on each KEY (the last removes the block)."""
    cks = [_parse_key(k) for k in keys]
    store = open_store(disk, "delete")
    try:
        for ck in cks:
            left = store.release(store.lookup(ck), pin=True)
            store.commit()
            click.echo(f"{ck.block_name}\t{left} reference(s) left")
    finally:
        store.close()


@main.command()
@click.option("-o", "options", default="", metavar="OPTIONS",
              help="Comma-separated mount options: ro, allow_other, sync, "
                   "store_mode=force-new|regular|compare, manifest_interval=SECONDS, journal_limit=BYTES, "
                   "cool_interval=SECONDS, heat_k=N, piece_cache=BYTES, read_ahead_kb=KIB, "
                   "disk_delay=INDEX:SECONDS[,INDEX:SECONDS...], s3_credentials=FILE, state_dir=DIR, "
                   "block_cache=BYTES, s3_requests=N, s3_staging=BYTES, take_lease, debug.")
@click.option("-f", "--foreground", is_flag=True, help="Stay in the foreground (log to stderr).")
@click.argument("disk", type=DiskPath(exists=True, file_okay=False))
@click.argument("mountpoint", type=DiskPath(exists=True, file_okay=False))
def mount(options, foreground, disk, mountpoint):
    """Mount the archive that DISK belongs to on MOUNTPOINT. A disk whose
    root others can read is refused (fix: chmod 700 DISK)."""
    from . import mountstart
    from .admincommands import ADMIN_COMMANDS
    from .mountoptions import MountOptions
    mountstart.mount(disk, mountpoint, MountOptions.parse(options), ADMIN_COMMANDS, options_given(),
                     foreground=foreground)


@main.command()
@click.argument("mountpoint", type=click.Path(file_okay=False))
def umount(mountpoint):
    """Unmount; returns once the daemon has written everything and exited.
    A mount whose daemon died is unmounted too (exit status 1, saying so)."""
    control.umount(mountpoint)


@main.command()
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def sync(target):
    """Write everything to the disks: open files, catalog, MANIFEST on every disk."""
    if control.is_mountpoint(target):
        control.call(target, "sync", {})
        return
    store = open_store(target, "sync")
    try:
        from .manifest import Journal
        from .namespace import Namespace
        journal = Journal(store.archive)
        ns = Namespace(store, journal.record)
        with store.catalog.lock:
            n = journal.checkpoint(ns)
        store.sync()
    finally:
        store.close()
    click.echo(f"wrote a MANIFEST of {n} names on {len(store.archive.volumes)} disk(s)")


@main.command()
@click.option("--dry-run", is_flag=True, help="Say which groups would move; move nothing.")
@click.option("--max-moves", type=click.IntRange(0), default=None, metavar="N", help="Move at most N groups.")
@click.option("--delta", type=click.FloatRange(0), default=None, metavar="D",
              help="Cool only while the hottest disk's heat exceeds the mean by more than D "
                   "(a fraction; default 0.2).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def cool(dry_run, max_moves, delta, as_json, target):
    """Move the hottest placement groups off the hottest disk (disk cooling).

    Prints each move and why it stopped. Exit status 0.
    """
    options = {"dry_run": dry_run, "max_moves": max_moves}
    if delta is not None:
        options["delta"] = delta
    run_admin_command(target, "cool", as_json=as_json, **options)


@main.command()
@click.option("--top", type=click.IntRange(0), default=10, show_default=True, help="Hottest groups to show.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def heat(top, as_json, target):
    """Show each disk's heat and the hottest groups and their pages."""
    run_admin_command(target, "heat", as_json=as_json, top=top)


@main.command()
@click.option("--dry-run", is_flag=True, help="Say how many groups would move; move nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def rebalance(dry_run, as_json, target):
    """Move the placement groups whose home disk changed (after add-disk).

    Resumable: run it again after an interruption. Exit status: 0 done,
    4 stopped early or some blocks could not be moved.
    """
    run_admin_command(target, "rebalance", as_json=as_json, dry_run=dry_run)


@main.command("add-disk")
@click.option("--weight", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True,
              help="Share of new placement groups, relative to the other disks (e.g. its size).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("new_dir", metavar="NEWDIR", type=DiskPath(file_okay=False))
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def add_disk(weight, as_json, new_dir, target):
    """Add the empty directory NEWDIR to the archive as a new disk (its root mode 0700)."""
    run_admin_command(target, "add-disk", as_json=as_json, path=disk_location(new_dir), weight=weight)


@main.command("remove-disk")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("index", metavar="N", type=click.IntRange(0))
@click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))
def remove_disk(as_json, index, target):
    """Move everything off disk N onto the others, then forget disk N.

    Resumable: run it again after an interruption. Exit status: 0 done,
    4 stopped early or something is left on the disk.
    """
    run_admin_command(target, "remove-disk", as_json=as_json, disk=index)


def mount_helper() -> None:
    """mount.webfs DISK MOUNTPOINT [-o OPTIONS] [-f] [-n] [-s] [-v]: what mount(8) calls
    for 'mount -t webfs', 'mount -t fuse.webfs' and fstab lines (see mount.webfs(8))."""
    args = sys.argv[1:]
    read_environment()
    if "-h" in args or "--help" in args:
        click.echo("usage: mount.webfs DISK MOUNTPOINT [-o OPTIONS] [-f] [-n] [-s] [-v]\n"
                   "Mounts a webfs archive for mount(8) and fstab; see mount.webfs(8).\n"
                   "-f: fake (check the arguments, mount nothing); -n, -s, -v: accepted, ignored.")
        sys.exit(0)
    positional, options, fake = [], "", False
    it = iter(args)
    for a in it:
        if a == "-o":
            options = ",".join(filter(None, [options, next(it, "")]))
        elif a.startswith("-o"):
            options = ",".join(filter(None, [options, a[2:]]))
        elif a == "-f":
            fake = True
        elif a in ("-n", "-s", "-v"):
            pass                        # mount(8)'s: no mtab, sloppy, verbose
        elif a in ("-t", "-N"):
            next(it, None)
        elif a.startswith("-"):
            click.echo(f"mount.webfs: unknown option {a}", err=True)
            sys.exit(1)                 # mount(8): incorrect invocation
        else:
            positional.append(a)
    if len(positional) != 2:
        click.echo("usage: mount.webfs DISK MOUNTPOINT [-o OPTIONS]", err=True)
        sys.exit(1)
    _setup_logging(0)
    from . import mountstart
    from .admincommands import ADMIN_COMMANDS
    from .mountoptions import MountOptions
    try:
        opts = MountOptions.parse(options)
        given = environment_options()
        if not fake:
            mountstart.mount(positional[0], positional[1], opts, ADMIN_COMMANDS, given)
    except WebfsError as exc:
        click.echo(f"mount.webfs: {exc}", err=True)
        sys.exit(32)                     # mount(8): mount failure


def _parse_key(text: str) -> ContentKey:
    from .signature import ContentKey
    try:
        return ContentKey.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY")


# The collector's youngest generation is collected every GC_THRESHOLD[0]
# allocations, not 700: an import or a mount keeps many objects alive, and
# looking for cycles among them at the default pace costs CPU and finds none.
# Cycles are still collected, a little later.
GC_THRESHOLD = (50_000, 20, 20)


def read_environment() -> None:
    """The settings read from the environment, here at the edge, for this
    process and a mount it starts: WEBFS_INDEX=0 turns indexing off."""
    if os.environ.get("WEBFS_INDEX", "1") == "0":
        from . import indexer
        indexer.turn_off()


def environment_options() -> backend_options.BackendOptions:
    """The settings of S3 disks and leases in the environment (WEBFS_S3_*,
    WEBFS_STATE_DIR, XDG_CACHE_HOME, AWS_REGION, WEBFS_LEASE_RENEW...), read
    here and nowhere below; a value that is not one is an error, not a default."""
    try:
        return backend_options.BackendOptions.from_env(os.environ)
    except ValueError as exc:
        raise WebfsError(str(exc)) from None


def run() -> None:
    """Entry point: run the click group, turning webfs errors into messages."""
    gc.set_threshold(*GC_THRESHOLD)
    read_environment()
    try:
        main.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("webfs: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except WebfsError as exc:
        click.echo(f"webfs: {exc}", err=True)
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(141)
    except OSError as exc:      # the system refused (a read-only or full disk): said as coreutils say it
        click.echo(f"webfs: {os_error_text(exc)}", err=True)
        sys.exit(1)
