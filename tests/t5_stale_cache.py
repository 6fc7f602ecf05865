"""Issue 11, item 1: a deleted file's content must never be read back as another file's.

The repro of the issue, command for command, against a real mount: the
decoded-piece cache must not hand out a deleted block's bytes for a new block
that happens to get the same catalog row id.
"""
from __future__ import annotations

import sys

from conftest import sh


def test_deleted_content_is_not_read_back_under_another_name(mounted):
    m = mounted.mnt
    py = sys.executable
    sh(f"{py} -c \"open('{m}/a','wb').write(b'OLD-SECRET-'*1000)\"")
    sh(f"{py} -c \"import os;fd=os.open('{m}/a',0);os.posix_fadvise(fd,0,0,4)\"; cat '{m}/a' >/dev/null")
    sh(f"rm '{m}/a'")
    sh(f"{py} -c \"open('{m}/b','wb').write(b'new-content-'*2000)\"")
    sh(f"{py} -c \"import os;fd=os.open('{m}/b',0);os.posix_fadvise(fd,0,0,4)\"")
    assert sh(f"head -c 24 '{m}/b'").stdout == b"new-content-new-content-"
    assert (m / "b").read_bytes() == b"new-content-" * 2000
