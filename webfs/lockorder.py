"""Every lock of webfs made by name, and (under test) the order they are
taken in checked, as the kernel's lockdep checks it, in small.

The modules make their locks, conditions and semaphores here: ``lock``,
``rlock``, ``condition``, ``semaphore`` and ``keyed_lock`` for threads,
``task_lock`` and ``limiter`` for trio tasks. The names are the ones
webfs-internals(7), CONCURRENCY MODEL, describes (a test holds the two
together). Normally each returns the plain ``threading`` or ``trio`` object:
a function call when a lock is made is all this costs.

Checked (``checking()`` in a test, or ``WEBFS_LOCK_ORDER=1`` in a process's
environment as it starts), a thread lock comes wrapped. Each thread keeps the
names it holds; taking one while holding others adds the edges held -> taken
to one graph of names (a name is a lock *class*: every Catalog's lock is
"catalog"). An edge that closes a cycle is an inversion: two threads taking
those locks could each wait for the other, whether or not they did this time.
It raises ``LockOrderError`` naming both orders and where each was seen, and
stays in ``violations`` for the test to find (a worker's exception may be
swallowed by whoever ran it). Locks of one name held together (a store's
signature locks, ``KeyedLocks.many``) must be taken in key order. An
acquire that cannot wait for ever (non-blocking, or with a timeout) adds no
edge. trio's locks and
limiters are held by tasks, not threads: they are named, not checked.
"""
from __future__ import annotations

import logging
import os
import threading
import traceback
from contextlib import contextmanager
from typing import Iterator, Optional

log = logging.getLogger(__name__)

CHECK_ENV = "WEBFS_LOCK_ORDER"      # "1": check the lock order in this process (a test hook)


class LockOrderError(RuntimeError):
    """Two locks taken in both orders (a deadlock waiting to happen)."""


class Graph:
    """The order in which named locks were taken in this process, and the
    inversions found."""

    def __init__(self) -> None:
        self.after: dict[str, set[str]] = {}            # name -> names taken while it was held
        self.seen: dict[tuple[str, str], str] = {}      # edge -> where it was taken first
        self.violations: list[str] = []
        self.guard = threading.Lock()                   # the graph's own; never held while waiting

    def edges(self) -> set[tuple[str, str]]:
        with self.guard:
            return set(self.seen)

    def path(self, start: str, goal: str) -> Optional[list[str]]:
        """Names from ``start`` to ``goal`` along the edges, or None."""
        stack, came = [start], {start: ""}
        while stack:
            name = stack.pop()
            if name == goal:
                out = [name]
                while came[out[-1]]:
                    out.append(came[out[-1]])
                return out[::-1]
            for nxt in self.after.get(name, ()):
                if nxt not in came:
                    came[nxt] = name
                    stack.append(nxt)
        return None

    def add(self, held: str, taken: str, thread: str) -> Optional[str]:
        """Record held -> taken; the inversion it makes, said in one line, or None."""
        with self.guard:
            if taken in self.after.get(held, ()):
                return None
            back = self.path(taken, held)
            if back is None:
                self.after.setdefault(held, set()).add(taken)
                self.seen[(held, taken)] = f"thread {thread}: {_where()}"
                return None
            before = "; ".join(f"{a!r} -> {b!r} in {self.seen[(a, b)]}" for a, b in zip(back, back[1:]))
            said = (f"lock order inversion: {held!r} held while taking {taken!r} in thread {thread}: "
                    f"{_where()}; but before, {before}")
            self.violations.append(said)
            return said


def _where() -> str:
    """The webfs frames of this thread's stack, innermost last, in one line."""
    frames = [f for f in traceback.extract_stack()[:-3] if f"{os.sep}lockorder.py" not in f.filename
              and (f"{os.sep}webfs{os.sep}" in f.filename or f"{os.sep}backends{os.sep}" in f.filename)]
    return " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames[-8:]))


_graph: Optional[Graph] = Graph() if os.environ.get(CHECK_ENV, "") not in ("", "0") else None
_held = threading.local()


def _stack() -> list:
    stack = getattr(_held, "stack", None)
    if stack is None:
        stack = _held.stack = []
    return stack


class _Checked:
    """A thread lock (or semaphore) that tells the graph when it is taken."""

    def __init__(self, name: str, inner, graph: Graph, reentrant: bool = False, key=None):
        self.name = name
        self.key = key
        self._inner = inner
        self._graph = graph
        self._reentrant = reentrant
        self._shared = isinstance(inner, threading.Semaphore)     # held by several threads at once
        self._taker: Optional[list] = None

    def _check(self) -> None:
        stack = _stack()
        if self._reentrant and self in stack:
            return
        thread = threading.current_thread().name
        for other in stack:
            if other.name == self.name:
                if self.key is None or other.key is None or not other.key < self.key:
                    said = (f"lock order: two {self.name!r} locks held at once, not in key order "
                            f"({other.key!r} held, {self.key!r} taken) in thread {thread}: {_where()}")
                    self._graph.violations.append(said)
                    raise LockOrderError(said)
                continue
            said = self._graph.add(other.name, self.name, thread)
            if said is not None:
                log.error("%s", said)
                raise LockOrderError(said)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        if blocking and timeout is None:        # one that cannot wait for ever orders nothing
            self._check()
        # A Lock's "no timeout" is -1, a Semaphore's None: pass one only when given.
        got = self._inner.acquire(blocking) if timeout is None else self._inner.acquire(blocking, timeout)
        if got:
            stack = _stack()
            stack.append(self)
            self._taker = stack
        return got

    def release(self) -> None:
        self._inner.release()
        # A lock may be let go by another thread than took it (the JOURNAL's
        # checkpoint hands "checkpoint asked" to its thread): the taker's stack.
        stack = _stack()
        if self not in stack and not self._shared and self._taker is not None:
            stack = self._taker
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def locked(self) -> bool:
        return self._inner.locked()

    # What threading.Condition asks of its lock: wait() lets go of every level
    # of it and takes it back after, which is one more acquisition to check.
    def _is_owned(self) -> bool:
        return self in _stack()

    def _release_save(self):
        stack = _stack()
        levels = stack.count(self)
        stack[:] = [x for x in stack if x is not self]
        state = self._inner._release_save() if self._reentrant else self._inner.release()
        return state, levels

    def _acquire_restore(self, saved) -> None:
        state, levels = saved
        self._check()
        if self._reentrant:
            self._inner._acquire_restore(state)
        else:
            self._inner.acquire()
        _stack().extend([self] * levels)


def _made(name: str, inner, reentrant: bool = False, key=None):
    graph = _graph
    return inner if graph is None else _Checked(name, inner, graph, reentrant, key)


def lock(name: str) -> threading.Lock:
    return _made(name, threading.Lock())


def rlock(name: str) -> threading.RLock:
    return _made(name, threading.RLock(), reentrant=True)


def keyed_lock(name: str, key: str) -> threading.Lock:
    """One of a family of locks by key (``KeyedLocks``): taken together, in key order."""
    return _made(name, threading.Lock(), key=key)


def condition(name: str, over=None) -> threading.Condition:
    """A condition over ``over`` (a lock made here), or over a lock of its own named ``name``."""
    return threading.Condition(over if over is not None else rlock(name))


def semaphore(name: str, value: int) -> threading.BoundedSemaphore:
    return _made(name, threading.BoundedSemaphore(value))


def task_lock(name: str):
    import trio                 # not loaded by the commands and backends that need none
    return trio.Lock()


def limiter(name: str, tokens: int):
    import trio
    return trio.CapacityLimiter(tokens)


def holding_none(what: str) -> None:
    """(Checked only.) Before waiting for ``what`` that may itself wait for
    any lock (the event loop, from a worker thread): hold none."""
    graph = _graph
    held = getattr(_held, "stack", None)
    if graph is not None and held:
        said = (f"lock order: waiting for {what} while holding {', '.join(repr(x.name) for x in held)} "
                f"in thread {threading.current_thread().name}: {_where()}")
        graph.violations.append(said)
        raise LockOrderError(said)


def checked() -> Optional[Graph]:
    """The graph of this process while the order is checked, else None."""
    return _graph


@contextmanager
def checking() -> Iterator[Graph]:
    """Check the order of the locks made inside (a test's objects), on a graph of their own."""
    global _graph
    before, _graph = _graph, Graph()
    try:
        yield _graph
    finally:
        _graph = before
