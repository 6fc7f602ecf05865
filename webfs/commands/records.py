"""Reading the plain-text namespace records back: the MANIFEST and JOURNAL
on every disk (``webfs-format(5)``) replayed into the set of names they
describe, with owners, xattrs and hard-link identity from their ``#``
lines. A record that does not parse or contradicts the names before it is
skipped and reported (where, what), never fatal: one bad line must not cost
the rest. ``rebuild_catalog`` turns the result into a catalog; the recovery
tools read the same records without webfs.
"""
from __future__ import annotations
import logging
import os
import stat
from collections import Counter
from typing import Optional

from .. import signature as sigmod
from ..archive import Archive
from ..manifest import (INODE, JOURNAL, OWNER, XATTR, escape_path, journal_after_checkpoint, manifest_on,
                        read_manifest, unescape_path)
from ..namespace import NAME_MAX, name_problem

log = logging.getLogger(__name__)


Problem = tuple[str, str]          # (where: "disk N: meta/JOURNAL line K", what)

XATTR_MAX = 64 << 10                # the largest xattr value Linux takes
MAX_INT64 = 2**63 - 1             # an SQLite INTEGER; sizes and mtimes (ns) past it are not data

FILE_TYPES = (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, stat.S_IFIFO, stat.S_IFSOCK,
              stat.S_IFCHR, stat.S_IFBLK)


class Entry(tuple):
    """One record's (sigs, size, mode, mtime_ns, where), and in ``attrs`` what
    the ``#`` lines after it said: "owner" (uid, gid), "xattrs" {name: value},
    "inode" (a number its other names share). It moves with renames."""

    def __new__(cls, *fields):
        made = super().__new__(cls, fields)
        made.attrs = {}
        return made


class Entries(dict):
    """path -> (sigs, size, mode, mtime_ns, where), counting for every path how
    many listed paths lie below it, so 'is anything listed below P' is one
    lookup, not a scan (a MANIFEST has millions of lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.below: Counter[bytes] = Counter()

    @staticmethod
    def _ancestors(path: bytes):
        parent = path.rpartition(b"/")[0]
        while parent:
            yield parent
            parent = parent.rpartition(b"/")[0]

    def __setitem__(self, path: bytes, value: tuple) -> None:
        if path not in self:
            for a in self._ancestors(path):
                self.below[a] += 1
        super().__setitem__(path, value)

    def __delitem__(self, path: bytes) -> None:
        super().__delitem__(path)
        for a in self._ancestors(path):
            self.below[a] -= 1

    def pop(self, path: bytes, *default):
        if path in self:
            value = self[path]
            del self[path]
            return value
        return super().pop(path, *default)

    def has_below(self, path: bytes) -> bool:
        return self.below[path] > 0


def path_problem(path: bytes) -> Optional[str]:
    """Why a path from a plain-text record cannot name an entry, or None.
    Every component must pass the namespace's own rule (``name_problem``)."""
    if not path.startswith(b"/"):
        return "not an absolute path"
    if path == b"/":
        return None
    for part in path[1:].split(b"/"):
        why = name_problem(part)
        if why is not None:
            return why
    return None


def _unescape(text: bytes) -> bytes:
    """A record's path, unescaped; ValueError for an escape the writer never makes
    (webfs-recover refuses the same ones)."""
    path = unescape_path(text)
    if escape_path(path) != text:
        raise ValueError(f"bad escape in path {text[:60]!r}")
    return path


def show_path(path: bytes) -> str:
    text = path.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 80 else text[:60] + "..." + f"({len(path)} bytes)")


def read_namespace(archive: Archive, problems: Optional[list[Problem]] = None
                   ) -> tuple[dict[bytes, tuple], list[str]]:
    """path -> (sigs, size, mode, mtime_ns, where) from the newest MANIFEST plus
    its JOURNAL. A record that is not usable (a name FUSE would refuse, a
    rename out of the tree or into itself, a parent that is not a directory)
    is skipped and added to ``problems`` with its file and line."""
    said = []
    problems = [] if problems is None else problems
    best: Optional[tuple[float, object, str]] = None
    for vol in archive.volumes.values():
        found = manifest_on(vol.root)
        try:
            mtime = os.stat(os.path.join(vol.root, found[0])).st_mtime if found else None
        except FileNotFoundError:
            continue
        if mtime is not None and (best is None or mtime > best[0]):
            best = (mtime, vol, found[0])
    entries = Entries()
    if best is None:
        said.append("no MANIFEST on any disk: names come from the journal alone")
        vols = list(archive.volumes.values())
        source = vols[0] if vols else None
    else:
        _, source, form = best
        manifest, damage = read_manifest(source.backend, form)
        lines = manifest.split(b"\n")
        if damage:
            problems.append((f"disk {source.index}: {form}", damage + ": the lines before it are used"))
        if lines[-1]:
            problems.append((f"disk {source.index}: {form} line {len(lines)}",
                             "incomplete last line: skipped"))
        last = None
        for n, line in enumerate(lines[:-1], 1):
            if line:
                where = f"disk {source.index}: {form} line {n}"
                last = _replay(entries, line if line.startswith(b"#\t") else b"+\t" + line, where, problems, last)
    if source is not None:
        try:
            journal = source.backend.read(JOURNAL)
        except FileNotFoundError:
            journal = b""
        first = 1
        if best is not None:        # only what the MANIFEST does not hold yet
            rest = journal_after_checkpoint(manifest, journal)
            first += journal[:len(journal) - len(rest)].count(b"\n")
            journal = rest
        lines = journal.split(b"\n")
        last = None
        for n, line in enumerate(lines[:-1], first):
            if line:
                last = _replay(entries, line, f"disk {source.index}: {JOURNAL} line {n}", problems, last)
        if lines[-1]:
            said.append(f"disk {source.index}: {JOURNAL} line {len(lines) + first - 1}: incomplete "
                        "(a write cut short by a crash); ignored")
        said.append(f"names from disk {source.index}: {len(entries)} entries")
    return entries, said


def _replay(entries: Entries, line: bytes, where: str, problems: list[Problem],
            last: Optional[bytes]) -> Optional[bytes]:
    """Apply one record; return the path whose entry it made (``#`` lines of
    owner, xattrs and inode that follow apply to it), or None."""
    fields = line.split(b"\t")
    if fields[0] == b"#":
        if len(fields) > 1 and fields[1] in (OWNER, XATTR, INODE):
            why = _attribute_problem(entries.get(last) if last is not None else None, fields)
            if why:
                problems.append((where, why + ": skipped"))
            return last
        return None if fields[1:2] == [b"checkpoint"] else last
    before = len(problems)
    _apply(entries, line, where, problems)
    if fields[0] != b"+" or len(problems) != before:
        return None
    return _unescape(fields[-1])


def _attribute_problem(entry: Optional[Entry], fields: list[bytes]) -> Optional[str]:
    """Put what an owner, xattr or inode line says into ``entry``, or say why not."""
    if entry is None:
        return f"a {fields[1].decode()} line after no usable entry"
    try:
        if fields[1] == OWNER and len(fields) == 4:
            uid, gid = int(fields[2]), int(fields[3])
            if not (0 <= uid < 2**32 and 0 <= gid < 2**32):
                return f"owner {uid}:{gid} out of range"
            entry.attrs["owner"] = (uid, gid)
        elif fields[1] == XATTR and len(fields) == 4:
            kind, text = fields[3][:1], fields[3][1:]
            if kind not in (b"t", b"x"):
                return f"xattr value {fields[3][:20]!r}: neither t (text) nor x (hex)"
            name, value = _unescape(fields[2]), _unescape(text) if kind == b"t" else bytes.fromhex(text.decode("ascii"))
            if not 0 < len(name) <= NAME_MAX or b"\0" in name or len(value) > XATTR_MAX:
                return f"xattr {show_path(name)}: not a name and value the mount would take"
            entry.attrs.setdefault("xattrs", {})[name] = value
        elif fields[1] == INODE and len(fields) == 3:
            number = int(fields[2])
            if not 0 < number <= MAX_INT64:
                return f"inode {number} out of range"
            entry.attrs["inode"] = number
        else:
            return f"a {fields[1].decode()} line of {len(fields)} fields"
    except (ValueError, UnicodeDecodeError) as exc:
        return f"does not parse ({exc})"
    return None


def _apply(entries: Entries, line: bytes, where: str, problems: list[Problem]) -> None:
    """Apply one MANIFEST entry or JOURNAL line to ``entries``, or say why not."""
    why = _apply_or_why(entries, line, where)
    if why:
        problems.append((where, why + ": skipped"))
        log.warning("%s: %s: skipped", where, why)


def parent_problem(entries: dict[bytes, tuple], path: bytes) -> Optional[str]:
    """Why ``path`` cannot be placed: an ancestor that is listed but is not a directory."""
    parent = path.rpartition(b"/")[0]
    while parent:
        if parent in entries and not stat.S_ISDIR(entries[parent][2]):
            return f"{show_path(parent)}, a parent of {show_path(path)}, is not a directory"
        parent = parent.rpartition(b"/")[0]
    return None


def _apply_or_why(entries: Entries, line: bytes, where: str) -> Optional[str]:
    fields = line.split(b"\t")
    op = fields[0]
    if op == b"#":
        return None             # a checkpoint marker or a note, not a change
    try:
        if op == b"+" and len(fields) == 6:
            path = _unescape(fields[5])
            why = path_problem(path)
            if why:
                return f"path {show_path(path)}: {why}"
            sigs = [] if fields[1] == b"-" else fields[1].decode("ascii").split(",")
            for text in sigs:
                sigmod.ContentKey.parse(text)
            size, mode = int(fields[2]), int(fields[3], 8)
            if not 0 <= size <= MAX_INT64 or stat.S_IFMT(mode) not in FILE_TYPES or mode >> 16:
                return f"bad size {fields[2][:40]!r} or mode {fields[3][:40]!r}"
            if path == b"/" and not stat.S_ISDIR(mode):
                return f"the root must be a directory, not mode {mode:o}"
            if stat.S_ISDIR(mode) and sigs:
                return "a directory with blocks"
            why = parent_problem(entries, path)
            if why:
                return why
            secs, _, frac = fields[4].decode("ascii").partition(".")
            if not frac.isdigit() and frac:
                return f"bad mtime {fields[4][:40]!r}"
            mtime = int(secs) * 10**9 + int((frac + "000000000")[:9])
            if not -MAX_INT64 <= mtime <= MAX_INT64:
                return f"mtime {fields[4][:40]!r} out of range"
            if not stat.S_ISDIR(mode) and entries.has_below(path):
                # names are listed below it: keep them rather than the contradiction
                return f"{show_path(path)} is not a directory, but names below it are listed"
            entries[path] = Entry(sigs, size, mode, mtime, where)
        elif op == b"-" and len(fields) == 2:
            gone = _unescape(fields[1])
            why = path_problem(gone)
            if why:
                return f"path {show_path(gone)}: {why}"
            if gone == b"/":
                return "removes the root"
            for p in [p for p in entries if p == gone or p.startswith(gone + b"/")]:
                del entries[p]
        elif op in (b">", b"<>") and len(fields) == 3:
            old, new = _unescape(fields[1]), _unescape(fields[2])
            for p in (old, new):
                why = path_problem(p)
                if why:
                    return f"path {show_path(p)}: {why}"
            if b"/" in (old, new):
                return "renames the root"
            if old == new:
                return None
            if new.startswith(old + b"/") or (op == b"<>" and old.startswith(new + b"/")):
                return f"moves {show_path(old)} into itself"
            if old.startswith(new + b"/"):      # rename(2) refuses it: the target is not empty
                return f"moves {show_path(old)} onto a directory above it"
            moved = {p: v for p, v in entries.items() if p == old or p.startswith(old + b"/")}
            if not moved:
                return None     # already applied (a journal replayed over a newer MANIFEST)
            why = parent_problem(entries, new) or (op == b"<>" and parent_problem(entries, old))
            if why:
                return why
            if op == b"<>":
                other = {p: v for p, v in entries.items() if p == new or p.startswith(new + b"/")}
                for p in list(moved) + list(other):
                    del entries[p]
                for p, v in other.items():
                    entries[old + p[len(new):]] = v
            else:
                for p in [p for p in entries if p == new or p.startswith(new + b"/")]:
                    del entries[p]
                for p in moved:
                    del entries[p]
            for p, v in moved.items():
                entries[new + p[len(old):]] = v
        else:
            return f"not a record this version knows ({len(fields)} fields, operation {op[:10]!r})"
    except (ValueError, UnicodeDecodeError) as exc:
        return f"does not parse ({exc})"
    return None
