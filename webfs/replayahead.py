"""The view of a collection in a mount, asked of its daemon as ``webfs replay``
starts (webfs.entry), before click and the command line load.

Most of a first start is the daemon laying the collection out
(webfs.warcview); asked here, it does that while this process loads click,
webfs.cli and webfs.replay, which then takes the answer (``taken``) instead
of asking. Only a plain command line is asked ahead: ``TARGET PYWBDIR``
with ``--port N`` and ``--host H`` anywhere among them, TARGET a collection
(a directory holding ``@warc``) in a mount. Anything else, and an ask that
failed, is asked as before, after click has read the command line, so what
is said and its exit status are click's path's. A view is the daemon's
memory only, made again by every start: one asked ahead for a command line
click then refuses changes nothing a user sees.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

from .controlwire import ask, mount_of

KEEP_DIR = "@warc"          # warc.KEEP_DIR, not imported: webfs.warc loads what this runs ahead of
VALUED = ("--port", "--host")

_asked: dict[tuple[str, str], "_Ask"] = {}


class _Ask(threading.Thread):
    def __init__(self, mnt: str, inside: str):
        super().__init__(name="replay view", daemon=True)
        self.mnt, self.inside, self.answer = mnt, inside, None

    def run(self) -> None:
        try:
            self.answer = ask(self.mnt, "warc-view", {"collection": self.inside})
        except Exception:       # asked again by webfs.replay, which says why
            pass


def plain_target(args: list[str]) -> Optional[str]:
    """TARGET of a plain ``webfs replay`` command line (its arguments), else None."""
    words, i = [], 0
    while i < len(args):
        if args[i] in VALUED and i + 1 < len(args) and not args[i + 1].startswith("-"):
            if args[i] == "--port" and not (args[i + 1].isdigit() and 1 <= int(args[i + 1]) <= 65535):
                return None         # click refuses it
            i += 2
            continue
        if args[i].startswith("-"):
            return None
        words.append(args[i])
        i += 1
    return words[0] if len(words) == 2 else None


def ask_ahead(args: list[str]) -> None:
    """Ask for the view of the collection a plain command line names, in a thread."""
    target = plain_target(args)
    if target is None or not os.path.isdir(os.path.join(target, KEEP_DIR)):
        return
    found = mount_of(target)
    if found is not None and found not in _asked:
        _asked[found] = _Ask(*found)
        _asked[found].start()


def taken(mnt: str, inside: str) -> Optional[dict]:
    """The daemon's answer (as controlwire.ask gives it) to the view asked ahead
    for this collection, once; None if none was asked, or it failed."""
    asked = _asked.pop((mnt, inside), None)
    if asked is None:
        return None
    asked.join()
    return asked.answer
