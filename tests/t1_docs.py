"""The docs say what the code does: every CLI command and option is in webfs(1),
the man pages render without warnings, the format page agrees with the code."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click
import pytest

from webfs import block, cli

MAN = Path(__file__).resolve().parent.parent / "man"


def _roff_text(page: Path) -> str:
    # roff escapes '-' as '\-'; compare with plain dashes
    return page.read_text().replace("\\-", "-")


def test_every_command_and_option_is_in_webfs_1():
    text = _roff_text(MAN / "webfs.1")
    missing = []
    for name, cmd in cli.main.commands.items():
        if f"webfs {name}" not in text:
            missing.append(f"command {name}")
        for param in cmd.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    if opt not in ("-h", "--help") and opt not in text:
                        missing.append(f"{name} {opt}")
    for param in cli.main.params:
        for opt in param.opts:
            if opt not in text:
                missing.append(f"global {opt}")
    assert not missing, f"not in man/webfs.1: {missing}"


def test_every_mount_option_is_in_mount_webfs_8():
    text = _roff_text(MAN / "mount.webfs.8")
    help_text = cli.main.commands["mount"].params[0].help
    options = re.findall(r"([a-z_]+)(?==|,|\.)", help_text.split(":", 1)[1])
    assert options
    for opt in options:
        assert opt in text, opt


@pytest.mark.parametrize("page", ["webfs.1", "mount.webfs.8", "webfs-format.5", "webfs-internals.7"])
def test_man_pages_render_without_warnings(page):
    proc = subprocess.run(["groff", "-man", "-ww", "-z", str(MAN / page)], capture_output=True)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
    proc = subprocess.run(["man", "--warnings", "-l", str(MAN / page)], capture_output=True,
                          env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()


def test_format_page_matches_the_block_header():
    text = _roff_text(MAN / "webfs-format.5")
    raw = block.BlockHeader("0f1e2d3c4b5a69788796a5b4c3d2e1f0", 10512, 4012, "gzip", 3,
                            "2026-11-25T21:00:00Z", "/x", bytes(32)).encode().decode()
    for field in re.findall(r"^([A-Za-z-]+):", raw, re.M):
        assert f"{field}:" in text, field
    assert str(block.HEADER_SIZE) in text and "WEBFS-BLOCK 1" in text
