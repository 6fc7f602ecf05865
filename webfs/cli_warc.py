"""The commands for web archives: import-warc, export-warc, versions, url
and replay. Thin, as the rest of the command line: they check their
arguments and leave the work to ``warc``, ``versions`` and ``replay``.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys

import click

from . import control, testkill
from .backends import is_url
from .cli_query import disk_of, print_token, subset_of, subset_options
from .commandline import (import_target, mount_of, options_given, print_result, progress_bar,
                          run_admin_command)
from .errors import WebfsError


@click.command("import-warc")
@click.option("--collection", metavar="NAME", default=None,
              help="The collection (a directory in DEST) the captures go in; default: the first file's name.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("sources", metavar="WARC...", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.argument("dest", metavar="DEST")
def import_warc(collection, as_json, sources, dest):
    """Import WARC and ARC files (gzipped per record or plain) into the
    collection DEST/NAME, each capture a file at a path made from its URL
    (webfs-format(5), URL PATHS), through the bulk import path.

    DEST is a directory in a mounted archive or DISK:/PATH of an unmounted
    one. Every record is kept (raw headers in NAME/@warc/), the parsed
    fields are xattrs (user.warc.*, user.http.*), revisits share their
    original's blocks (one whose original is absent, or removed during the
    import, is kept unresolved and reported). Damaged records are reported
    with file and offset and the rest is imported. Exit status: 0 all
    imported, 4 problems.
    """
    target, path = import_target(dest)
    run_admin_command(target, "import-warc", as_json=as_json, unit="rec",
                  sources=[os.path.abspath(s) for s in sources], dest=path, collection=collection)


@click.command("export-warc")
@click.option("--split", metavar="SIZE", default=None,
              help="Start a new file (OUT-00001.warc.gz, ...) after SIZE bytes (e.g. 1G).")
@click.option("--duplicates", type=click.Choice(["revisit", "full"]), default="revisit", show_default=True,
              help="Write revisits as revisit records, or as full response records with their payload.")
@click.option("--order", type=click.Choice(["source", "disk"]), default=None,
              help="Records in the order of their source files (the default), or captures disk by disk in "
                   "turn, each disk's in the order of its signature tree (a subset's, always).")
@subset_options
@click.option("--resumable", is_flag=True,
              help="Write the whole collection as a stream that --resume can go on with (as a subset is).")
@click.option("--force", is_flag=True,
              help="Replace an OUT (or OUT.part) already there; without it, such a name is refused.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("collection", metavar="COLLECTION")
@click.argument("out", metavar="OUT.warc.gz")
def export_warc(split, duplicates, order, host, since, until, query_text, resume, resumable, force, as_json,
                collection, out):
    """Write COLLECTION (a directory in a mount, or DISK:/NAME) as WARC,
    one gzip member per record: each record byte-identical to the one
    imported where the kept bytes allow, otherwise a valid WARC/1.1 record
    with the same URI, date, record id, HTTP headers and payload. A record
    whose capture file was deleted (rm) is left out and counted, also one
    removed (or renamed over) while the export runs, never written empty or
    with another file's bytes; a capture that cannot be read stops the
    export.

    In a mount, the mount's daemon reads the blocks and writes OUT (unless
    OUT is in that mount). OUT is written as OUT.part, created new, and
    renamed when complete; an export that fails leaves no OUT.part and an
    OUT already there as it was. An OUT or OUT.part already there is refused
    unless --force (which replaces the name, never a symlink's target).

    With --host, --since, --until or --query, only the records of the
    captures chosen, as webfs stream sends its pages: read from the disks
    one reader per disk, each capture of the archive as it was at the start
    exactly once. Such an export (or one --resumable) prints 'resume TOKEN
    BYTES' on stderr after each record and keeps its OUT.part when stopped,
    failed or killed: --resume TOKEN cuts OUT.part back to BYTES and goes on.
    """
    from . import warc, warcexport
    subset = subset_of(host, None, since, until, query_text, resume)
    size = None
    if split:
        m = re.fullmatch(r"([0-9]+)([KMGT]?)i?B?", split.upper())
        if not m:
            raise click.BadParameter(f"{split}: not a size (e.g. 500M, 1G)", param_hint="'--split'")
        size = int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")
        if not size:
            raise click.BadParameter(f"{split}: a file holds at least one byte (e.g. 500M, 1G)",
                                     param_hint="'--split'")
    out = os.path.abspath(out)
    if subset or resume or resumable:
        if order == "source":
            raise click.UsageError("a subset or resumable export is written in disk order; not --order source")
        _export_stream(collection, out, subset, resume, force, as_json, split=size, duplicates=duplicates)
    options = dict(out=out, split=size, duplicates=duplicates, order=order or "source", force=force)
    from .archive import archive_place
    place = archive_place(collection)
    if place is not None:
        target, inside = place
    elif not os.path.isdir(collection):
        control.check_not_gone(collection)
        raise WebfsError(f"{collection}: not a directory, and not DISK:/NAME of an archive")
    else:
        target, inside = mount_of(collection) or (None, None)
        if target is not None and (mount_of(os.path.dirname(out)) or ("",))[0] == target:
            target = None               # the daemon does not write into its own mount
    if target is None:
        from .admin import Progress
        tree = warc.MountTree(collection)
        bar = progress_bar(None, "exporting", "rec")
        progress = Progress(lambda kind, n, total, what: bar.update(n) if kind == "advance" else None)
        try:
            result = warcexport.export_tree(tree, progress=progress, **options)
        finally:
            bar.close()
        print_result(result, as_json)
    there = warcexport.OutFiles(out, size).leftovers()
    try:
        run_admin_command(target, "export-warc", as_json=as_json, unit="rec", collection=inside, **options)
    except WebfsError as exc:
        # The daemon removes what it wrote when it fails, not when it is killed.
        # Only the .part files this export made go: not those it refused.
        left = [name for name, ident in warcexport.OutFiles(out, size).leftovers().items()
                if force or there.get(name) != ident]
        for name in left:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        raise WebfsError(f"{exc}; removed the incomplete {', '.join(left)}" if left else str(exc)) from None


def _export_stream(collection: str, out: str, subset: str, resume, force: bool, as_json: bool, **options) -> None:
    """export-warc as a restartable stream (webfs.warcexport.export_stream), read
    from the archive's disks by this process, as webfs stream is."""
    from . import warcexport
    from .archive import archive_place
    from .stream import Position
    from .warc import DiskTree
    place = archive_place(collection)
    if place is None:
        found = mount_of(collection) if os.path.isdir(collection) else None
        if found is None:
            control.check_not_gone(collection)
            raise WebfsError(f"{collection}: not in a webfs mount, and not DISK:/NAME of an archive "
                             "(a subset export reads the archive's catalog)")
        place = disk_of(found[0])[0], found[1]
    pos = Position.from_token(resume, "export-warc") if resume else None
    testkill.arm()
    tree = DiskTree(*place, options_given())
    try:
        pos = pos or warcexport.stream_start(tree, subset, out, options["split"], options["duplicates"])
        result = warcexport.export_stream(tree, out, pos, force, print_token)
    finally:
        tree.close()
    print_result(result, as_json)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("url")
@click.argument("target", metavar="TARGET")
def versions(as_json, url, target):
    """List every capture of URL, under any spelling of it (scheme, host case,
    port, www., trailing slash), in every collection of TARGET (a mount point,
    a disk, or one collection): date, size, signature, group (captures with
    the same number in the 4th column are identical), path. The spelling asked
    for comes first; the others found are named on stderr."""
    from . import versions as lookup
    caps, one = _captures(url, target)
    if as_json:
        click.echo(json.dumps(caps, indent=2))
    else:
        for v in caps:
            click.echo(f"{v['date']}  {v['size']:>10}  {v['signature'][:32]}  ={v['same_as']}  {v['path']}")
    others = lookup.spellings(caps)
    if others:
        click.echo(f"{'no capture of ' + url + ' as written; ' if not caps[0]['exact'] else ''}"
                   f"listed too: {_spelled(others)}", err=True)
    sys.exit(0 if caps else 1)


def _captures(url: str, target: str, pywb_ties: bool = False) -> tuple[list, bool]:
    """The captures of URL in TARGET (versions.captures), oldest first, those of one
    second in pywb's order if ``pywb_ties`` (so url and replay agree); none found
    is said, exit 1."""
    from . import versions as lookup
    tree = _lookup_tree(target)
    try:
        caps, one = lookup.captures(tree, url)
        if pywb_ties:
            from .replay import pywb_order
            caps = pywb_order(tree, sorted(caps, key=lambda c: c["stamp"]))
    finally:
        tree.close()
    if not caps:
        where = (f"the collection {target} (TARGET is one collection: give the mount point or a disk to "
                 "look in all)" if one else f"any collection of {target}")
        click.echo(f"no capture of {url}, under any spelling, in {where}", err=True)
        sys.exit(1)
    return caps, one


TARGETS = ("a mount point, a disk of an archive (DISK or DISK:/), or one collection (a directory "
           "holding @warc/: in a mount, or DISK:/NAME)")


def _lookup_tree(target: str):
    """The tree TARGET of versions and url names (versions.captures looks in every
    collection of it, or in it alone when it is one); a usage error (exit 2)
    naming what TARGET must be for anything else."""
    from . import warc
    from .archive import archive_place
    keep = os.fsdecode(warc.KEEP_DIR)
    place = archive_place(target)
    if place is not None and place[1].strip("/"):
        inside = place[1].strip("/")
        tree = warc.DiskTree(place[0], "/" + inside, options_given())
        if tree.is_dir(warc.KEEP_DIR):
            return tree
        tree.close()
        raise click.BadParameter(f"{target}: not a collection (no {keep}/ in it); TARGET is {TARGETS}",
                                 param_hint="'TARGET'")
    if place is not None or is_url(target) or os.path.isfile(os.path.join(target, "WEBFS-DISK")):
        return warc.open_target(place[0] if place else target, options_given())
    control.check_not_gone(target)
    if not os.path.isdir(target):
        raise click.BadParameter(f"{target}: not a directory, nor DISK:/NAME; TARGET is {TARGETS}",
                                 param_hint="'TARGET'")
    found = mount_of(target)
    inside = found[1].strip("/") if found else ""
    if os.path.isdir(os.path.join(target, keep)) or found and not inside:
        return warc.MountTree(target)       # a collection, or a mount point
    what = ("not in a webfs mount" if found is None else "a directory inside a collection, not a collection"
            if any(os.path.isdir(os.path.join(p, keep)) for p in _parents(target, found[0]))
            else "not a collection (no @warc/ in it)")
    raise click.BadParameter(f"{target}: {what}; TARGET is {TARGETS}", param_hint="'TARGET'")


def _parents(path: str, top: str) -> list[str]:
    """The directories above ``path`` up to ``top`` (its mount point), nearest first."""
    out, here = [], os.path.dirname(os.path.realpath(path))
    while here.startswith(top.rstrip("/") + "/"):
        out.append(here)
        here = os.path.dirname(here)
    return out


def _spelled(counts: dict) -> str:
    return ", ".join(f"{u} ({n} capture{'s' if n > 1 else ''})" for u, n in counts.items())


def _date_option(ctx, param, value):
    from . import versions as lookup
    if value is not None:
        try:
            lookup.when(value)
        except WebfsError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


@click.command()
@click.option("--at", "at", metavar="DATE", default=None, callback=_date_option,
              help="The capture closest to DATE: 2024, 20240127, a 14-digit WARC date, or ISO 8601 "
                   "(2024-01-27T10:00:00.5+05:00); default: the latest.")
@click.argument("url")
@click.argument("target", metavar="TARGET")
def url(at, url, target):
    """Print the path (below TARGET) of the capture of URL closest to DATE,
    by Memento's rule (the earlier one on a tie; in one second, pywb's pick).
    A capture of the URL as written is chosen first; else one of another
    spelling (scheme, host case, port, www., trailing slash), said on stderr."""
    from . import versions as lookup
    caps, _ = _captures(url, target, pywb_ties=True)
    best = lookup.closest([c for c in caps if c["exact"]] or caps, at)
    others = lookup.spellings(caps)
    if not best["exact"]:
        click.echo(f"no capture of {url} as written; chose the spelling {best['url']} "
                   f"(found: {_spelled(others)})", err=True)
    elif others:
        click.echo(f"spellings found besides {url}: {_spelled(others)}", err=True)
    from .archive import archive_place
    place = archive_place(target)
    if place is not None:
        click.echo(os.path.join("/", place[1].strip("/"), best["path"]))
    elif is_url(target) or os.path.isfile(os.path.join(target, "WEBFS-DISK")):
        click.echo("/" + best["path"])
    else:
        click.echo(os.path.join(target, best["path"]))


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8090, show_default=True,
              help="The port that serves the virtual WARC files of collections no mount shows.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address that serves them (pywb must reach it; others need not).")
@click.argument("target", metavar="TARGET")
@click.argument("pywb_dir", metavar="PYWBDIR")
def replay(port, host, target, pywb_dir):
    """Let pywb replay TARGET without copying it: one collection (a directory
    in a mount, or DISK:/NAME), or every collection of an archive (its mount
    point, or DISK:/). Write each collection's sorted CDXJ index (kept in
    PYWBDIR/webfs-cdxj/, taken from what import-warc kept, made again only for
    what changed) and a pywb
    config.yaml in PYWBDIR. The records are virtual WARC files: a mount shows
    its collections' under MOUNTPOINT/.webfs/warc/ while it lasts (the command
    ends at once); those of unmounted disks are served on HOST:PORT until
    interrupted. Run 'wayback' in PYWBDIR to browse them."""
    from . import replay as replaymod
    control.check_not_gone(target)
    server, lines, trees = replaymod.prepare(target, pywb_dir, port, options_given(), host)
    for line in lines:
        click.echo(line)
    sys.stdout.flush()
    try:
        if server is not None:          # else the mounts show every collection's files: nothing to serve
            server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.server_close()
        for tree in trees:
            tree.close()


COMMANDS = (import_warc, export_warc, versions, url, replay)
