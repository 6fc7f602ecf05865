"""tools/pyfuse3/build, which make deps runs to install pyfuse3 built from its
release's source with one-reader.patch: each step that can fail says which
in one line and exits 1, and a build that goes through hands pip the patched
source with the pinned build tools.

pip is a stand-in here (a shell script given as the PIP argument, as make
deps gives the virtualenv's): it "downloads" a tarball made by the test and
records how it was asked to install, so no test reaches PyPI or compiles.
Where a test needs a source whose SHA-256 the script accepts, it runs a copy
of the script with that one line changed, beside a patch of its own.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "tools" / "pyfuse3" / "build"
VERSION = re.search(r"^VERSION=(\S+)$", BUILD.read_text(), re.M).group(1)

FAKE_PIP = r"""#!/bin/sh
# A stand-in for pip: 'download ... -d DIR SPEC' copies $SDIST into DIR (or
# fails when $SDIST is unset); 'install ... DIR' records what it was given.
cmd=$1; shift
case $cmd in
download)
    [ -n "${SDIST:-}" ] || { echo "ERROR: No matching distribution found for $*"; exit 1; }
    while [ $# -gt 0 ]; do [ "$1" = -d ] && dest=$2; shift; done
    cp "$SDIST" "$dest/" ;;
install)
    for a; do src=$a; done
    { echo "constraint=${PIP_CONSTRAINT:-}"; echo "version=${SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYFUSE3:-}"
      echo "args=$*"; [ -d "$src" ] && cat "$src/src/pyfuse3/loop.txt"
      [ -e "$src/src/pyfuse3/__init__.c" ] && echo "stale C left"; } > "$RECORD"
    [ -z "${FAIL_BUILD:-}" ] || { echo "error: command '/usr/bin/gcc' failed with exit code 1"; exit 1; } ;;
esac
"""

PATCH = """--- a/src/pyfuse3/loop.txt
+++ b/src/pyfuse3/loop.txt
@@ -1 +1 @@
-a read lock per request
+one reader task
"""


def _sdist(path: Path) -> Path:
    """A tarball laid out as pyfuse3's release: the file PATCH changes, and
    the C that Cython made from the unpatched source."""
    out = path / f"pyfuse3-{VERSION}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, text in (("loop.txt", "a read lock per request\n"), ("__init__.c", "/* old */\n")):
            data = text.encode()
            info = tarfile.TarInfo(f"pyfuse3-{VERSION}/src/pyfuse3/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _tools(tmp_path: Path, patch: str = PATCH) -> tuple[Path, Path]:
    """A copy of the build script that accepts _sdist()'s tarball, beside
    ``patch`` and the real constraints; and the stand-in pip."""
    sdist = _sdist(tmp_path)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "build"
    script.write_text(re.sub(r"^SHA256=\S+$", f"SHA256={digest}", BUILD.read_text(), flags=re.M))
    script.chmod(0o755)
    (tools / "one-reader.patch").write_text(patch)
    shutil.copy(BUILD.parent / "build-constraints.txt", tools)
    return script, _pip(tmp_path)


def _pip(tmp_path: Path) -> Path:
    pip = tmp_path / "pip"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    return pip


def _run(script: Path, pip: Path, tmp_path: Path, *args: str, **env: str):
    full = dict(os.environ, RECORD=str(tmp_path / "record"), **env)
    full.pop("PIP_CONSTRAINT", None)
    return subprocess.run([str(script), str(pip), *args], capture_output=True, text=True,
                          env=full, timeout=60)


def _one_line(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"make deps: pyfuse3 {VERSION}: "), p.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_a_build_hands_pip_the_patched_source_with_the_pinned_tools(tmp_path):
    script, pip = _tools(tmp_path)
    p = _run(script, pip, tmp_path, "patched", SDIST=str(tmp_path / f"pyfuse3-{VERSION}.tar.gz"))
    assert p.returncode == 0, p.stderr
    record = (tmp_path / "record").read_text()
    assert f"constraint={script.parent / 'build-constraints.txt'}\n" in record
    assert f"version={VERSION}+webfs." in record
    assert "one reader task" in record and "read lock" not in record
    assert "stale C left" not in record
    assert "--force-reinstall" in record and "--no-deps" in record


def test_the_pinned_tools_are_exact_versions():
    pins = [line for line in (BUILD.parent / "build-constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert {re.split("==", line)[0].lower() for line in pins} >= {"cython", "setuptools", "setuptools_scm"}
    assert all(re.fullmatch(r"[\w.-]+==[\w.]+", line) for line in pins), pins


def test_an_unknown_mode_is_refused(tmp_path):
    _one_line(_run(BUILD, _pip(tmp_path), tmp_path, "newest"), "'newest'", "'patched' or 'stock'")


def test_a_failed_download_says_so(tmp_path):
    _one_line(_run(BUILD, _pip(tmp_path), tmp_path, "patched"),
              "could not download its source from PyPI", "No matching distribution")


def test_a_source_with_another_digest_is_refused(tmp_path):
    """The real script: a tarball that is not the release is never built."""
    sdist = _sdist(tmp_path)
    line = _one_line(_run(BUILD, _pip(tmp_path), tmp_path, "patched", SDIST=str(sdist)), "SHA-256")
    assert hashlib.sha256(sdist.read_bytes()).hexdigest() in line
    assert not (tmp_path / "record").exists()


def test_a_patch_that_does_not_apply_says_so(tmp_path):
    script, pip = _tools(tmp_path, PATCH.replace("-a read lock", "-another line"))
    _one_line(_run(script, pip, tmp_path, "patched", SDIST=str(tmp_path / f"pyfuse3-{VERSION}.tar.gz")),
              "one-reader.patch does not apply")
    assert not (tmp_path / "record").exists()


def test_a_failed_build_says_what_it_needs_and_what_failed(tmp_path):
    script, pip = _tools(tmp_path)
    _one_line(_run(script, pip, tmp_path, "patched", SDIST=str(tmp_path / f"pyfuse3-{VERSION}.tar.gz"),
                   FAIL_BUILD="1"), "the build failed", "libfuse3-dev", "gcc' failed")


def test_stock_installs_the_release_as_it_is(tmp_path):
    p = _run(BUILD, _pip(tmp_path), tmp_path, "stock")
    assert p.returncode == 0, p.stderr
    record = (tmp_path / "record").read_text()
    assert f"pyfuse3=={VERSION}" in record and "constraint=\n" in record
