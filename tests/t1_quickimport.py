"""webfs.quickimport reads a plain `webfs import` command line as click reads
it, and leaves every other one to click (t4_import: what it prints, against
click's path, into a real mount)."""
from __future__ import annotations

import click
import pytest
from hypothesis import given, settings, strategies as st

from webfs.cli import import_ as import_command
from webfs.quickimport import read_command_line


def clicks_reading(args: list[str]):
    """(--json, SRC..., DEST) as webfs import's click command reads ARGS, or None if it refuses them."""
    try:
        ctx = import_command.make_context("import", list(args))
    except (click.exceptions.Exit, click.ClickException):
        return None
    p = ctx.params
    return p["as_json"], list(p["sources"]), p["dest"]


def test_plain_command_lines_are_read():
    assert read_command_line(["a", "b/", "m/x"]) == (False, ["a", "b/"], "m/x")
    assert read_command_line(["a", "--json", "m"]) == (True, ["a"], "m")
    for args in (["a", "m"], ["--json", "a", "m"], ["a", "m", "--json", "--json"], ["a", "b", "c:d"]):
        assert read_command_line(args) == clicks_reading(args), args


@pytest.mark.parametrize("args", [
    [], ["a"], ["--json", "a"], ["--help"], ["-h", "a", "m"], ["--", "a", "m"], ["-", "m"], ["a", "-"],
    ["--json=1", "a", "m"], ["--js", "a", "m"], ["-v", "a", "m"], ["a", "m", "--bogus"],
])
def test_anything_else_is_left_to_click(args):
    assert read_command_line(args) is None


WORDS = ["--json", "--json=", "--", "-", "-h", "--help", "--js", "-x", "a", "b/", "c:d", "/", "."]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=6))
def test_what_it_reads_click_reads_the_same(words):
    mine = read_command_line(words)
    if mine is not None:
        assert mine == clicks_reading(words), words
