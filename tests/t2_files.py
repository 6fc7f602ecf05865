"""webfs.files, the one way webfs makes a file outside the archive: created
new, never through a name already there. The commands that use it are
driven with planted symlinks in t4_outside_files; here each path of the
helper itself, in a temporary directory."""
from __future__ import annotations

import errno
import os

import pytest

from webfs import files

SECRET = b"the victim's own bytes\n"


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim"
    v.write_bytes(SECRET)
    return v


def test_create_new_never_opens_a_name_already_there(tmp_path, victim):
    link = tmp_path / "out"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        files.create_new(str(link))
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        files.create_new(str(tmp_path / "dangling"))
    assert not os.path.lexists(tmp_path / "nowhere")
    fd = files.create_new(str(link), replace_leftover=True)      # the link goes, not its target
    os.write(fd, b"new")
    os.close(fd)
    assert victim.read_bytes() == SECRET and not link.is_symlink() and link.read_bytes() == b"new"


def test_a_name_taken_again_after_the_leftover_went_is_refused(tmp_path, victim, monkeypatch):
    """Another process plants the name between the unlink and the create."""
    link = tmp_path / "out"
    link.symlink_to(victim)
    unlink = os.unlink

    def unlink_and_plant(path, *args, **kwargs):
        unlink(path, *args, **kwargs)
        os.symlink(victim, path)
    monkeypatch.setattr(os, "unlink", unlink_and_plant)
    with pytest.raises(FileExistsError):
        files.create_new(str(link), replace_leftover=True)
    assert victim.read_bytes() == SECRET


def test_write_file_replaces_the_symlink_itself(tmp_path, victim):
    link = tmp_path / "config.yaml"
    link.symlink_to(victim)
    files.write_file(str(link), b"collections: {}\n")
    assert victim.read_bytes() == SECRET
    assert not link.is_symlink() and link.read_bytes() == b"collections: {}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "victim"]


def test_write_file_that_fails_leaves_no_temporary_file(tmp_path):
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(IsADirectoryError):
        files.write_file(str(tmp_path / "a-directory"), b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]


def test_publish_without_replace_never_replaces(tmp_path, victim, monkeypatch):
    tmp, fd = files.create_beside(str(tmp_path / "out"))
    os.write(fd, b"done")
    os.close(fd)
    (tmp_path / "out").symlink_to(victim)             # appeared while the file was written
    with pytest.raises(FileExistsError):
        files.publish(tmp, str(tmp_path / "out"), replace=False)
    assert (tmp_path / "out").is_symlink() and victim.read_bytes() == SECRET
    (tmp_path / "out").unlink()
    # a filesystem without hard links: checked, then renamed
    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "out").symlink_to(victim)
    with pytest.raises(FileExistsError):
        files.publish(tmp, str(tmp_path / "out"), replace=False)
    (tmp_path / "out").unlink()
    files.publish(tmp, str(tmp_path / "out"), replace=False)
    assert (tmp_path / "out").read_bytes() == b"done" and not os.path.lexists(tmp)
