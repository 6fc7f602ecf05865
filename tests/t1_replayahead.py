"""webfs.replayahead asks ahead only for a plain `webfs replay` command line,
and takes from it the TARGET click takes."""
from __future__ import annotations

import click
from hypothesis import given, settings, strategies as st

from webfs.cli_warc import replay as replay_command
from webfs.replayahead import plain_target


def clicks_target(args: list[str]):
    """TARGET as webfs replay's click command reads ARGS, or None if it refuses them."""
    try:
        return replay_command.make_context("replay", list(args)).params["target"]
    except (click.exceptions.Exit, click.ClickException):
        return None


def test_plain_command_lines_and_the_rest():
    assert plain_target(["/m/c", "pw"]) == "/m/c"
    assert plain_target(["--port", "8091", "/m/c", "pw", "--host", "127.0.0.1"]) == "/m/c"
    for args in (["/m/c"], ["/m/c", "pw", "more"], ["--help"], ["/m/c", "pw", "--port"], ["--port=9", "/m/c", "pw"],
                 ["--", "/m/c", "pw"], ["-x", "/m/c", "pw"], ["--port", "-1", "/m/c", "pw"],
                 ["--port", "0", "/m/c", "pw"], ["--port", "x", "/m/c", "pw"]):
        assert plain_target(args) is None, args


WORDS = st.sampled_from(["--port", "--host", "--help", "--", "-x", "8090", "0", "99999", "127.0.0.1", "/m/c", "pw", "c d"])


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=6))
def test_what_is_asked_ahead_is_what_click_reads(args):
    target = plain_target(args)
    if target is not None:
        assert clicks_target(args) == target
