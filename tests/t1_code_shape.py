"""The shape of the code (issues 14 and 27): no import cycles between the
modules of ``webfs`` (``backends/`` is installed as ``webfs.backends``), no
module reaching for another's private names, SQL only where the tables live
(``SQL_OWNERS``), no import of a higher layer from a lower one (``LAYERS``),
no attribute set on a store from outside ``webfs.store`` and no
``getattr(store, ...)`` probing (context travels in ``assembly.OpenArchive``),
the environment read only in ``ENV_READERS``, and no settings kept in a
module for whoever comes later (no ``global`` rebinding outside
``STATE_HOLDERS``, no module-level ``...Options`` value): they are passed.

Every module is parsed, not imported, so a cycle hidden in a function-level
import counts as much as one at the top: either way the two modules cannot
be understood (or tested) one without the other. A private name is one with
a leading underscore: ``from X import _name``, ``X._name`` on an imported
module, and ``obj._name`` where ``_name`` is defined only in other modules
(what a class keeps to itself) are all reaching in.

``KNOWN`` holds what is found today in modules other work is changing, each
with its reason; an entry that is no longer found fails too, so the list
only shrinks.
"""
from __future__ import annotations

import ast
import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = (("webfs", "webfs"), ("backends", "webfs.backends"))

KNOWN: dict[str, str] = {
    "module state set in webfs.indexer: global _enabled":
        "WEBFS_INDEX=0 turns indexing off for the process (indexer.turn_off); indexer is reworked elsewhere this round",
}

# The modules that own the catalog's tables and so may write SQL: the catalog,
# the namespace, and the parity package (its stripes table); and the query
# index's own tables: webfs.index and the query compiler over them.
SQL_OWNERS = ("webfs.catalog", "webfs.catalogengine", "webfs.catalogfile", "webfs.catalogmigration", "webfs.cataloggroups", "webfs.catalogsigs", "webfs.machines", "webfs.changes", "webfs.namespace", "webfs.parity", "webfs.index", "webfs.pgindex", "webfs.query")
SQL_METHODS = {"execute", "executemany", "executescript", "query", "scalar"}
SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA", "CREATE")

# The layers, top first (the first part of the module's name under webfs). A
# module may import from its own layer and those below, never from one above;
# a module not named is in the core, below them all.
LAYERS = (
    ("entry", "cli", "cli_warc", "cli_query", "quicksearch", "quickimport", "commandline"),  # the edge: arguments, environment, exit codes
    ("daemon", "mountstart", "mountoptions"),                 # the running mount, and starting it
    ("admincommands", "control", "fs", "replay", "versions"),  # what a mount or a command serves
    ("ingest", "importsource", "treesource", "preparation", "warc", "cdxj", "importcdxj", "warcimport", "warcexport",
     "warcread", "warcapart", "capture", "urlpath", "commands", "admin", "indexer", "indexprocess", "searching", "stream",
     "searchtree", "openfiles", "readcache", "kernelpages", "controltree", "warcview", "groupcommit"),  # the work they do
    ("recovery",),                                            # namespace and journal opened, crash mended
    ("assembly",),                                            # an archive's parts put together
)

# The only modules that read the environment (os.environ, os.getenv): the
# CLI, at the edge, and the test hooks, each with what it reads.
ENV_READERS = {
    "webfs.cli": "the user's settings: S3 disks and leases (webfs.backends.options), WEBFS_INDEX",
    "webfs.quicksearch": "whether a setting webfs.cli checks is set: then webfs.cli runs the search",
    "webfs.quickimport": "the same, for an import into a mount (quicksearch's CHECKED_ENVIRONMENT)",
    "webfs.testkill": "WEBFS_TEST_KILL_AT: a test hook, read by the daemon itself to die (stop, wait) at a named point",
    "webfs.lockorder": "WEBFS_LOCK_ORDER: a test hook, read as the module loads, before any lock exists",
    "webfs.daemon": "WEBFS_TRACEMALLOC: a debug hook of the soak tests, the daemon's own memory trace",
}


# The only modules that keep state of the process in module globals: the
# test hooks, each with what it keeps.
STATE_HOLDERS = {
    "webfs.testkill": "the kill point armed, the passes left before it fires, its signal or the pipe it waits on",
    "webfs.lockorder": "the graph of lock orders seen, while a test checks them",
}


@dataclass
class Module:
    name: str
    path: str
    is_package: bool
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def modules() -> dict[str, Module]:
    """Every module under ``ROOT``, parsed: once per root in a process (the
    checks here and in t1_warc_modules only read the trees)."""
    return dict(_parsed(ROOT))


@functools.lru_cache(maxsize=None)
def _parsed(root: str) -> dict[str, Module]:
    out = {}
    for top, dotted in PACKAGES:
        base = os.path.join(root, top)
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(d, f)
                parts = os.path.relpath(path, base)[:-3].split(os.sep)
                is_package = parts[-1] == "__init__"
                name = ".".join([dotted] + parts[:-1 if is_package else None])
                with open(path, encoding="utf-8") as fh:
                    out[name] = Module(name, path, is_package, ast.parse(fh.read(), path))
    return out


def imports(mod: Module, known: dict[str, Module]) -> Iterator[tuple[str, str | None, ast.AST]]:
    """(module imported, name taken from it or None, node) for every import
    of a webfs module anywhere in ``mod``, functions included."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    yield a.name, None, node
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = base + ("." + node.module if node.module else "")
            else:
                source = node.module or ""
            if source not in known:
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                yield (sub, None, node) if sub in known else (source, a.name, node)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def cycles(known: dict[str, Module]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    edges = {name: sorted({t for t, _, _ in imports(m, known) if t != name}) for name, m in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def private_uses(known: dict[str, Module]) -> list[str]:
    owners: dict[str, set[str]] = {}         # private name -> modules that define it
    for name, m in known.items():
        for node in ast.walk(m.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined = [node.name]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined = [node.attr]
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined = [node.id]
            else:
                continue
            for d in defined:
                if is_private(d):
                    owners.setdefault(d, set()).add(name)
    found = []
    for name, m in known.items():
        module_names = {}
        for target, taken, node in imports(m, known):
            if taken is not None and is_private(taken):
                found.append(f"private {name}: from {target} import {taken}")
            if taken is None:
                for a in node.names:
                    module_names[a.asname or a.name.rpartition(".")[2]] = target
        for node in ast.walk(m.tree):
            if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in module_names:
                found.append(f"private {name}: {ast.unparse(node)}")
            elif not (isinstance(base, ast.Name) and base.id in ("self", "cls")) and \
                    owners.get(node.attr) and name not in owners[node.attr]:
                found.append(f"private {name}: {ast.unparse(node)}")
    return found


def layer(name: str) -> int:
    part = name.split(".")[1] if "." in name else ""
    return next((i for i, group in enumerate(LAYERS) if part in group), len(LAYERS))


def upward_imports(known: dict[str, Module]) -> list[str]:
    """Imports of a module in a higher layer (``LAYERS``) than the importer's."""
    return [f"layer {name} imports {target}" for name, m in known.items()
            for target, _, _ in imports(m, known) if layer(target) < layer(name)]


def names_a_store(node: ast.AST) -> bool:
    """``store`` or ``X.store``: what holds a ``Store`` by the name it goes by."""
    return (isinstance(node, ast.Name) and node.id == "store") or \
        (isinstance(node, ast.Attribute) and node.attr == "store")


def store_context(known: dict[str, Module]) -> list[str]:
    """Attributes set on a store outside ``webfs.store``, and a store probed
    with ``getattr``/``hasattr`` for what someone may have set on it."""
    found = []
    for name, m in known.items():
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and names_a_store(node.value) and name != "webfs.store":
                found.append(f"store attribute set in {name}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr") and node.args \
                    and names_a_store(node.args[0]):
                found.append(f"store probed in {name}:{node.lineno}: {ast.unparse(node)}")
    return found


ENV_NAMES = ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv")


def environment_reads(known: dict[str, Module]) -> list[str]:
    """``os.environ``, ``os.getenv`` (reading) and ``os.putenv`` (writing)
    outside ``ENV_READERS``, imported by name or not."""
    found = []
    for name, m in known.items():
        if name in ENV_READERS:
            continue
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Attribute) and node.attr in ENV_NAMES) or \
                    (isinstance(node, ast.Name) and node.id in ENV_NAMES):
                found.append(f"environment read in {name}:{node.lineno}")
    return found


def names_options(node: ast.AST) -> bool:
    """Whether an expression names an ``...Options`` class (not a string that does)."""
    return any((isinstance(n, ast.Name) and n.id.endswith("Options")) or
               (isinstance(n, ast.Attribute) and n.attr.endswith("Options")) for n in ast.walk(node))


def module_state(known: dict[str, Module]) -> list[str]:
    """A ``global`` statement (a function rebinding its module's state)
    outside ``STATE_HOLDERS``, and a module-level name given an ``...Options``
    value or type (settings installed for whoever opens something later,
    instead of passed to it)."""
    found = []
    for name, m in known.items():
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Global) and name not in STATE_HOLDERS:
                found.append(f"module state set in {name}: global {', '.join(node.names)}")
        for node in m.tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and \
                    (names_options(node.value) or
                     (isinstance(node, ast.AnnAssign) and "Options" in ast.unparse(node.annotation))):
                found.append(f"options kept at module level in {name}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def findings() -> list[str]:
    return list(_findings(ROOT))


@functools.lru_cache(maxsize=None)
def _findings(root: str) -> tuple[str, ...]:
    known = dict(_parsed(root))
    out = [f"cycle among {', '.join(group)}" for group in cycles(known)]
    out += upward_imports(known) + store_context(known) + environment_reads(known) + module_state(known)
    return tuple(sorted(set(out + private_uses(known))))


def sql_uses(known: dict[str, Module]) -> list[str]:
    """Calls of execute/query/scalar/... whose first argument is SQL text (a
    string starting with an SQL word, or an f-string) outside ``SQL_OWNERS``."""
    found = []
    for name, m in known.items():
        if any(name == owner or name.startswith(owner + ".") for owner in SQL_OWNERS):
            continue
        for node in ast.walk(m.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SQL_METHODS and node.args):
                continue
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) or (
                    isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and first.value.lstrip().upper().startswith(SQL_WORDS)):
                found.append(f"sql {name}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_sql_only_in_the_modules_that_own_the_tables():
    found = sql_uses(modules())
    assert not found, "SQL outside " + ", ".join(SQL_OWNERS) + ":\n" + "\n".join(found)


def test_the_check_sees_sql_outside_its_owners(tmp_path, monkeypatch):
    pkg = tmp_path / "webfs"
    (pkg / "parity").mkdir(parents=True)
    for f in ("__init__.py", "parity/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "catalog.py").write_text("def f(db):\n    db.execute('SELECT 1')\n")
    (pkg / "parity" / "layout.py").write_text("def f(cat):\n    cat.query('SELECT 1')\n")
    (pkg / "other.py").write_text("def f(cat, t, log):\n    cat.scalar(f'SELECT {t}')\n"
                                  "    cat.execute('  update x set y=1')\n    log.execute('run')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert [f.partition(": ")[0] for f in sql_uses(modules())] == ["sql webfs.other:2", "sql webfs.other:3"]


def test_no_import_cycles_and_no_private_names():
    found = findings()
    new = [f for f in found if f not in KNOWN]
    assert not new, "the code's shape broke:\n" + "\n".join(new)


def test_known_findings_are_still_there():
    gone = sorted(set(KNOWN) - set(findings()))
    assert not gone, "fixed, so take them off KNOWN:\n" + "\n".join(gone)


def test_the_check_sees_a_cycle_and_a_private_name(tmp_path, monkeypatch):
    """The checker itself: two modules that import each other (one lazily)
    and reach for a private name are both caught."""
    pkg = tmp_path / "webfs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import _hidden\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n_hidden = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert findings() == ["cycle among webfs.a, webfs.b", "private webfs.a: from webfs.b import _hidden"]


def test_the_check_sees_hidden_context(tmp_path, monkeypatch):
    """The checker itself: what issue 27 found (a lower layer importing the
    daemon, the daemon hanging the namespace on the store, an import probing
    for it, a backend reading its options from the environment) is caught;
    the store setting its own attributes, and the CLI reading the
    environment, are not."""
    pkg = tmp_path / "webfs"
    (pkg / "backends").mkdir(parents=True)
    for f in ("__init__.py", "backends/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "daemon.py").write_text("def open(self, store, ns):\n    store.namespace = ns\n")
    (pkg / "ingest.py").write_text("from .daemon import open\n"
                                   "def f(store):\n    return getattr(store, 'namespace', None)\n")
    (pkg / "store.py").write_text("class Store:\n    def use(self, store):\n        self.store = store\n"
                                  "        store.journal = None\n")
    (pkg / "backends" / "s3.py").write_text("import os\nKEY = os.environ.get('K')\n")
    (pkg / "cli.py").write_text("import os\nfrom . import daemon\nKEY = os.environ.get('K')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert findings() == ["environment read in webfs.backends.s3:2",
                          "layer webfs.ingest imports webfs.daemon",
                          "store attribute set in webfs.daemon:2: store.namespace",
                          "store probed in webfs.ingest:3: getattr(store, 'namespace', None)"]


def test_the_check_sees_every_way_to_the_environment(tmp_path, monkeypatch):
    """The checker itself: the environment read with getenv or a bare
    ``environ``, or written (an option handed to a forked daemon), anywhere
    but the CLI and the test hooks, is caught; an ``env`` mapping passed in is not."""
    pkg = tmp_path / "webfs"
    (pkg / "backends").mkdir(parents=True)
    for f in ("__init__.py", "backends/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "locks.py").write_text("import os\nRENEW = os.getenv('R')\n")
    (pkg / "mountstart.py").write_text("import os\ndef take():\n    os.environ['T'] = '1'\n")
    (pkg / "control.py").write_text("from os import environ\nTMP = environ.get('TMPDIR')\n")
    (pkg / "backends" / "options.py").write_text("def parse(env):\n    return env.get('K')\n")
    (pkg / "testkill.py").write_text("import os\nAT = os.environ.get('A')\n")
    (pkg / "cli.py").write_text("import os\nfrom .backends import options\nKEY = options.parse(os.environ)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert findings() == ["environment read in webfs.control:2",
                          "environment read in webfs.locks:2",
                          "environment read in webfs.mountstart:3"]


def test_the_check_sees_options_kept_in_a_module(tmp_path, monkeypatch):
    """The checker itself: the command line's options installed in a module
    for a disk opened later without them (``backends.options.install``, as
    it was), or kept there as a default, is caught; the test hooks' globals,
    a dataclass of options and a module-level constant are not."""
    pkg = tmp_path / "webfs"
    (pkg / "backends").mkdir(parents=True)
    for f in ("__init__.py", "backends/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "backends" / "options.py").write_text(
        "from typing import Optional\nDEFAULT_REQUESTS = 16\nclass BackendOptions:\n    pass\n"
        "_process: Optional['BackendOptions'] = None\n"
        "def install(options):\n    global _process\n    _process = options\n")
    (pkg / "archive.py").write_text("from .backends.options import BackendOptions\nDEFAULTS = BackendOptions()\n")
    (pkg / "testkill.py").write_text("_armed = None\ndef arm():\n    global _armed\n    _armed = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert findings() == ["module state set in webfs.backends.options: global _process",
                          "options kept at module level in webfs.archive:2: DEFAULTS = BackendOptions()",
                          "options kept at module level in webfs.backends.options:5: "
                          "_process: Optional['BackendOptions'] = None"]


def test_every_module_is_in_the_code_map():
    with open(os.path.join(ROOT, "man", "webfs-internals.7"), encoding="utf-8") as f:
        text = f.read()
    code_map = text[text.index(".SS Code map"):]
    code_map = code_map[:code_map.index("\n.SS ", 1)]
    missing = [name for name in modules()
               if not re.search(rf"\b{re.escape(name.rpartition('.')[2])}\b", code_map)]
    assert not missing, "webfs-internals(7)'s code map does not name: " + ", ".join(missing)


# Issue 27: a module is read in one sitting; past this many lines it holds
# more than one idea and is split along its seams.
MAX_MODULE_LINES = 700


def long_modules(known: dict[str, Module]) -> list[str]:
    out = []
    for mod in known.values():
        with open(mod.path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_MODULE_LINES:
            out.append(f"{mod.name}: {n} lines")
    return sorted(out)


def test_no_module_over_the_line_limit():
    found = long_modules(modules())
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them along their seams):\n" + "\n".join(found)


def test_the_check_sees_a_long_module(tmp_path, monkeypatch):
    pkg = tmp_path / "webfs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (pkg / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert long_modules(modules()) == [f"webfs.long: {MAX_MODULE_LINES + 1} lines"]
