"""What the commands of the command line share: the DISK argument, running
an admin command on an unmounted archive or in a mount's daemon, drawing
its progress and printing its result, and finding the archive and mount a
path is in. The commands themselves are in ``cli`` (the archive's upkeep)
and ``cli_warc`` (web archives).
"""
from __future__ import annotations

import json
import signal
import sys
from typing import TYPE_CHECKING, Optional

import click

from . import control
from .backends import BackendOptions, is_url, normalize
from .control import mount_of
from .errors import WebfsError

if TYPE_CHECKING:
    from .store import Store


class DiskPath(click.Path):
    """A disk: a directory, or a disk URL (s3://HOST:PORT/BUCKET[/PREFIX],
    s3+http://...) taken as given (the archive checks it when it opens it)."""

    def convert(self, value, param, ctx):
        if is_url(value):
            return value
        control.check_not_gone(value)
        return super().convert(value, param, ctx)


def disk_location(value: str) -> str:
    """A disk as webfs.conf records it (canonical URL or absolute path)."""
    try:
        return normalize(value)
    except ValueError as exc:
        raise WebfsError(str(exc)) from None


def progress_bar(total: Optional[int], desc: str, unit: str = "blk"):
    """A tqdm bar on stderr when it is a terminal, else a silent stand-in.
    tqdm is imported only for a bar that is drawn: its import is some 55 ms
    of CPU, a sixth of the start of a command run by a script (an import of
    a crawl of duplicates into a mount takes under a second in all)."""
    if not sys.stderr.isatty():
        return NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)


class NoBar:
    """What a disabled tqdm bar does: counts nothing, draws nothing, writes lines as they come."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def write(self, s: str, file=None) -> None:
        click.echo(s, file=file or sys.stdout)

    def close(self) -> None:
        pass

    def __enter__(self) -> "NoBar":
        return self

    def __exit__(self, *exc) -> None:
        pass


def options_given() -> BackendOptions:
    """The settings of S3 disks and leases the command line read at its start
    (``cli.main``: the environment and --take-lease); the defaults outside
    a command (a program using webfs as a library)."""
    ctx = click.get_current_context(silent=True)
    given = ctx.find_root().obj if ctx is not None else None
    return given if isinstance(given, BackendOptions) else BackendOptions()


def open_store(disk: str, holder: str) -> Store:
    # An import removes replaced blocks and flushes parity in the background
    # worker, as a mount does; the other commands expect each commit settled.
    from .assembly import open_archive
    return open_archive(disk, holder=f"webfs {holder}", background=holder == "import", options=options_given())


def run_admin_command(target: str, name: str, as_json: bool = False, unit: str = "blk", **options) -> None:
    """Run an admin command on a disk of an unmounted archive (or, given a
    mount point, inside its daemon), draw its progress, print its result and
    exit with its status."""
    from . import admin
    bar = None

    def listener(kind, n, total, what):
        nonlocal bar
        if kind == "total":
            if bar is not None:
                bar.close()
            bar = progress_bar(total, what or name, unit)
        elif kind == "advance" and bar is not None:
            if what:
                bar.set_postfix_str(what, refresh=False)
            bar.update(n)
        elif kind == "note":
            (bar.write if bar is not None else click.echo)(what, file=sys.stderr)

    progress = admin.Progress(listener)
    try:
        if control.is_mountpoint(target):
            result = control.call(target, name, options, listener)
        else:
            from .admincommands import ADMIN_COMMANDS
            from .assembly import OpenArchive
            store = open_store(target, name)
            previous = signal.getsignal(signal.SIGINT)

            def stop(signum, frame):
                # The first Ctrl-C asks the operation to stop at a safe point; a second interrupts.
                progress.stop_requested.set()
                progress.note("stopping at the next safe point (Ctrl-C again to interrupt)")
                signal.signal(signal.SIGINT, previous)

            signal.signal(signal.SIGINT, stop)
            try:
                result = ADMIN_COMMANDS[name](OpenArchive(store), progress, **options)
            except KeyboardInterrupt:
                progress.stop_requested.set()
                raise
            finally:
                signal.signal(signal.SIGINT, previous)
                store.close()
    finally:
        if bar is not None:
            bar.close()
    print_result(result, as_json)


def print_result(result, as_json: bool) -> None:
    """Print an admin command's result (its lines, or JSON) and exit with its status."""
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        for line in result.lines:
            click.echo(line)
    sys.exit(result.exit_code)


def import_target(dest: str) -> tuple[str, str]:
    """(mount point or disk, DEST's path from the archive's root) of an import's DEST."""
    from .archive import archive_place
    found = archive_place(dest) or mount_of(dest)
    if found is None:
        control.check_not_gone(dest)
        raise WebfsError(f"{dest}: not in a webfs mount, and not DISK:/PATH of an archive")
    return found
