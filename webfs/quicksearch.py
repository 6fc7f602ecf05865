"""``webfs search QUERY MOUNTPOINT`` without the command line's weight: read
with the standard library alone, asked of the mount's daemon
(webfs.controlwire), its answer printed. The daemon answers in a few
milliseconds; loading click and webfs.cli cost the command more than that
and Python's own start together.

It owns webfs search's options (SEARCH_NUMBERS, SEARCH_OUTPUTS: the click
command in webfs.cli_query is made from them) and reading a plain command
line of them. Whatever it is not sure of goes to click, which reads the
whole command line again as it always did: --help, an option it does not
know or given twice, a value that is not one, a disk instead of a mount
point, a setting of the environment the command line checks at its start,
an error from the daemon (click's path asks again and says it the usual
way). So output, messages and exit codes are the same on both paths.
"""
from __future__ import annotations

import os
import sys

from .controlwire import ask, is_mountpoint
from .errors import WebfsError

# webfs search's numbers: (option, setting, least, default, default shown in --help, help).
SEARCH_NUMBERS = (
    ("--limit", "limit", 1, 100, True, "Print at most N answers."),
    ("--offset", "offset", 0, 0, False, "Skip the first N answers (the next page)."),
)
# Its outputs: (option, the output it chooses, help); none given, the paths.
SEARCH_OUTPUTS = (
    ("--urls", "urls", "Print each answer's URL instead of its path."),
    ("--json", "json", "Print path, URL, date, MIME type and size as JSON."),
    ("--count", "count", "Print only how many files answer."),
)
PATHS = "paths"

# The environment variables whose bad value webfs.cli refuses as it starts
# (webfs.backends.options, BackendOptions.from_env): with one of them set,
# click's path runs the search, and says so.
CHECKED_ENVIRONMENT = ("WEBFS_LEASE_RENEW", "WEBFS_BLOCK_CACHE", "WEBFS_S3_REQUESTS", "WEBFS_S3_STAGING")

# What starts a disk given as a URL (webfs.backends.is_url): never a mount point.
DISK_URLS = ("s3://", "s3+http://")


def search(args: list[str]) -> int | None:
    """Run ``webfs search ARGS`` of a mount point; its exit status, or None,
    nothing printed, where click's path must run it."""
    if any(os.environ.get(name) for name in CHECKED_ENVIRONMENT):
        return None
    read = read_command_line(args)
    if read is None:
        return None
    options, target = read
    if target.startswith(DISK_URLS) or not (os.path.isdir(target) and os.access(target, os.R_OK)
                                            and is_mountpoint(target)):
        return None
    options["prefix"] = os.path.abspath(target)
    notes: list[str] = []
    try:
        result = ask(target, "search", options,
                     lambda kind, n, total, what: notes.append(what) if kind == "note" else None)
        return _print(notes, result.get("lines", []), result.get("exit_code", 0))
    except (WebfsError, OSError, ValueError):     # UnicodeEncodeError too: click's path prints what it can
        return None
    except KeyboardInterrupt:
        sys.stderr.write("\nwebfs: interrupted\n")       # as click's path says it
        return 130


def read_command_line(args: list[str]) -> tuple[dict, str] | None:
    """(the search's settings, TARGET) of a plain command line: QUERY and
    TARGET, each option at most once (``--limit N`` or ``--limit=N``), one
    output; None for anything else."""
    numbers = {flag: (setting, least) for flag, setting, least, *_ in SEARCH_NUMBERS}
    outputs = {flag: output for flag, output, _ in SEARCH_OUTPUTS}
    options: dict = {setting: default for _, setting, _, default, *_ in SEARCH_NUMBERS}
    options["output"] = PATHS
    given: set[str] = set()
    words: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            words.append(arg)
            continue
        flag, eq, value = arg.partition("=")
        known = flag in numbers or flag in outputs and not eq
        if not known or flag in given or flag in outputs and options["output"] != PATHS:
            return None                             # click's, or given twice, or a second output
        given.add(flag)
        if flag in outputs:
            options["output"] = outputs[flag]
            continue
        if not eq:
            if not rest:
                return None
            value = rest.pop(0)
        setting, least = numbers[flag]
        try:
            options[setting] = int(value)           # as click's INT reads it
        except ValueError:
            return None
        if options[setting] < least:
            return None
    if len(words) != 2:
        return None
    options["query_text"], target = words
    return options, target


def _print(notes: list[str], lines: list[str], exit_code: int) -> int | None:
    """Print the daemon's notes and answer, as webfs.commandline.print_result
    does; None where only click prints it right."""
    if any("\x1b" in line for line in notes + lines):
        return None                                 # click takes terminal escapes out of what goes to a pipe
    if sys.stdout is None or sys.stderr is None:
        return None                                 # started with stdout closed: click prints nothing
    text = "".join(line + "\n" for line in lines)
    text.encode(sys.stdout.encoding, sys.stdout.errors)    # UnicodeEncodeError before anything is printed
    for what in notes:
        sys.stderr.write(what + "\n")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 141
    return exit_code
