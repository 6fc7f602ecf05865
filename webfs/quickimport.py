"""``webfs import SRC... DEST`` and ``webfs import-warc [--collection NAME]
WARC... DEST`` into a mounted archive without the command line's weight:
read with the standard library alone, asked of the mount's daemon
(webfs.controlwire), which reads the sources and does the work, its notes
and answer printed. An import of a crawl of duplicates takes the daemon
well under a second; click, webfs.cli and what they load were some 0.15 s
of CPU of every such command, more than the daemon's fixed part of it
(webfs-internals(7), CRAWL 2 THROUGH IMPORT, AGAIN; for import-warc, a
tenth of a second of every file imported by a loop of commands).

It owns what an import asks of the archive (``import_options``: the
sources as the daemon takes them, none in the mount itself; webfs.cli's
command asks the same). Whatever it is not sure of goes to click, which
reads the whole command line again as it always did, before anything is
asked of a daemon: --help, an option other than --json (and import-warc's
--collection), ``--``, a DEST with a colon (``DISK:/PATH`` of an unmounted
archive is webfs.cli's), a DEST in no mount, a source in the mount itself
(click's path says so), a WARC that is missing or a directory (click's
check says so), a terminal on stderr (click's path draws a bar), a
setting of the environment the command line checks at its start. Once the
daemon is asked, the answer is printed here as click's path prints it: the
notes on stderr as they come, the result's lines (or its JSON) on stdout,
its exit status; a daemon's error as ``webfs: MESSAGE``, exit status 1.
"""
from __future__ import annotations

import json
import os
import sys

from .controlwire import ask, is_mountpoint, mount_of
from .errors import WebfsError
from .quicksearch import CHECKED_ENVIRONMENT


def import_(args: list[str]) -> int | None:
    """Run ``webfs import ARGS`` into a mount; its exit status, or None,
    nothing asked nor printed, where click's path must run it."""
    read = read_command_line(args)
    if read is None:
        return None
    as_json, _, sources, dest = read
    return _run("import", as_json, dest, lambda found: import_options(sources, *found))


def import_warc(args: list[str]) -> int | None:
    """Run ``webfs import-warc ARGS`` into a mount, as ``import_`` does."""
    read = read_import_warc(args)
    if read is None:
        return None
    as_json, values, sources, dest = read
    return _run("import-warc", as_json, dest, lambda found: {
        "sources": [os.path.abspath(s) for s in sources], "dest": found[1],
        "collection": values.get("--collection")})


def _run(op: str, as_json: bool, dest: str, options_of) -> int | None:
    """Ask the daemon of the mount DEST is in for ``op`` with the options
    ``options_of((mount point, path))`` gives, and print its answer as
    click's path would; None where click's path must run it (a WebfsError
    of ``options_of`` included: that path says why)."""
    if any(os.environ.get(name) for name in CHECKED_ENVIRONMENT):
        return None
    if sys.stdout is None or sys.stderr is None or sys.stderr.isatty():
        return None                                 # no stdout: click prints nothing; a terminal: its bar
    found = None if ":" in dest else mount_of(dest)
    if found is None:
        return None
    try:
        options = options_of(found)
    except WebfsError:
        return None                                 # click's path says why
    try:
        result = ask(found[0], op, options,
                     lambda kind, n, total, what: echo(what, sys.stderr) if kind == "note" else None)
        if as_json:
            echo(json.dumps(result, indent=2), sys.stdout)      # as Result.to_json() gave it
        else:
            for line in result.get("lines", []):
                echo(line, sys.stdout)
        return result.get("exit_code", 0)
    except WebfsError as exc:
        echo(f"webfs: {exc}", sys.stderr)
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("\nwebfs: interrupted\n")       # as click's path says it
        return 130
    except BrokenPipeError:
        return 141


def read_command_line(args: list[str], valued: tuple[str, ...] = ()) -> tuple[bool, dict, list[str], str] | None:
    """(--json given, {option: value} of the ``valued`` options given, the
    sources, DEST) of a plain command line: SRC... DEST with --json anywhere
    among them (click takes a flag given twice) and each valued option as
    ``--NAME VALUE`` or ``--NAME=VALUE`` (the last one given counts, as in
    click); None for anything else."""
    words: list[str] = []
    values: dict[str, str] = {}
    as_json = False
    rest = iter(args)
    for a in rest:
        name, eq, value = a.partition("=")
        if a == "--json":
            as_json = True
        elif name in valued:
            value = value if eq else next(rest, None)
            if value is None or (not eq and value.startswith("-")) or value == "":
                return None                         # click's to say, or to read otherwise
            values[name] = value
        else:
            words.append(a)
    if len(words) < 2 or any(w.startswith("-") for w in words):
        return None
    return as_json, values, words[:-1], words[-1]


def read_import_warc(args: list[str]) -> tuple[bool, dict, list[str], str] | None:
    """``read_command_line`` of a plain ``webfs import-warc`` command line,
    whose WARCs are each a file (click's check of them says why not)."""
    read = read_command_line(args, valued=("--collection",))
    if read is None or not all(os.path.isfile(s) for s in read[2]):
        return None
    return read


def import_options(sources: list[str], target: str, path: str) -> dict:
    """The import's options for the archive at ``target`` (a mount point or a
    disk), DEST ``path`` from its root: each source absolute, with rsync's
    trailing slash kept (its contents, not the directory); into a mount, its
    device, which the daemon never walks into. WebfsError for a source in the
    mount itself (the daemon would read what it is writing)."""
    mount_dev = os.stat(target).st_dev if is_mountpoint(target) else None
    srcs = []
    for s in sources:
        p = os.path.abspath(s)
        if s.endswith("/") and p != "/":
            p += "/"                    # rsync's rule: the contents, not the directory
        if mount_dev is not None and os.path.exists(p) and os.lstat(p).st_dev == mount_dev:
            raise WebfsError(f"{s}: is in the mount itself; copy it with cp -a")
        srcs.append(p)
    return {"sources": srcs, "dest": path, "mount_dev": mount_dev}


def echo(text: str, file) -> None:
    """A line as click.echo writes it to a file that is no terminal: click,
    only for a line with a terminal escape (it takes those out)."""
    if "\x1b" in text:
        import click
        click.echo(text, file=file)
        return
    file.write(text + "\n")
    file.flush()
