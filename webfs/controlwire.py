"""The control socket's wire, client side: which mount a path is in, which
socket a mount point names, and one admin operation asked of its daemon and
answered.

A request is one line of JSON, ``{"op": NAME, "options": {...}}``; the
daemon (webfs.daemon) answers with lines of JSON: progress
(``{"progress": KIND, "n", "total", "what"}``), then one ``{"result": ...}``
(webfs.admin.Result as JSON) or ``{"error": MESSAGE}``. Only the standard
library's socket and json, so that ``webfs search`` of a mount point
(webfs.quicksearch) and ``webfs import`` into a mount (webfs.quickimport)
start in a few milliseconds; webfs.control builds the rest of the client
on it.
"""
from __future__ import annotations

import json
import os
import socket

from .errors import ArchiveError, WebfsError

CONTROL_XATTR = "user.webfs.control"


def is_mountpoint(path: str) -> bool:
    """Does ``path`` name the root of a webfs mount whose daemon answers?"""
    try:
        os.getxattr(path, CONTROL_XATTR)
        return True
    except OSError:
        return False


def mount_of(path: str) -> tuple[str, str] | None:
    """(the webfs mount point a path is in, the path from the archive's root), or
    None; the path need not exist yet."""
    here = os.path.abspath(path)
    rest = ""
    while not os.path.exists(here):
        here, tail = os.path.split(here)
        rest = os.path.join(tail, rest)
    here = os.path.realpath(here)
    probe = here
    while True:
        if os.path.ismount(probe) and is_mountpoint(probe):
            inside = os.path.join("/", os.path.relpath(here, probe), rest)
            return probe, os.path.normpath(inside)
        if probe == "/":
            return None
        probe = os.path.dirname(probe)


def ask(mountpoint: str, op: str, options: dict, listener=None) -> dict:
    """The result (as JSON) of an admin operation run by the daemon of a mount
    point; ``listener(kind, n, total, what)`` hears its progress. ArchiveError
    when it is not a mount point or its daemon cannot be reached, WebfsError
    with the daemon's message when the operation failed."""
    try:
        path = os.getxattr(mountpoint, CONTROL_XATTR).decode()
    except OSError:
        raise ArchiveError(f"{mountpoint}: not a webfs mount point") from None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError as exc:
            raise ArchiveError(f"cannot reach the daemon of {mountpoint}: {exc.strerror}") from None
        f = sock.makefile("rwb")
        f.write((json.dumps({"op": op, "options": options}) + "\n").encode())
        f.flush()
        for line in f:
            msg = json.loads(line)
            if "progress" in msg:
                if listener:
                    listener(msg["progress"], msg["n"], msg["total"], msg["what"])
            elif "error" in msg:
                raise WebfsError(msg["error"])
            elif "result" in msg:
                return msg["result"]
    raise WebfsError(f"the daemon of {mountpoint} hung up without an answer")
