"""webfs.quicksearch reads a plain `webfs search` command line as click reads
it, leaves every other one to click, and leaves the search to click when the
environment holds a setting webfs.cli would refuse."""
from __future__ import annotations

import os

import click
import pytest
from hypothesis import given, settings, strategies as st

from webfs.backends import options as backend_options
from webfs.cli_query import search as search_command
from webfs.quicksearch import CHECKED_ENVIRONMENT, read_command_line


def clicks_reading(args: list[str]):
    """(settings, TARGET) as webfs search's click command reads ARGS, or None if it refuses them."""
    try:
        ctx = search_command.make_context("search", list(args))
    except (click.exceptions.Exit, click.ClickException):
        return None
    p = ctx.params
    return {"limit": p["limit"], "offset": p["offset"], "output": p["output"] or "paths",
            "query_text": p["query_text"]}, p["target"]


def test_plain_command_lines_are_read(tmp_path):
    t = str(tmp_path)
    assert read_command_line(["zebra", t]) == ({"limit": 100, "offset": 0, "output": "paths",
                                                "query_text": "zebra"}, t)
    assert read_command_line([t, "--count", "title:a b", "--offset", "2", "--limit=7"])[0] == \
        {"limit": 7, "offset": 2, "output": "count", "query_text": t}     # the first word is the query
    for args in (["--json", "zebra", t], ["zebra", t, "--urls"], ["--limit", "1", "--offset=0", "zebra", t]):
        assert read_command_line(args) == clicks_reading(args), args


@pytest.mark.parametrize("args", [
    [], ["zebra"], ["zebra", "T", "extra"], ["--help"], ["-h", "zebra", "T"], ["--", "zebra", "T"],
    ["-", "T"], ["--bogus", "zebra", "T"], ["--lim", "5", "zebra", "T"], ["--limit", "0", "zebra", "T"],
    ["--offset=-1", "zebra", "T"], ["--limit", "x", "zebra", "T"], ["--limit=", "zebra", "T"],
    ["zebra", "T", "--limit"], ["--limit", "2", "--limit", "3", "zebra", "T"], ["--count=1", "zebra", "T"],
    ["--urls", "--json", "zebra", "T"], ["--urls", "--urls", "zebra", "T"], ["-zebra", "T"],
])
def test_anything_else_is_left_to_click(args):
    assert read_command_line(args) is None


# A query that does not parse is not here: the daemon refuses it (t2_quicksearch), and
# webfs.quicksearch then leaves the command line to click.
WORDS = ["--limit", "--offset", "--urls", "--json", "--count", "--limit=3", "--offset=1", "--limit=0",
         "5", "0", "-1", "+2", " 4", "x", "--", "-", "-h", "--help", "--lim", "zebra", "title:a"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS + ["TARGET"]), max_size=6))
def test_what_it_reads_click_reads_the_same(tmp_path_factory, words):
    """Never a command line that click reads otherwise, or refuses (its TARGET a
    directory: webfs.quicksearch asks only a mount point's root)."""
    target = str(tmp_path_factory.getbasetemp())
    args = [target if w == "TARGET" else w for w in words]
    mine = read_command_line(args)
    if mine is not None and os.path.isdir(mine[1]):
        assert mine == clicks_reading(args), args


def test_the_settings_webfs_cli_checks_send_the_search_to_click():
    """Every variable whose bad value BackendOptions.from_env refuses is in
    CHECKED_ENVIRONMENT, and nothing else."""
    names = {*backend_options.ENV.values(), backend_options.LEASE_RENEW_ENV, backend_options.TAKE_LEASE_ENV,
             "XDG_CACHE_HOME", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED"}
    refused = set()
    for name in names:
        for bad in ("x", "-1", "0"):
            try:
                backend_options.BackendOptions.from_env({name: bad})
            except ValueError:
                refused.add(name)
    assert refused == set(CHECKED_ENVIRONMENT)
