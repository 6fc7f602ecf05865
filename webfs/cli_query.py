"""The commands of query access: ``webfs search`` and ``webfs reindex``.

Thin, as the rest of the CLI: they check their arguments and run the
operations of webfs.searching on the disks or in a mount's daemon.
"""
from __future__ import annotations

import os

import click

from . import control
from .backends import is_url


def register(main: click.Group) -> None:
    """Add the commands to the ``webfs`` group."""
    from .cli import DiskPath, run_operation
    target_arg = click.argument("target", metavar="DISK|MOUNTPOINT", type=DiskPath(exists=True, file_okay=False))

    def check_query(ctx, param, value):
        from .query import BadQuery, compile_query
        try:
            compile_query(value)
        except BadQuery as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    @main.command()
    @click.option("--limit", type=click.IntRange(1), default=100, show_default=True, help="Print at most N answers.")
    @click.option("--offset", type=click.IntRange(0), default=0, help="Skip the first N answers (the next page).")
    @click.option("--urls", "output", flag_value="urls", help="Print each answer's URL instead of its path.")
    @click.option("--json", "output", flag_value="json", help="Print path, URL, date, MIME type and size as JSON.")
    @click.option("--count", "output", flag_value="count", help="Print only how many files answer.")
    @click.argument("query_text", metavar="QUERY", callback=check_query)
    @target_arg
    def search(limit, offset, output, query_text, target):
        """Print the files of TARGET that answer QUERY, best first (the query
        language is in webfs(1), QUERIES): words and "phrases", title:, url:,
        host:, links-to:URL, inlinks>N, mime:, date:2014..2015, collection:.
        Paths are below TARGET for a mount point, from the archive's root for
        a disk."""
        mounted = control.is_mountpoint(target)
        prefix = os.path.abspath(target) if mounted and not is_url(target) else "/"
        run_operation(target, "search", query_text=query_text, limit=limit, offset=offset,
                      output=output or "paths", prefix=prefix)

    @main.command()
    @click.option("--index-dir", "index_dir", type=click.Path(file_okay=False), default=None,
                  help="Keep the index in DIR from now on (default: the catalog's meta/ directory).")
    @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
    @target_arg
    def reindex(index_dir, as_json, target):
        """Throw the query index away and make it again from the archive alone
        (the catalog and the blocks). The index is derived data: losing it
        loses nothing."""
        run_operation(target, "reindex", as_json=as_json, unit="file",
                      index_dir=os.path.abspath(index_dir) if index_dir else None)
