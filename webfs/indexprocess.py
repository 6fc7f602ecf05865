"""The indexing process: index passes made by a process of its own.

This module owns starting it (``Apart``), what goes between it and the
process that asks for its passes (requests on its stdin, answers and what
it logged on its stdout, its stderr said again by the asker), and its end:
asked to (``close``), dead (``IndexerGone``), or left to make an import's
last pass on its own (``leave``). The passes themselves are webfs.indexer's
(its ``serve_apart`` runs ``serve`` with them).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Optional

from . import childprocess, heapmemory, lockorder, testkill
from .assembly import open_archive
from .errors import WebfsError

log = logging.getLogger(__name__)

NOT_UP_TO_DATE = "the query index was not brought up to date (%s); 'webfs reindex' rebuilds it"
NOTHING_DONE = {"indexed": 0, "documents": 0, "dropped": 0, "dropped_documents": 0}


class IndexingFailed(WebfsError):
    """A pass in the indexing process failed (the index could not be written)."""


class IndexerGone(WebfsError):
    """The indexing process ended without answering (killed, or crashed)."""


APART_MAIN = "from webfs.indexer import serve_apart; serve_apart()"
APART_STOP_SECONDS = 10         # a pass that outlasts this at unmount is killed: the next one redoes its batch


class Apart:
    """Index passes made by a process of its own, one at a time, each when
    asked (``run_pass``): it opens the archive read-only (as ``webfs status``
    does) and makes the pass as ``catch_up`` would here, while the asking
    thread waits on a pipe without holding the interpreter. What it logs is
    logged here, with its answer."""

    def __init__(self, store, nice: int = 0):
        # Its stderr through a pipe of its own: a process left to end its last
        # pass (leave) must not hold the import's, which a caller may read to its end.
        self.child = childprocess.start(APART_MAIN, [], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        threading.Thread(target=_say_again, args=(self.child.stderr,), name="index process stderr",
                         daemon=True).start()
        self.requests = Connection(os.dup(self.child.stdin.fileno()))
        self.replies = Connection(os.dup(self.child.stdout.fileno()))
        self.child.stdin.close()
        self.child.stdout.close()
        self._sending = lockorder.lock("index requests")
        self.left = False                       # the last pass handed to it (leave): no more requests
        self.requests.send((store.archive.opened_from, store.archive.backend_options,
                            logging.getLogger().getEffectiveLevel(), nice))

    def run_pass(self) -> dict:
        try:
            with self._sending:
                if self.left:
                    return dict(NOTHING_DONE)
                self.requests.send("pass")
            kind, answer, said = self.replies.recv()
        except (EOFError, OSError):
            raise IndexerGone(f"the indexing process ended ({self._ended()})") from None
        for level, name, text in said:
            logging.getLogger(name).log(level, "%s", text)
        if kind == "failed":
            raise IndexingFailed(answer)
        return answer

    def _ended(self) -> str:
        code = self._wait()
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def _wait(self) -> int:
        try:
            return self.child.wait(APART_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.child.kill()
            return self.child.wait()

    def leave(self) -> None:
        """Have the process make one more pass and end, not waited for: it
        lets go of this process's stderr (its warnings go to ``LEFT_LOG``)."""
        with self._sending:
            self.left = True
            self.requests.send("last")
            self.requests.close()

    def close(self) -> None:
        """End the process (its requests closed, it ends after its pass)."""
        self.requests.close()
        self._wait()
        self.replies.close()


def _say_again(stderr) -> None:
    """What the indexing process writes on its stderr (a traceback), written on this process's."""
    with stderr:
        for line in stderr:
            sys.stderr.write(line.decode("utf-8", "replace"))
            sys.stderr.flush()


class _Said(logging.Handler):
    """The indexing process's log records, kept to go with its answer."""

    def __init__(self):
        super().__init__()
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))

    def take(self) -> list[tuple[int, str, str]]:
        taken, self.records = self.records, []
        return taken


def serve(catch_up, location) -> None:
    """The indexing process (``Apart``): a pass (``catch_up``) for each request on
    standard input, its answer on standard output; ends when its input closes."""
    testkill.arm()
    requests, replies = Connection(os.dup(0)), Connection(os.dup(1))
    os.dup2(2, 1)                                       # nothing else reaches the pipe
    where, options, level, nice = requests.recv()
    os.nice(nice)
    said = _Said()
    logging.getLogger().handlers[:] = [said]
    logging.getLogger().setLevel(level)
    store = None
    try:
        while True:
            try:
                request = requests.recv()
            except EOFError:
                return
            if request == "last":
                _on_its_own()
            try:
                store = store or open_archive(where, lock=False, options=options)
                answer = ("done", catch_up(store))
            except (OSError, sqlite3.Error, WebfsError) as exc:
                answer = ("failed", str(exc))
                if request == "last":
                    log.warning(NOT_UP_TO_DATE, exc)
            if request == "last":
                _keep_said(store and location(store), where, said.take())
                return
            heapmemory.trim()                   # what the pass parsed, given back while the next waits
            try:
                replies.send(answer + (said.take(),))
            except OSError:                     # the import ended: its "last" (or EOF) is next
                pass
    finally:
        if store is not None:
            store.catalog.close()


LEFT_LOG = "index.log"          # beside index.db: what the last pass of an import not waited for said


def _on_its_own() -> None:
    """The import that started this process ended without waiting for its
    last pass: nothing reads its stderr now, and its session (its
    terminal's signals) is not this pass's."""
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
    with contextlib.suppress(OSError):
        os.setsid()


def _keep_said(index_dir: Optional[str], where: str, said: list[tuple[int, str, str]]) -> None:
    """The warnings of the last pass, appended to ``LEFT_LOG`` (made only
    when there are some), as no one is left to read them."""
    lines = [text for level, _, text in said if level >= logging.WARNING]
    if not lines:
        return
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.suppress(OSError, sqlite3.Error, WebfsError):
        directory = index_dir or os.path.join(where, "meta")
        with open(os.path.join(directory, LEFT_LOG), "a", encoding="utf-8") as out:
            out.writelines(f"{stamp} webfs: {line}\n" for line in lines)
