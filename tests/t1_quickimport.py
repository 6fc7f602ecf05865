"""webfs.quickimport reads a plain `webfs import` or `webfs import-warc`
command line as click reads it, and leaves every other one to click
(t4_import and t2_warc: what it prints, against click's path, into a real
mount)."""
from __future__ import annotations

import contextlib

import click
import pytest
from hypothesis import given, settings, strategies as st

from webfs.cli import import_ as import_command
from webfs.cli_warc import import_warc as import_warc_command
from webfs.quickimport import read_command_line, read_import_warc


def clicks_reading(command, args: list[str]):
    """(--json, {option: value}, SRC..., DEST) as the click command reads
    ARGS, or None if it refuses them."""
    try:
        ctx = command.make_context(command.name, list(args))
    except (click.exceptions.Exit, click.ClickException):
        return None
    p = ctx.params
    values = {"--collection": p["collection"]} if p.get("collection") is not None else {}
    return p["as_json"], values, list(p["sources"]), p["dest"]


def test_plain_command_lines_are_read():
    assert read_command_line(["a", "b/", "m/x"]) == (False, {}, ["a", "b/"], "m/x")
    assert read_command_line(["a", "--json", "m"]) == (True, {}, ["a"], "m")
    for args in (["a", "m"], ["--json", "a", "m"], ["a", "m", "--json", "--json"], ["a", "b", "c:d"]):
        assert read_command_line(args) == clicks_reading(import_command, args), args


@pytest.fixture(scope="module")
def warcs(tmp_path_factory):
    """A directory holding the files a and n (what import-warc's click.Path
    takes for a WARC) and the directory b (what it refuses)."""
    where = tmp_path_factory.mktemp("warcs")
    (where / "a").write_bytes(b"")
    (where / "n").write_bytes(b"")
    (where / "b").mkdir()
    return where


def test_import_warc_command_lines_are_read(warcs):
    with contextlib.chdir(warcs):
        assert read_import_warc(["--collection", "c", "a", "m"]) == (False, {"--collection": "c"}, ["a"], "m")
        assert read_import_warc(["a", "--collection=x y", "m", "--json"]) == (True, {"--collection": "x y"}, ["a"], "m")
        for args in (["a", "m"], ["--collection", "c", "a", "n", "m"], ["a", "--collection=c", "--collection", "d", "m"],
                     ["--json", "--collection", "c", "a", "m"], ["b", "m"], ["nowhere", "m"], ["a", "b", "m"]):
            assert read_import_warc(args) == clicks_reading(import_warc_command, args), args


@pytest.mark.parametrize("args", [
    [], ["a"], ["--json", "a"], ["--help"], ["-h", "a", "m"], ["--", "a", "m"], ["-", "m"], ["a", "-"],
    ["--json=1", "a", "m"], ["--js", "a", "m"], ["-v", "a", "m"], ["a", "m", "--bogus"],
])
def test_anything_else_is_left_to_click(args):
    assert read_command_line(args) is None


@pytest.mark.parametrize("args", [
    ["--collection", "a", "m"], ["--collection"], ["a", "b", "m"], ["nowhere", "m"], ["a", "m", "--collection"], ["--collection=", "a", "m"],
    ["--collection", "-x", "a", "m"], ["--collection", "--json", "a", "m"], ["--col", "c", "a", "m"],
    ["--collection", "c", "--", "a", "m"],
])
def test_anything_else_of_import_warc_is_left_to_click(args, warcs):
    with contextlib.chdir(warcs):
        assert read_import_warc(args) is None


WORDS = ["--json", "--json=", "--", "-", "-h", "--help", "--js", "-x", "a", "b/", "c:d", "/", "."]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=6))
def test_what_it_reads_click_reads_the_same(words):
    mine = read_command_line(words)
    if mine is not None:
        assert mine == clicks_reading(import_command, words), words


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS + ["b", "n", "--collection", "--collection=c", "--collection="]), max_size=7))
def test_what_it_reads_of_import_warc_click_reads_the_same(warcs, words):
    with contextlib.chdir(warcs):
        mine = read_import_warc(words)
        if mine is not None:
            assert mine == clicks_reading(import_warc_command, words), words
