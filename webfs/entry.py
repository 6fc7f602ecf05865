"""The ``webfs`` command's entry point (setup.cfg's console script): a
``webfs search`` is first offered to webfs.quicksearch, which answers a
plain one of a mount point without loading click or the rest of the
command line; every other command, and every search it leaves, is
webfs.cli's.
"""
import sys


def run() -> None:
    """The ``webfs`` command."""
    if sys.argv[1:2] == ["search"]:
        from .quicksearch import search
        status = search(sys.argv[2:])
        if status is not None:
            sys.exit(status)
    from .cli import run as run_cli
    run_cli()
