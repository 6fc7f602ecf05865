"""The reading process of an import: a per-record gzip file read by a process
of its own (``read_records_apart``), which also prepares each capture as the
importing process would: signs it, checks its WARC digest and compresses it
as a new block would hold it (unless a block has its signature, asked of the
catalog), and makes the signature tree's group directories it will need.
So both cores work and the importing process spends no interpreter time on
parsing nor hashing. If that process dies, the importing process says so
and reads on from the record after the last one it got.

What is read is webfs.warcread's (a pure parser); what is prepared is what
webfs.ingest would otherwise prepare in its threads.
"""
from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import json
import os
import queue
import signal
import struct
import subprocess
import sys
import termios
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Iterator, Optional

from . import childprocess, codecs, testkill
from . import signature as sigmod
from .capture import CAPTURE_TYPES, file_record
from .catalog import SignatureLookup
from .importcdxj import KeyMaker
from .placement import first_disk, ranked_disks
from .signature import signature
from .warcread import DigestCheck, Payload, Problem, Record, read_records, record_at, whole_file_gzip


# The reading process of an import (read_records_apart).
APART_BATCH = 64            # records it sends at once ...
FIRST_BATCH = 8             # ... after batches of 8, 16 and 32: the importing process waits for the first
BATCH_BYTES = 1 << 20       # ... or fewer, once their payloads hold this much (memory: RECEIVED_AHEAD of them)
APART_PIPE = 1 << 20        # the pipe's buffer: it reads on while a batch waits (Linux's default bound)
RECEIVED_AHEAD = 4          # batches received and not yet walked (the receiving thread's bound)
PR_SET_PDEATHSIG = 1         # prctl(2)
SEEN_KEPT = 200_000         # signatures it remembers having encoded (~100 B each)
# It makes the CDXJ keys of a file this long (read for longer than pywb takes
# to import, so its keys are made as it goes); a shorter file's are the
# importing process's, which imports pywb once.
CDX_KEYS_FROM = 8 << 20
# It makes them once the importing process is behind it (a batch waits in the
# pipe), or after this many records, whichever comes first.
KEYS_AFTER = 4096
_APART_MAIN = "from webfs.warcapart import _read_and_send; _read_and_send()"


@dataclass(frozen=True)
class Preparing:
    """What the reading process does to each capture of at most ``max_block``
    bytes besides reading it: sign it (``sign``: the store's signature is
    webfs's own), check its WARC digest, and encode it as the store would
    (``codec``, ``level``) unless an earlier capture of the file, or a block
    in the catalog (``catalog``, read only), has its signature. For a capture
    it encodes, it also makes the directory of the capture's placement group
    (``depth``) on the disk its block will go to, when that disk is a local
    directory (``disks``: [index, uuid, weight, present, its blocks/ directory
    or None] of every disk). ``cdx_keys``: make the CDXJ keys
    (importcdxj.KeyMaker)."""
    max_block: int
    sign: bool
    codec: str
    level: int
    catalog: Optional[str] = None
    depth: int = 0
    disks: list = field(default_factory=list)
    cdx_keys: bool = False


@dataclass
class CdxKeys:
    """What the CDXJ lines take from the records' headers, and their SURT keys
    and timestamps, made by the reading process (``KeyMaker.take``)."""
    keys: dict


@dataclass
class Again:
    """A record the reading process left to the importing one: its payload was
    kept in a file of that process (longer than SPILL_AT), so it is read again."""
    offset: int


def read_records_apart(path: str, preparing: Preparing, cdx_keys: Optional[dict] = None) -> Iterator[object]:
    """``read_records(path)``, read by a process of its own when the file is
    gzipped per record. A capture that process prepared comes with
    ``prepared``: (its signature, or None unless ``preparing.sign``; what
    ``DigestCheck.matches`` says of its WARC-Payload-Digest, None without
    one; its (codec, payload) as a new block would hold it, or None). The
    CDXJ keys that process made are put in ``cdx_keys`` (``KeyMaker``), if
    given, for a file of CDX_KEYS_FROM bytes or more (or ``preparing.cdx_keys``)."""
    try:
        with open(path, "rb") as fh:
            apart = fh.read(2) == b"\x1f\x8b" and not whole_file_gzip(fh)
            preparing = dataclasses.replace(preparing, cdx_keys=cdx_keys is not None and (
                preparing.cdx_keys or os.fstat(fh.fileno()).st_size >= CDX_KEYS_FROM))
        child = childprocess.start(_APART_MAIN, [path, json.dumps(dataclasses.asdict(preparing)), str(os.getpid())],
                                   stdout=subprocess.PIPE) if apart else None
    except OSError:
        child = None
    if child is None:
        yield from read_records(path)
        return
    try:
        fcntl.fcntl(child.stdout.fileno(), fcntl.F_SETPIPE_SZ, APART_PIPE)
    except OSError:
        pass                    # a smaller bound: the reading process waits more
    conn = Connection(os.dup(child.stdout.fileno()))
    child.stdout.close()
    receiver = _Receiver(conn)
    read_on = 0                 # where a record not received yet starts
    said: set = set()           # problems received after it
    ended = False
    try:
        while not ended:
            batch = receiver.get()
            if batch is _Receiver.BROKEN:
                break
            ended = batch is None
            for rec in batch or ():
                if isinstance(rec, CdxKeys):
                    if cdx_keys is not None:
                        cdx_keys.update(rec.keys)
                    continue
                if isinstance(rec, Again):
                    rec = record_at(path, rec.offset)
                if isinstance(rec, Record):
                    read_on, said = rec.offset + rec.length, set()
                else:
                    said.add((rec.offset, rec.text))
                yield rec
    finally:
        if not ended:
            child.kill()
        receiver.close()
        child.wait()
        conn.close()
    if ended:
        return
    how = f"killed by signal {-child.returncode}" if child.returncode < 0 else f"exit status {child.returncode}"
    yield Problem(read_on, f"the process reading this file ended early ({how}); read on from here")
    for rec in read_records(path, read_on):
        if isinstance(rec, Record) or (rec.offset, rec.text) not in said:
            yield rec


class _Receiver:
    """The reading process's batches, received from its pipe by a thread of
    their own, at most RECEIVED_AHEAD ahead of the walk: the walk takes a
    batch already unpickled instead of waiting on the pipe for the reading
    process, which at load, for a batch longer than what the pipe held, woke
    for every part of it. Ends with None (that process's end) or BROKEN (its
    pipe closed first: it died)."""
    BROKEN = object()

    def __init__(self, conn: Connection):
        self.conn = conn
        self.batches: queue.Queue = queue.Queue(RECEIVED_AHEAD)
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._receive, name="warc-receiver", daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        batch: object = ()
        while batch is not None and batch is not self.BROKEN:
            try:
                batch = self.conn.recv()
            except Exception:      # EOF, or a batch that does not unpickle: read on without it
                batch = self.BROKEN
            while not self.closing.is_set():
                try:
                    self.batches.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    pass

    def get(self) -> object:
        return self.batches.get()

    def close(self) -> None:
        """Stop receiving (the walk stopped, or the process ended or was killed:
        its pipe gives EOF), and wait for the thread."""
        self.closing.set()
        while self.thread.is_alive():
            try:
                self.batches.get(timeout=0.1)
            except queue.Empty:
                pass
        self.thread.join()


def _read_and_send() -> None:
    """The reading process: ``read_records`` of argv[2] to standard output, in
    pickled batches, then None; its captures prepared as argv[3] (Preparing,
    as JSON) says; argv[4] is the importing process's id."""
    path, preparing = sys.argv[2], Preparing(**json.loads(sys.argv[3]))
    # Ctrl-C is the importing process's to act on (childprocess); an importing
    # process gone closes the pipe, which this one only notices when it
    # writes: so it is also killed with it.
    _die_with(int(sys.argv[4]))
    testkill.arm()
    conn = Connection(os.dup(1))
    os.dup2(2, 1)                         # nothing else reaches the pipe
    try:
        _send_records(conn, path, preparing)
    except (BrokenPipeError, ConnectionResetError):
        pass


def _die_with(parent: int) -> None:
    """Be sent SIGKILL when the importing process (thread) ends (Linux's
    PR_SET_PDEATHSIG), or end now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass                      # not Linux: the closed pipe still ends it when it writes
    if os.getppid() != parent:
        os._exit(1)


def _unread(conn: Connection) -> bool:
    """Does the pipe still hold a batch the importing process has not taken?
    (It takes them ahead of its walk, RECEIVED_AHEAD at most: then it is behind.)"""
    try:
        return struct.unpack("i", fcntl.ioctl(conn.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0] > 0
    except OSError:
        return False


def _send_records(conn: Connection, path: str, preparing: Preparing) -> None:
    encoder = _Encoder(preparing)
    keys = KeyMaker() if preparing.cdx_keys else None
    batch: list = []
    size, held, sent = FIRST_BATCH, 0, 0
    for rec in read_records(path):
        if isinstance(rec, Record):
            if keys is not None:
                keys.add(rec)
            if isinstance(rec.payload, Payload):
                rec = Again(rec.offset)
            elif rec.rtype in CAPTURE_TYPES:
                _prepare(rec, preparing)
        batch.append(rec)
        held += len(rec.payload) if isinstance(rec, Record) else 0
        if len(batch) >= size or held >= BATCH_BYTES:
            sent += len(batch)
            if keys is not None and not keys.started and (sent >= KEYS_AFTER or _unread(conn)):
                keys.start()
            conn.send(encoder.encoded(batch) + ([CdxKeys(keys.take())] if keys is not None else []))
            batch, size, held = [], min(2 * size, APART_BATCH), 0
            testkill.point("warc-reader-after-batch")
    conn.send(encoder.encoded(batch))
    if keys is not None:        # after the last records, which the importing process stores meanwhile
        conn.send([CdxKeys(keys.take(wait=True))])
    conn.send(None)


def _prepare(rec: Record, preparing: Preparing) -> None:
    """A capture record filed (capture.file_record), and what its file shows
    (its document, if decoded) signed and checked, when it fits in a block. A
    record that cannot be filed is left for the importing process to say so."""
    try:
        rec.filed = file_record(rec)
    except (ValueError, RecursionError):
        return
    if rec.rtype != "revisit" and len(rec.shown) <= preparing.max_block:
        check = DigestCheck(rec.fields.get(b"warc-payload-digest"))
        check.update(rec.payload)
        rec.prepared = (signature(rec.shown) if preparing.sign else None, check.matches(), None)


class _Encoder:
    """The reading process's encoding of captures whose signature no block has."""

    def __init__(self, preparing: Preparing):
        self.preparing = preparing
        self.seen: set[str] = set()
        self.catalog = SignatureLookup(preparing.catalog) if preparing.catalog else None
        self.made: set[str] = set()         # groups whose directory is there
        self.present = {i for i, _, _, present, _ in preparing.disks if present}
        self.blocks_dirs = {i: d for i, _, _, _, d in preparing.disks if d is not None}

    def encoded(self, batch: list) -> list:
        todo = [r for r in batch if isinstance(r, Record) and r.prepared is not None]
        sigs = list({r.prepared[0] for r in todo if r.prepared[0] is not None} - self.seen)
        known = self.catalog.having(sigs) if self.catalog is not None else set()
        if len(self.seen) > SEEN_KEPT:
            self.seen.clear()
        new = set()
        for r in todo:
            sig, matches, _ = r.prepared
            if sig is None or not (sig in self.seen or sig in known):
                r.prepared = (sig, matches, codecs.encode(r.shown, self.preparing.codec, self.preparing.level))
                if sig is not None:
                    new.add(sig)
            if sig is not None:
                self.seen.add(sig)
        self.make_group_dirs(new)
        return batch

    def make_group_dirs(self, sigs: set[str]) -> None:
        """Make the placement group directories the new blocks of these
        signatures will be written in, on their disks (``Store.home_disks``'s
        first), ahead of the importing process: on a fresh archive most new
        blocks start a group, and making its directory (ext4) was a tenth of
        that process's time. A directory made for nothing is harmless, an
        empty group; one this cannot make, the importing process makes. A
        disk whose root directory is gone is left alone (never made again)."""
        depth = self.preparing.depth
        if not depth or not self.blocks_dirs:
            return
        groups = list({sigmod.group_of(sig, depth) for sig in sigs} - self.made)
        mapped = self.catalog.group_disks(groups) if self.catalog is not None else {}
        disks = [(i, uuid, weight) for i, uuid, weight, _, _ in self.preparing.disks]
        if len(self.made) > SEEN_KEPT:
            self.made.clear()
        for grp in groups:
            blocks = self.blocks_dirs.get(first_disk(ranked_disks(grp, disks), mapped.get(grp),
                                                     self.present))
            if blocks is not None and _make_group_dir(blocks, sigmod.group_dir(grp)):
                self.made.add(grp)


def _make_group_dir(blocks: str, group_dir: str) -> bool:
    """A group's directory below a disk's blocks/, made; whether it is there.
    One mkdir for most (os.makedirs and a check of the disk's root were two
    stats more, per group): only where its parent is missing is the root
    asked for, since a mkdir below a parent that is there cannot make it."""
    path = os.path.join(blocks, group_dir)
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        return True
    except FileNotFoundError:
        if not os.path.isdir(os.path.dirname(blocks)):
            return False
        try:
            os.makedirs(path, exist_ok=True)
            return True
        except OSError:
            return False
    except OSError:
        return False
