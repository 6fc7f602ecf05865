"""Shared fixtures: archives on temporary directories, and the webfs command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from webfs import archive as archmod
from webfs.catalog import Catalog, catalog_path
from webfs.store import Store

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def make_archive(root: Path, disks: int = 4, **kwargs) -> list[Path]:
    paths = [root / f"disk{i}" for i in range(disks)]
    conf = archmod.mkfs([str(p) for p in paths], **kwargs)
    Catalog(catalog_path(conf.disks[0].path)).close()
    return paths


@pytest.fixture
def disks(tmp_path) -> list[Path]:
    """A fresh 4-disk archive."""
    return make_archive(tmp_path)


@pytest.fixture
def store(disks):
    s = Store.open(str(disks[0]), holder="test")
    yield s
    s.close()


def webfs(*args, check=True, input=None, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed webfs command as a user would."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "webfs"), *map(str, args)], capture_output=True,
                          input=input, env=env, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"webfs {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}")
    return proc
