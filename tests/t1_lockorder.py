"""webfs.lockorder: the lock-order check itself (an inversion is seen even when
no deadlock happens), and that every lock the code makes is named in
webfs-internals(7), CONCURRENCY MODEL (issue 27)."""
from __future__ import annotations

import ast
import os
import re
import threading

import pytest

from webfs import lockorder
from webfs.locks import KeyedLocks
from webfs.lockorder import LockOrderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACTORIES = {"lock", "rlock", "condition", "semaphore", "keyed_lock", "task_lock", "limiter", "KeyedLocks"}
RAW = {("threading", "Lock"), ("threading", "RLock"), ("threading", "Condition"), ("threading", "Semaphore"),
       ("threading", "BoundedSemaphore"), ("trio", "Lock"), ("trio", "StrictFIFOLock"), ("trio", "Condition"),
       ("trio", "Semaphore"), ("trio", "CapacityLimiter")}
# Where the factory itself, and the leaf locks of the lease and KeyedLocks'
# guard, make plain ones (named in the page by Class.attribute).
RAW_ALLOWED = ("webfs/lockorder.py", "webfs/locks.py")


def in_thread(fn) -> None:
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_off_a_lock_is_the_plain_object():
    assert lockorder.checked() is None or os.environ.get(lockorder.CHECK_ENV)
    if lockorder.checked() is None:
        assert type(lockorder.lock("a")) is type(threading.Lock())
        assert type(lockorder.rlock("a")) is type(threading.RLock())
        assert type(lockorder.semaphore("a", 2)) is threading.BoundedSemaphore


def test_two_locks_taken_in_both_orders_fail_without_a_deadlock():
    with lockorder.checking() as graph:
        a, b = lockorder.lock("a"), lockorder.lock("b")

        def a_then_b():
            with a, b:
                pass
        in_thread(a_then_b)
        with b:
            with pytest.raises(LockOrderError, match=r"'b' held while taking 'a'.*'a' -> 'b'"):
                a.acquire()
        assert not a.locked()
        assert len(graph.violations) == 1 and graph.edges() == {("a", "b")}


def test_a_cycle_through_three_locks_is_found():
    with lockorder.checking() as graph:
        a, b, c = (lockorder.lock(n) for n in "abc")
        with a, b:
            pass
        with b, c:
            pass
        with c:
            with pytest.raises(LockOrderError, match=r"'a' -> 'b'.*'b' -> 'c'"):
                a.acquire()
        assert graph.violations


def test_the_same_order_again_is_fine_and_a_try_lock_orders_nothing():
    with lockorder.checking() as graph:
        a, b = lockorder.lock("a"), lockorder.lock("b")
        for _ in range(3):
            with a, b:
                pass
        with b:
            assert a.acquire(blocking=False)       # cannot wait, so cannot deadlock
            a.release()
        assert not graph.violations and graph.edges() == {("a", "b")}


def test_an_rlock_taken_again_and_a_condition_wait():
    with lockorder.checking() as graph:
        outer, shared = lockorder.lock("outer"), lockorder.rlock("shared")
        ready = lockorder.condition("shared", shared)
        flag = []

        def notify():
            with ready:
                flag.append(1)
                ready.notify_all()
        with outer, shared, shared:
            t = threading.Thread(target=notify)
            t.start()
            with ready:
                while not flag:
                    ready.wait(10)      # lets go of both levels of "shared", takes them back
            t.join()
        assert flag and not graph.violations
        with shared:
            with pytest.raises(LockOrderError):
                outer.acquire()


def test_a_semaphore_waits_when_it_has_no_room():
    with lockorder.checking():
        gate = lockorder.semaphore("gate", 1)
        with gate:
            assert not gate.acquire(blocking=False)
            assert not gate.acquire(timeout=0.01)
        assert gate.acquire(timeout=0.01)
        gate.release()


def test_keyed_locks_are_taken_in_key_order_and_a_fresh_one_orders_nothing():
    with lockorder.checking() as graph:
        keyed, other = KeyedLocks("keyed"), lockorder.lock("other")
        with keyed.many(["b", "a", "c"]):
            pass
        with keyed("b"):
            with pytest.raises(LockOrderError, match="not in key order"):
                with keyed("a"):
                    pass
        graph.violations.clear()
        with keyed("a"):
            with other:
                pass
        with other:
            with keyed("new", fresh=True):      # made under "other": nobody else can wait for it
                pass
        with keyed("x"), pytest.raises(RuntimeError, match="already held"):
            in_thread(lambda: keyed("x", fresh=True).__enter__())
        assert not graph.violations and graph.edges() == {("keyed", "other")}


# -- every lock the code makes is in the concurrency model --------------------------


def made_locks(path: str, source: str) -> list[str]:
    """What the page must name for each lock this module makes: the factory's
    name, or Class.attribute of a plain one; a plain one where the factory
    should be used is a finding ("raw ...")."""
    tree = ast.parse(source)
    found: list[str] = []
    owner: dict[ast.AST, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for sub in ast.walk(node):
                owner.setdefault(sub, node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            func = call.func
            maker = (func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                     else None, func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None))
            if maker in RAW:
                target = node.targets[0]
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "?")
                where = f"{owner[node]}.{name}" if node in owner else name
                found.append(where if path in RAW_ALLOWED else f"raw {path}:{node.lineno} {where}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            via = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            if fname in FACTORIES and via in (None, "lockorder") and path != "webfs/lockorder.py":
                if fname != "KeyedLocks" and via is None and path != "webfs/locks.py":
                    continue
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append(arg.value)
                elif not (path == "webfs/locks.py" and fname == "keyed_lock"):
                    found.append(f"unnamed {path}:{node.lineno}")
            elif (via, fname) in RAW and path not in RAW_ALLOWED and not any(
                    isinstance(p, ast.Assign) and p.value is node for p in ast.walk(tree)):
                found.append(f"raw {path}:{node.lineno} {via}.{fname}()")
    return found


def code_locks() -> dict[str, str]:
    """Each name the page must hold -> the module that makes it."""
    out: dict[str, str] = {}
    for top in ("webfs", "backends"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.relpath(os.path.join(dirpath, f), ROOT)
                    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
                        for name in made_locks(path, fh.read()):
                            out.setdefault(name, path)
    return out


def concurrency_model() -> str:
    with open(os.path.join(ROOT, "man", "webfs-internals.7"), encoding="utf-8") as f:
        text = f.read()
    start = text.index(".SH CONCURRENCY MODEL")
    section = text[start:text.index("\n.SH ", start + 1)]
    return re.sub(r"\\f[BIRPC]|\\\(..|\\", "", section)


def test_every_lock_the_code_makes_is_named_in_the_concurrency_model():
    found = code_locks()
    assert {"catalog", "signature", "stripe", "open file", "store threads"} <= set(found)
    raw = sorted(n for n in found if n.startswith(("raw ", "unnamed ")))
    assert not raw, ("make these with webfs.lockorder (lock, rlock, condition, semaphore, task_lock, "
                     "limiter) and a name: " + "; ".join(raw))
    section = concurrency_model()
    missing = sorted(f"{name} ({path})" for name, path in found.items() if name not in section)
    assert not missing, ("webfs-internals(7), CONCURRENCY MODEL, does not name these locks: "
                         + ", ".join(missing))


def test_the_scan_sees_a_plain_lock_and_an_unnamed_one():
    src = ("import threading, trio\nfrom webfs import lockorder\n"
           "class A:\n    def __init__(self, n):\n        self.guard = threading.Lock()\n"
           "        self.lim = trio.CapacityLimiter(2)\n        self.l = lockorder.lock(n)\n"
           "        self.ok = lockorder.rlock('fine')\nX = threading.RLock()\n")
    assert sorted(made_locks("webfs/x.py", src)) == ["fine", "raw webfs/x.py:5 A.guard", "raw webfs/x.py:6 A.lim",
                                                     "raw webfs/x.py:9 X", "unnamed webfs/x.py:7"]
    assert made_locks("webfs/locks.py", "import threading\nclass C:\n    def f(self):\n"
                      "        self._lock = threading.Lock()\n") == ["C._lock"]


def test_waiting_for_the_event_loop_with_a_lock_held_fails():
    with lockorder.checking() as graph:
        catalog = lockorder.rlock("catalog")
        lockorder.holding_none("the event loop")
        with catalog, pytest.raises(LockOrderError, match="waiting for the event loop while holding 'catalog'"):
            lockorder.holding_none("the event loop")
        assert len(graph.violations) == 1


def test_a_lock_let_go_by_another_thread_leaves_its_taker_holding_nothing():
    with lockorder.checking() as graph:
        asked, other = lockorder.lock("asked"), lockorder.lock("other")
        assert asked.acquire(blocking=False)
        in_thread(asked.release)
        with other:
            pass
        assert not graph.edges() and not graph.violations
