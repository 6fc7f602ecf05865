"""The rooms of the WARC path and of an import (issue 27), checked on the
parsed code as t1_code_shape checks the whole: warcread is a parser that
reaches no catalog, placement, codec nor store; the import and the export of
a collection do not lean on each other; a WARC import supplies a source and
does not reshape the importer."""
from __future__ import annotations

import ast

from t1_code_shape import Module, imports, modules

NOT_FOR_A_PARSER = {"webfs.catalog", "webfs.placement", "webfs.codecs", "webfs.signature", "webfs.store"}
SOURCE_SUPPLIES = {"count", "walk", "prepare", "store_prepared"}


def reached(start: str, known: dict[str, Module]) -> set[str]:
    """Every webfs module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for name, _, _ in imports(known[todo.pop()], known):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def classes(mod: Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in mod.tree.body if isinstance(n, ast.ClassDef)}


def test_warcread_is_a_parser():
    known = modules()
    assert not reached("webfs.warcread", known) & NOT_FOR_A_PARSER
    assert reached("webfs.warcapart", known) & NOT_FOR_A_PARSER      # the check sees such an import


def test_import_and_export_stand_apart():
    known = modules()
    assert "webfs.warcexport" not in reached("webfs.warcimport", known)
    assert "webfs.warcimport" not in reached("webfs.warcexport", known)
    assert not {"webfs.warcimport", "webfs.warcexport"} & reached("webfs.warc", known)


def test_a_warc_import_supplies_only_a_source():
    known = modules()
    importer = classes(known["webfs.ingest"])["Importer"]
    assert not SOURCE_SUPPLIES & {f.name for f in importer.body if isinstance(f, ast.FunctionDef)}
    for name, cls in classes(known["webfs.warcimport"]).items():
        bases = {b.id for b in cls.bases if isinstance(b, ast.Name)}
        assert "Importer" not in bases, f"{name} subclasses the importer"
    source = classes(known["webfs.warcimport"])["WarcSource"]
    assert [b.id for b in source.bases] == ["Source"]
    assert SOURCE_SUPPLIES <= {f.name for f in source.body if isinstance(f, ast.FunctionDef)}
