"""The ``webfs`` command's entry point (setup.cfg's console script): a
``webfs search`` is first offered to webfs.quicksearch, a ``webfs import``
or ``webfs import-warc`` to webfs.quickimport, which run a plain one of a
mount point without loading click or the rest of the command line; every
other command, and every one they leave, is webfs.cli's.
"""
import sys


def run() -> None:
    """The ``webfs`` command."""
    status = None
    if sys.argv[1:2] == ["search"]:
        from .quicksearch import search
        status = search(sys.argv[2:])
    elif sys.argv[1:2] == ["import"]:
        from .quickimport import import_
        status = import_(sys.argv[2:])
    elif sys.argv[1:2] == ["import-warc"]:
        from .quickimport import import_warc
        status = import_warc(sys.argv[2:])
    if status is not None:
        sys.exit(status)
    from .cli import run as run_cli
    run_cli()
