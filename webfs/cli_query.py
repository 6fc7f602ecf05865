"""The commands of query access: ``webfs search``, ``webfs reindex`` and ``webfs stream``.

Thin, as the rest of the CLI: they check their arguments and run the
admin commands of webfs.searching on the disks or in a mount's daemon. A
plain search of a mount point never comes here: webfs.quicksearch answers
it (webfs.entry), with the options defined there.
"""
from __future__ import annotations

import os
import sys

import click

from . import control, testkill
from .backends import is_url
from .commandline import DiskPath, options_given, run_admin_command
from .quicksearch import PATHS, SEARCH_NUMBERS, SEARCH_OUTPUTS

# The archive a command works on: a disk or a mount point.
TARGET = click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))


def check_query(ctx, param, value):
    """A QUERY that does not parse is a usage error (exit 2)."""
    from .query import BadQuery, compile_query
    if value is None:
        return value
    try:
        compile_query(value, checking=True)
    except BadQuery as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def search_options(command):
    """webfs search's options, from the table webfs.quicksearch reads a plain search with."""
    options = [click.option(flag, setting, type=click.IntRange(least), default=default, show_default=shown,
                            help=text) for flag, setting, least, default, shown, text in SEARCH_NUMBERS]
    options += [click.option(flag, "output", flag_value=output, help=text) for flag, output, text in SEARCH_OUTPUTS]
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@search_options
@click.argument("query_text", metavar="QUERY", callback=check_query)
@TARGET
def search(limit, offset, output, query_text, target):
    """Print the files of TARGET that answer QUERY, best first (the query
    language is in webfs(1), QUERIES): words and "phrases", title:, url:,
    host:, links-to:URL, inlinks>N, mime:, date:2014..2015, collection:.
    Paths are below TARGET for a mount point, from the archive's root for
    a disk."""
    mounted = control.is_mountpoint(target)
    prefix = os.path.abspath(target) if mounted and not is_url(target) else "/"
    run_admin_command(target, "search", query_text=query_text, limit=limit, offset=offset,
                  output=output or PATHS, prefix=prefix)


@click.command()
@click.option("--index-dir", "index_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the index in DIR from now on (default: the catalog's meta/ directory; "
                   "a catalog in PostgreSQL keeps it in its database, and refuses this).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@TARGET
def reindex(index_dir, as_json, target):
    """Throw the query index away and make it again from the archive alone
    (the catalog and the blocks). The index is derived data: losing it
    loses nothing."""
    run_admin_command(target, "reindex", as_json=as_json, unit="file",
                  index_dir=os.path.abspath(index_dir) if index_dir else None)


# The options that choose a subset of the pages, and go on with a stopped
# stream: webfs stream's and export-warc's.
SUBSET_OPTIONS = (
    click.option("--host", default=None, metavar="HOST", help="Only pages of HOST and its subdomains."),
    click.option("--since", default=None, metavar="DATE",
                 help="Only pages captured on or after DATE (2014, 20140301...)."),
    click.option("--until", default=None, metavar="DATE", help="Only pages captured on or before DATE."),
    click.option("--query", "query_text", default=None, metavar="QUERY", help="Only pages that answer QUERY."),
    click.option("--resume", default=None, metavar="TOKEN",
                 help="Go on after the page (or record) a token was printed for, the subset the token's."),
)


def subset_options(command):
    for option in reversed(SUBSET_OPTIONS):
        command = option(command)
    return command


def subset_of(host, collection, since, until, query_text, resume) -> str:
    """The subset asked for as one query (webfs.stream.subset_query); a QUERY that
    does not parse, or a subset beside --resume, is a usage error (exit 2)."""
    from .stream import subset_query
    subset = subset_query(host, collection, since, until, query_text)
    if subset and resume:
        raise click.UsageError("--resume goes on with the subset of its token: give no other")
    if subset:
        check_query(None, None, subset)
    return subset


def print_token(token: str, written: int) -> None:
    """The line 'resume TOKEN BYTES' on stderr, after a page or record is written."""
    sys.stderr.write(f"resume {token} {written}\n")
    sys.stderr.flush()
    testkill.point("stream-after-token")


@click.command()
@subset_options
@click.option("--collection", default=None, metavar="NAME", help="Only pages of the collection NAME.")
@click.option("--tar", "as_tar", is_flag=True, help="Write the pages as a tar archive instead of their paths.")
@TARGET
def stream(host, since, until, query_text, resume, collection, as_tar, target):
    """Print the path of every page of TARGET (or of a subset), or write
    the pages as a tar archive (--tar), in the signature tree's order, each
    exactly once: pages added after the stream started are not sent,
    pages moved by cooling or rebalance are neither missed nor repeated.
    After each page, a line 'resume TOKEN BYTES' on stderr: 'webfs stream
    --resume TOKEN' sends the pages after it, and BYTES is how much of
    this run's output they follow."""
    from .assembly import open_archive
    from .stream import Position, start
    subset = subset_of(host, collection, since, until, query_text, resume)
    testkill.arm()
    disk, prefix = disk_of(target)
    store = open_archive(disk, lock=False, options=options_given())
    try:
        pos = Position.from_token(resume) if resume else start(store, subset)
        _send(store, pos, prefix, as_tar)
    finally:
        store.close()


COMMANDS = (search, reindex, stream)


def _send(store, pos, prefix: str, as_tar: bool) -> None:
    """Write the stream's pages (paths, or tar members) and a token after each."""
    from .stream import TAR_END, pages, tar_chunks
    out, written = sys.stdout.buffer, 0
    if as_tar:
        chunks = tar_chunks(store, pos)
    else:
        chunks = (((prefix.rstrip("/") + "/" + path + "\n").encode("utf-8", "surrogateescape"), after)
                  for path, _, after in pages(store, pos))
    for chunk, after in chunks:
        out.write(chunk)
        out.flush()
        written += len(chunk)
        print_token(after.token(), written)
    if as_tar:
        out.write(TAR_END)
        out.flush()


def disk_of(target: str) -> tuple[str, str]:
    """(a disk of the archive of a disk or mount point, to open it for reading, the
    prefix of its paths)."""
    if control.is_mountpoint(target):
        disks = control.call(target, "status", {}).figures["disks"]
        return next(d["path"] for d in disks if d["state"] == "present"), os.path.abspath(target)
    return target, "/"
