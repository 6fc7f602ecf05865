"""Recovery without webfs: tools/webfs-recover (sh) and tools/webfs-unparity.

The archives here are written by build_archive(), a small hand-written writer
that follows webfs-format(5) to the letter, so these tests do not need the
webfs package. build_archive() plays a history of operations (HISTORY) on a
plain directory, the *original*, and writes disks whose MANIFEST is taken at
the "checkpoint" and whose JOURNAL holds everything after it. To test against
the real webfs instead, replace build_archive() by one that plays the same
operations through a mount (sync at the checkpoint, then stop the daemon
without a final checkpoint) and returns the same `Built`.

build_archive_real() in t4_recover_tools does that already with the webfs
command, for the test_real_webfs_* tests (skipped without FUSE); its original
is the tree the remounted archive shows.

The tools are copied into an empty directory and run with a PATH that holds
only coreutils, find, gzip, gunzip and sh (webfs-recover), and with a Python
that cannot import webfs (webfs-unparity).
"""
from __future__ import annotations

import ast
import ctypes
import gzip
import hashlib
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

xxhash = pytest.importorskip("xxhash")

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"

COREUTILS = """
[ arch b2sum base32 base64 basename basenc cat chcon chgrp chmod chown chroot
cksum comm cp csplit cut date dd df dir dircolors dirname du echo env expand
expr factor false fmt fold groups head hostid id install join link ln logname
ls md5sum mkdir mkfifo mknod mktemp mv nice nl nohup nproc numfmt od paste
pathchk pinky pr printenv printf ptx pwd readlink realpath rm rmdir runcon seq
sha1sum sha224sum sha256sum sha384sum sha512sum shred shuf sleep sort split
stat stdbuf stty sum sync tac tail tee test timeout touch tr true truncate tty
uname unexpand uniq unlink users vdir wc who whoami yes
""".split()
ALLOWED = COREUTILS + ["find", "gzip", "gunzip", "sh"]
FORBIDDEN = ["sed", "grep", "awk", "gawk", "mawk", "python", "python3", "perl", "xargs"]


# ------------------------------------------------------------ the format --

def signature(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def sig_path(key: str, depth: int) -> str:
    """blocks/ relative path of sig[~n]: depth 3, 0f1e2d3c... -> 0f/1e/2d3c..."""
    return "/".join([key[2 * i:2 * i + 2] for i in range(depth - 1)] + [key[2 * (depth - 1):]])


def pct(name: bytes) -> str:
    return "".join(chr(b) if 0x21 <= b <= 0x7e and b != 0x25 else f"%{b:02X}" for b in name)


def unpct(text: str) -> bytes:
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "%":
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(ord(text[i]))
            i += 1
    return bytes(out)


def esc(path: bytes) -> bytes:
    return path.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


def block_header(key, size, stored, codec, created, name: str, data: bytes) -> bytes:
    head = (f"WEBFS-BLOCK 1\nSignature: xxh128:{key.split('~')[0]}\nSize: {size}\n"
            f"Stored: {stored}\nCodec: {codec}\nRefs: 0000000001\nCreated: {created}\n"
            f"Digest: sha256:{hashlib.sha256(data).hexdigest()}\nName: ")
    room = 512 - len(head) - 2
    if len(name) > room:                      # cut to fit, never inside an escape
        cut = room
        if "%" in name[cut - 2:cut]:
            cut = name.rindex("%", cut - 2, cut)
        name = name[:cut]
    text = (head + name + "\n").encode()
    return text + b" " * (511 - len(text)) + b"\n"


def mtime_text(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


# --------------------------------------------------------------- history --
# Operations on a tree; paths are bytes, absolute in the archive.

def exchange(a: bytes, b: bytes) -> None:
    """renameat2(RENAME_EXCHANGE), or three renames where it is missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None and fn(-100, a, -100, b, 2) == 0:        # AT_FDCWD, RENAME_EXCHANGE
        return
    tmp = os.path.dirname(a) + b"/.exchange-tmp"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


def apply_op(root: Path, op) -> None:
    r = os.fsencode(root)
    kind, path = op[0], r + op[1] if len(op) > 1 else None
    if kind == "mkdir":
        os.mkdir(path)
        os.chmod(path, op[2])
    elif kind == "write":
        with open(path, "wb") as f:
            f.write(op[2])
        os.chmod(path, op[3])
    elif kind == "symlink":
        os.symlink(op[2], path)
    elif kind == "link":
        os.link(r + op[2], path)
    elif kind == "rename":
        os.rename(path, r + op[2])
    elif kind == "exchange":
        exchange(path, r + op[2])
    elif kind == "unlink":
        os.unlink(path)
    elif kind == "rmtree":
        shutil.rmtree(path)
    elif kind == "chmod":
        os.chmod(path, op[2])
    elif kind == "utime":
        os.utime(path, ns=(op[2], op[2]), follow_symlinks=False)
    else:
        raise ValueError(kind)


def history(seed: int = 6) -> list:
    rnd = random.Random(seed)
    text = lambda n: b"".join(b"<p>page %d of the crawl, some words</p>\n" % rnd.randrange(50)
                              for _ in range(n))
    noise = lambda n: rnd.randbytes(n)
    C = b"/crawl-2024"
    E = C + b"/example.org"
    ops = [
        ("mkdir", C, 0o755), ("mkdir", E, 0o755),
        ("write", E + b"/index.html", text(300), 0o644),
        ("write", E + b"/logo.png", noise(3000), 0o644),
        ("write", E + b"/name with spaces.html", text(20), 0o644),
        ("write", E + b"/new\nline.txt", text(5), 0o644),
        ("write", E + b"/tab\there", text(6), 0o644),
        ("write", E + b"/back\\slash\\n and \\t", text(7), 0o644),
        ("write", E + b"/\\0 \\c \\\\x \\101", text(8), 0o644),
        ("write", E + b"/caf\xe9-latin1.html", text(9), 0o644),
        ("write", E + b"/\xff\xfe\x01\x7f.bin", noise(100), 0o644),
        ("write", E + b"/pct%41%2F%%.txt", text(10), 0o644),
        ("write", E + b"/*?[glob]", text(11), 0o644),
        ("write", E + b"/.hidden", text(12), 0o644),
        ("write", E + b"/..dots", text(13), 0o644),
        ("write", E + b"/-dash", text(14), 0o644),
        ("write", E + b"/c", text(15), 0o644),          # the names webfs-recover's
        ("mkdir", E + b"/m", 0o755),                     # plan tree uses itself
        ("write", E + b"/m/c", text(16), 0o644),
        ("write", E + b"/trailing newline\n", text(3), 0o644),
        ("write", E + b"/empty", b"", 0o644),
        ("write", E + b"/script.sh", b"#!/bin/sh\necho hi\n", 0o755),
        ("write", E + b"/readonly", text(4), 0o444),
        ("write", E + b"/private", text(4) + b"secret", 0o600),
        ("write", E + b"/setuid", text(2) + b"suid", 0o4755),
        ("write", E + b"/dup-of-index.html", None, 0o644),            # same bytes: dedup
        ("write", C + b"/big-random.bin", noise(200_000), 0o644),     # 4 identity pieces
        ("write", C + b"/big-zeros.bin", bytes(3 * 65536) + b"tail", 0o644),  # repeated piece
        ("write", C + b"/fake-duplicate.txt", b"a different document with the same signature",
         0o644),
        ("write", C + b"/victim.txt", b"the document whose signature is shared", 0o644),
        ("symlink", E + b"/link-rel", b"index.html"),
        ("symlink", E + b"/link-abs", b"/etc/passwd"),
        ("symlink", E + b"/link-dangling", b"../nowhere/\xe9 x\ny"),
        ("link", E + b"/hardlink.html", E + b"/index.html"),
        ("mkdir", C + b"/" + b"d" * 200, 0o755),
        ("mkdir", C + b"/" + b"d" * 200 + b"/" + b"\xe9" * 100, 0o755),   # Name: hint cut
        ("write", C + b"/" + b"d" * 200 + b"/" + b"\xe9" * 100 + b"/long-name.html", text(5), 0o644),
        ("mkdir", C + b"/private-dir", 0o700),
        ("write", C + b"/private-dir/x", text(3), 0o640),
        ("mkdir", C + b"/sticky", 0o1777),
        ("mkdir", C + b"/setgid", 0o2755),
        ("write", C + b"/setgid/y", text(3), 0o644),
        ("mkdir", C + b"/old-collection", 0o755),
        ("mkdir", C + b"/old-collection/sub", 0o750),
        ("write", C + b"/old-collection/sub/a.html", text(30), 0o644),
        ("write", C + b"/old-collection/b.html", text(31), 0o644),
        ("write", C + b"/to-delete.html", text(40) + b"only here", 0o644),
        ("mkdir", C + b"/dir-to-delete", 0o755),
        ("write", C + b"/dir-to-delete/gone.html", text(41) + b"gone too", 0o644),
        ("write", C + b"/overwritten.html", text(42) + b"first version", 0o644),
        ("write", C + b"/rename-me.txt", text(43), 0o644),
        ("write", C + b"/replaced-by-rename.txt", text(44) + b"replaced", 0o644),
        ("checkpoint",),
        # --- after the checkpoint: only in the JOURNAL
        ("rename", C + b"/old-collection", b"/crawl-2025"),
        ("write", b"/crawl-2025/sub/new.html", text(50), 0o644),
        ("unlink", C + b"/to-delete.html"),
        ("rmtree", C + b"/dir-to-delete"),
        ("write", C + b"/overwritten.html", text(42) + b"second version", 0o644),
        ("rename", C + b"/rename-me.txt", C + b"/renamed\nwith newline.txt"),
        ("rename", E + b"/tab\there", C + b"/moved\\tab"),
        ("rename", C + b"/replaced-by-rename.txt", C + b"/victim-of-rename.txt"),
        ("write", C + b"/victim-of-rename.txt", text(45), 0o644),
        ("rename", C + b"/victim-of-rename.txt", C + b"/rename-me-too.txt"),
        ("chmod", E + b"/index.html", 0o664),
        ("mkdir", C + b"/swap-dir", 0o711),
        ("write", C + b"/swap-dir/inside", text(46), 0o644),
        ("write", E + b"/swap-file", text(47), 0o644),
        ("exchange", C + b"/swap-dir", E + b"/swap-file"),
        ("write", b"/crawl-2025/after.bin", noise(5000), 0o600),
        ("symlink", b"/crawl-2025/sub/up", b".."),
        ("write", b"/crawl-2025/empty-too", b"", 0o600),
        ("mkdir", b"/crawl-2025/readonly-dir", 0o755),
        ("write", b"/crawl-2025/readonly-dir/z", text(3), 0o644),
        ("chmod", b"/crawl-2025/readonly-dir", 0o555),
    ]
    # fill in the deduplicated copy
    idx = next(op[2] for op in ops if op[0] == "write" and op[1] == E + b"/index.html")
    ops = [("write", op[1], idx, op[3]) if op[0] == "write" and op[2] is None else op for op in ops]
    # give every entry its own nanosecond mtime, so that they are all checked
    out = []
    for op in ops:
        out.append(op)
        if op[0] in ("write", "mkdir", "symlink", "chmod"):
            out.append(("utime", op[1], rnd.randrange(10**17, 17 * 10**17)))
        if op[0] == "checkpoint":           # before 1970, with and without a fraction
            out[-1:-1] = [("utime", E + b"/-dash", -123_456_789),
                          ("utime", C + b"/sticky", -5 * 10**9)]
    out.append(("utime", b"/crawl-2025/readonly-dir/z", -10**9 - 1))
    return out


FAKE = {b"a different document with the same signature": b"the document whose signature is shared"}


# --------------------------------------------------------------- builder --

@dataclass
class Built:
    disks: list[Path]
    orig: Path                       # the tree the archive must give back
    depth: int
    blocks: dict = field(default_factory=dict)   # key -> (disk, data, name hint, created)
    snapshot: list = field(default_factory=list)  # disks copied with a live JOURNAL


def blocks_on_disks(disks: list[Path], depth: int) -> dict:
    """Built.blocks read back from the disks' block files (any writer)."""
    out = {}
    for i, d in enumerate(disks):
        top = d / "blocks"
        for f in top.rglob("*") if top.is_dir() else ():
            rel = f.relative_to(top).as_posix()
            if not f.is_file() or f.name.startswith("."):
                continue
            raw = f.read_bytes()
            head = dict(l.split(": ", 1) for l in raw[:512].decode().split("\n")[1:]
                        if ": " in l)
            payload = raw[512:]
            data = gzip.decompress(payload) if head["Codec"] == "gzip" else payload
            out[rel.replace("/", "")] = (i, data, unpct(head.get("Name", "")), head["Created"])
    return out


def build_archive(root: Path, ops, *, ndisks=4, depth=3, group_size=4, max_block=65536,
                  fake=None) -> Built:
    """Play ops on root/orig and write an archive of the end state on root/disk<i>.

    Hand-written per webfs-format(5): blocks (gzip when it helps, else
    identity), files split in max_block pieces, overflow ~n blocks for fake
    duplicates, parity stripes of up to group_size-1 members on distinct
    disks, MANIFEST at the "checkpoint" op and a JOURNAL after it.
    """
    fake = fake or {}
    orig = root / "orig"
    orig.mkdir()
    disks = [root / f"disk{i}" for i in range(ndisks)]
    docs: dict[str, list] = {}           # key -> [data, first name, created]
    variants: dict[str, list] = {}       # sig -> distinct documents with that sig
    clock = iter(range(1_700_000_000, 2_000_000_000, 7))
    ob = os.fsencode(orig)

    def key_of(data: bytes, path: bytes) -> str:
        sig = signature(fake.get(data, data))
        same = variants.setdefault(sig, [])
        if data not in same:
            same.append(data)
        n = same.index(data)
        key = sig + (f"~{n}" if n else "")
        if key not in docs:
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(next(clock)))
            docs[key] = [data, path, created]
        return key

    def entry(path: bytes) -> bytes:
        st = os.lstat(ob + path if path != b"/" else ob)
        if stat.S_ISDIR(st.st_mode):
            sigs, size = "-", 0
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(ob + path)
            sigs, size = key_of(target, path), len(target)
        else:
            data = open(ob + path, "rb").read()
            pieces = [data[i:i + max_block] for i in range(0, len(data), max_block)]
            sigs, size = ",".join(key_of(p, path) for p in pieces) or "-", len(data)
        return b"%s\t%d\t%o\t%s\t%s" % (sigs.encode(), size, st.st_mode,
                                         mtime_text(st.st_mtime_ns).encode(), esc(path))

    def walk(path=b"/"):
        yield path
        full = ob + path if path != b"/" else ob
        for name in sorted(os.listdir(full)):
            child = (path.rstrip(b"/") + b"/" + name)
            if os.path.isdir(ob + child) and not os.path.islink(ob + child):
                yield from walk(child)
            else:
                yield child

    parent = lambda p: p.rsplit(b"/", 1)[0] or b"/"
    manifest, journal = None, None
    for op in ops:
        if op[0] == "checkpoint":
            manifest = [entry(p) for p in walk()]
            journal = []
            continue
        apply_op(orig, op)
        path = op[1]
        if op[0] in ("write", "mkdir", "symlink", "link"):
            line = entry(path)          # also notes the first name of its documents
        if journal is None:
            continue
        if op[0] == "exchange":
            journal += [b"<>\t%s\t%s" % (esc(path), esc(op[2])),
                        b"+\t" + entry(parent(path)), b"+\t" + entry(parent(op[2]))]
        elif op[0] == "rename":
            journal += [b">\t%s\t%s" % (esc(path), esc(op[2])),
                        b"+\t" + entry(parent(path)), b"+\t" + entry(parent(op[2])),
                        b"+\t" + entry(op[2])]
        elif op[0] in ("unlink", "rmtree"):
            journal += [b"-\t" + esc(path), b"+\t" + entry(parent(path))]
        else:
            journal += [b"+\t" + entry(path), b"+\t" + entry(parent(path))]
            st = os.lstat(ob + path)
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                # a hard-linked inode changed: every name of it gets a line
                journal += [b"+\t" + entry(p) for p in walk()
                            if p != b"/" and p != path and os.lstat(ob + p).st_ino == st.st_ino]
    assert manifest is not None, "the history needs a checkpoint"
    live = set()
    for p in walk():
        live.update(k for k in entry(p).split(b"\t")[0].decode().split(",") if k != "-")

    # blocks
    built = Built(disks, orig, depth)
    for d in disks:
        for sub in ("blocks", "parity", "meta"):
            (d / sub).mkdir(parents=True)
    by_disk: dict[int, list] = {}
    payloads = {}
    for key in sorted(live):
        data, name, created = docs[key]
        gz = gzip.compress(data, 6, mtime=0)
        codec, payload = ("gzip", gz) if len(gz) < len(data) else ("identity", data)
        disk = int(key[:2 * (depth - 1)], 16) % ndisks
        hint = pct(name)
        f = disks[disk] / "blocks" / sig_path(key, depth)
        f.parent.mkdir(parents=True, exist_ok=True)
        header = block_header(key, len(data), len(payload), codec, created, hint, data)
        f.write_bytes(header + payload)
        payloads[key] = (disk, payload, len(data), codec, created, hint)
        cut = header.split(b"\nName: ")[1].split(b"\n")[0]
        built.blocks[key] = (disk, data, unpct(cut.decode()), created)
        by_disk.setdefault(disk, []).append(key)

    # parity: stripes of up to G-1 members of similar size on distinct disks
    stripes: list[list[str]] = []
    for key in sorted(live, key=lambda k: len(payloads[k][1])):
        for s in stripes:
            if len(s) < group_size - 1 and payloads[key][0] not in {payloads[k][0] for k in s}:
                s.append(key)
                break
        else:
            stripes.append([key])
    nparity = [0] * ndisks
    for s in stripes:
        used = {payloads[k][0] for k in s}
        pdisk = min((d for d in range(ndisks) if d not in used), key=lambda d: nparity[d])
        nparity[pdisk] += 1
        length = max(len(payloads[k][1]) for k in s)
        acc = 0
        for k in s:
            acc ^= int.from_bytes(payloads[k][1], "little")
        stripe_id = signature(",".join(s).encode())
        head = f"WEBFS-PARITY 1\nHeader-Bytes: {{}}\nStripe: {stripe_id}\nLength: {length}\n"
        for k in s:
            disk, payload, size, codec, created, hint = payloads[k]
            head += f"Member: {k} {disk} {len(payload)} {size} {codec} {created} {hint}\n"
        nbytes = 512
        while len(head.format(nbytes)) + 1 > nbytes:
            nbytes += 512
        text = head.format(nbytes).encode()
        text += b" " * (nbytes - 1 - len(text)) + b"\n"
        f = disks[pdisk] / "parity" / sig_path(stripe_id, depth)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(text + acc.to_bytes(length, "little"))

    conf = (f"# webfs archive configuration; the same on every disk.\n[archive]\nformat = 1\n"
            f"uuid = {'a' * 32}\nlabel = test\ndepth = {depth}\ngroup_size = {group_size}\n"
            f"codec = gzip\nlevel = 1\nstore_mode = compare\nmax_block = {max_block}\n\n")
    for i in range(ndisks):
        conf += f"[disk {i}]\nuuid = {i:032x}\nweight = 1.0\npath = {disks[i]}\n\n"
    for i, d in enumerate(disks):
        (d / "WEBFS-DISK").write_text(f"WEBFS-DISK 1\nArchive: {'a' * 32}\nDisk: {i:032x}\n"
                                      f"Index: {i}\nLabel: test\nCreated: 2026-11-25T21:00:00Z\n")
        (d / "webfs.conf").write_text(conf)
        (d / "meta" / "catalog.db").write_bytes(b"SQLite format 3\0 (stand-in)")
        (d / "meta" / "MANIFEST").write_bytes(b"".join(l + b"\n" for l in manifest))
        (d / "meta" / "JOURNAL").write_bytes(b"".join(l + b"\n" for l in journal))
    return built


# ---------------------------------------------------------------- running --

@pytest.fixture(scope="session")
def restricted_bin(tmp_path_factory) -> Path:
    """A PATH directory with coreutils, find, gzip, gunzip and sh only."""
    bindir = tmp_path_factory.mktemp("restricted-bin")
    for name in ALLOWED:
        real = shutil.which(name)
        if real:
            os.symlink(real, bindir / name)
    for name in ("sh", "find", "gzip", "gunzip", "dd", "tail", "stat", "touch", "mktemp"):
        assert (bindir / name).exists(), f"{name} is needed for the test"
    for name in FORBIDDEN:
        assert not (bindir / name).exists()
    return bindir


@pytest.fixture(scope="session")
def tools(tmp_path_factory) -> Path:
    """tools/ copied into an empty directory, away from the webfs package."""
    where = tmp_path_factory.mktemp("empty") / "tools"
    shutil.copytree(TOOLS, where, ignore=shutil.ignore_patterns("__pycache__"))
    return where


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Built:
    return build_archive(tmp_path_factory.mktemp("archive"), history(), fake=FAKE)


@pytest.fixture
def built(pristine, tmp_path) -> Built:
    """A private copy of the pristine archive's disks (mtimes kept)."""
    disks = []
    for d in pristine.disks:
        shutil.copytree(d, tmp_path / d.name, symlinks=True)
        disks.append(tmp_path / d.name)
    return Built(disks, pristine.orig, pristine.depth, pristine.blocks)


def recover(tools, restricted_bin, tmp_path, *args, shell=(), expect=0):
    """Run webfs-recover (as an executable, or by the shell command `shell`)."""
    cmd = [*shell, str(tools / "webfs-recover"), *map(str, args)]
    env = {"PATH": str(restricted_bin), "TMPDIR": str(tmp_path)}
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    err = proc.stderr.decode(errors="replace")
    assert "not found" not in err, err           # a program outside the allowed set
    assert proc.returncode == expect, f"exit {proc.returncode}\n{err}"
    return proc


def unparity(tools, restricted_bin, *args, with_xxhash=False, expect=0):
    py = [sys.executable, "-I"] if with_xxhash else [sys.executable, "-S", "-I"]
    proc = subprocess.run(py + [str(tools / "webfs-unparity"), *map(str, args)],
                          capture_output=True, env={"PATH": str(restricted_bin)}, timeout=600)
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stderr.decode()}"
    return proc


REPORT = ".webfs-recover.report"      # webfs-recover's report, inside OUTDIR


def report_of(out: Path) -> bytes:
    return (out / REPORT).read_bytes()


def tree(root: Path) -> dict:
    """Every entry below root (root included): type, mode, mtime, content.
    webfs-recover's report at the root is left out."""
    rb = os.fsencode(root)
    st = os.lstat(rb)
    out = {b"/": ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns, None)}
    for dirpath, dirnames, filenames in os.walk(rb):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if p == os.path.join(rb, os.fsencode(REPORT)):
                continue
            st = os.lstat(p)
            rel = p[len(rb):]
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", None, st.st_mtime_ns, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns, None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                            open(p, "rb").read())
    return out


def assert_same_tree(orig: Path, got: Path, root_attrs=True) -> None:
    proc = subprocess.run(["diff", "-r", "--no-dereference", "-x", REPORT, str(orig), str(got)],
                          capture_output=True)
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-3000:]
    a, b = tree(orig), tree(got)
    if not root_attrs:                 # a MANIFEST need not list "/"
        del a[b"/"], b[b"/"]
    assert sorted(a) == sorted(b)
    for path in a:
        assert a[path] == b[path], (path, a[path][:3], b[path][:3])


# ------------------------------------------------------------------ tests --

def test_restricted_path_has_no_forbidden_programs(restricted_bin):
    for name in FORBIDDEN:
        proc = subprocess.run(["/bin/sh", "-c", f"command -v {name}"], capture_output=True,
                              env={"PATH": str(restricted_bin)})
        assert proc.returncode != 0, name


def test_recover_help_and_usage(tools, restricted_bin, tmp_path):
    proc = recover(tools, restricted_bin, tmp_path, "--help")
    assert b"Usage: webfs-recover" in proc.stdout
    recover(tools, restricted_bin, tmp_path, expect=2)
    recover(tools, restricted_bin, tmp_path, tmp_path / "out", expect=2)
    recover(tools, restricted_bin, tmp_path, "--bogus", tmp_path, tmp_path / "o", expect=2)
    recover(tools, restricted_bin, tmp_path, tmp_path / "missing", tmp_path / "o", expect=2)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    recover(tools, restricted_bin, tmp_path, tmp_path, tmp_path / "full", expect=2)


def test_unparity_help_and_no_webfs_import(tools, restricted_bin):
    proc = unparity(tools, restricted_bin, "--help")
    assert b"xxh3-128" in proc.stdout and b"standard library" in proc.stdout
    unparity(tools, restricted_bin, expect=2)
    # the interpreter the tests use for it really cannot import webfs
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", "import webfs"], capture_output=True,
                          cwd=REPO)
    assert proc.returncode != 0
    # and the tool imports nothing but the standard library (xxhash optional)
    tree_ = ast.parse((TOOLS / "webfs-unparity").read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree_) if isinstance(n, ast.Import)
            for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree_)
             if isinstance(n, ast.ImportFrom) and n.module}
    assert mods - set(sys.stdlib_module_names) <= {"xxhash"}, mods


SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_recover_everything(built, tools, restricted_bin, tmp_path, shell):
    """All disks there (the catalog database deleted): the exact tree comes back."""
    for d in built.disks:
        (d / "meta" / "catalog.db").unlink()
    sh = [shutil.which(shell)] + (["--posix"] if shell == "bash" else [])
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *built.disks, out, shell=sh)
    assert_same_tree(built.orig, out)
    report = report_of(out)
    assert b"\nlost\t" not in report and b"0 lost" in report
    # what the journal deleted is not there, its blocks are gone
    assert not (out / "crawl-2024" / "to-delete.html").exists()


def test_recover_is_the_default_shell_and_needs_only_the_allowed_programs(
        built, tools, restricted_bin, tmp_path):
    """Run as an executable (#!/bin/sh) with the restricted PATH."""
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *built.disks, out, "--report", tmp_path / "r.txt")
    assert_same_tree(built.orig, out)
    assert (tmp_path / "r.txt").exists() and not (out / REPORT).exists()
    assert not (tmp_path / "out.report").exists()


@pytest.mark.parametrize("lost_disk", range(4))
def test_lose_one_disk_then_unparity_then_recover(built, tools, restricted_bin, tmp_path,
                                                  lost_disk):
    shutil.rmtree(built.disks[lost_disk])
    alive = [d for i, d in enumerate(built.disks) if i != lost_disk]
    on_lost = [k for k, v in built.blocks.items() if v[0] == lost_disk]
    assert on_lost, "the lost disk should hold blocks"
    # without the parity: files are missing, and said so
    recover(tools, restricted_bin, tmp_path, *alive, tmp_path / "partial", expect=1)
    report = report_of(tmp_path / "partial")
    assert b"\nlost\t" in report and b"missing on every disk" in report
    # rebuild the lost blocks from parity, with a Python that has no webfs (nor xxhash)
    rebuilt = tmp_path / "rebuilt"
    unparity(tools, restricted_bin, "--out", rebuilt, *alive)
    for key in on_lost:
        assert (rebuilt / "blocks" / sig_path(key, built.depth)).is_file(), key
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *alive, rebuilt, out)
    assert_same_tree(built.orig, out)


def test_unparity_rebuilds_exact_blocks_and_checks_hashes(tmp_path_factory, tools,
                                                          restricted_bin, tmp_path):
    """With xxhash importable the rebuilt blocks are hash-checked; they equal the lost ones
    byte for byte but for Refs."""
    b = build_archive(tmp_path_factory.mktemp("nofake"), history(7))
    lost = 1
    saved = tmp_path / "saved"
    shutil.copytree(b.disks[lost], saved)
    shutil.rmtree(b.disks[lost])
    alive = [d for i, d in enumerate(b.disks) if i != lost]
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u", *alive, with_xxhash=True)
    assert b"xxh3-128 check on" in proc.stderr
    n = 0
    for f in (saved / "blocks").rglob("*"):
        if f.is_file():
            got = (tmp_path / "u" / "blocks" / f.relative_to(saved / "blocks")).read_bytes()
            assert got == f.read_bytes()      # the builder writes Refs: 0000000001 too
            n += 1
    assert n > 0
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *alive, tmp_path / "u", out)
    assert_same_tree(b.orig, out)


def test_unparity_reports_what_it_cannot_rebuild(built, tools, restricted_bin, tmp_path):
    # two disks lost: stripes with members on both cannot be rebuilt
    for i in (0, 1):
        shutil.rmtree(built.disks[i])
    alive = built.disks[2:]
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u", *alive, expect=1)
    assert b"members missing" in proc.stderr
    # a corrupt parity payload: the rebuilt block fails its checks and is not written
    b2 = tmp_path / "b2"
    b2.mkdir()
    b = build_archive(b2, history(8))
    victim = next(k for k, v in b.blocks.items() if v[0] == 2 and len(v[1]) > 100)
    (b.disks[2] / "blocks" / sig_path(victim, b.depth)).unlink()
    for pf in (p for d in b.disks for p in (d / "parity").rglob("*") if p.is_file()):
        if f"Member: {victim} ".encode() in pf.read_bytes()[:4096]:
            data = bytearray(pf.read_bytes())
            hbytes = int(data.split(b"Header-Bytes: ")[1].split(b"\n")[0])
            data[hbytes + 20] ^= 0xFF          # inside every member's payload
            data[hbytes + 21] ^= 0x55
            pf.write_bytes(bytes(data))
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u2", *b.disks, expect=1,
                    with_xxhash=True)
    assert f"lost\tblocks/{sig_path(victim, b.depth)}\trebuilt from".encode() in proc.stderr
    assert b"corrupt" in proc.stderr
    assert not (tmp_path / "u2" / "blocks" / sig_path(victim, b.depth)).exists()
    # an unreadable parity header is reported too
    pf = next(p for p in (b.disks[0] / "parity").rglob("*") if p.is_file())
    pf.write_bytes(b"garbage")
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u3", *b.disks, expect=1)
    assert b"unreadable parity file" in proc.stderr


def no_digest(raw: bytes) -> bytes:
    """A block file as written before digests: its header without the Digest line."""
    head = raw[:512]
    line = head[head.index(b"Digest: "):]
    line = line[:line.index(b"\n") + 1]
    head = head.replace(line, b"")
    return head[:-1] + b" " * len(line) + b"\n" + raw[512:]


def test_recover_reports_missing_and_damaged_blocks(built, tools, restricted_bin, tmp_path):
    blocks = built.blocks
    path_of = {}
    for key, (disk, data, hint, created) in blocks.items():
        path_of[key] = built.disks[disk] / "blocks" / sig_path(key, built.depth)
    idx = next(k for k, v in blocks.items() if v[2] == b"/crawl-2024/example.org/index.html")
    logo = next(k for k, v in blocks.items() if v[2] == b"/crawl-2024/example.org/logo.png")
    big = [k for k, v in blocks.items() if v[2] == b"/crawl-2024/big-random.bin"]
    page = next(k for k, v in blocks.items() if v[2] == b"/crawl-2024/example.org/.hidden")
    path_of[idx].unlink()                                   # missing everywhere
    raw = path_of[logo].read_bytes()
    path_of[logo].write_bytes(no_digest(raw)[:-10])         # identity payload cut short
    raw = path_of[big[1]].read_bytes()
    path_of[big[1]].write_bytes(raw.replace(b"Signature: xxh128:", b"Signature: xxh128:0", 1)
                                .replace(b"\nRefs", b"Refs", 1))     # bad header
    raw = path_of[page].read_bytes()
    path_of[page].write_bytes(raw[:600] + bytes(len(raw) - 600))  # gzip payload damaged
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out, expect=1)
    lines = [l for l in proc.stderr.split(b"\n") if l.startswith(b"lost\t")]
    lost = {l.split(b"\t")[1]: l.split(b"\t")[2] for l in lines}
    E = b"/crawl-2024/example.org"
    assert b"missing on every disk" in lost[E + b"/index.html"]
    assert b"missing on every disk" in lost[E + b"/hardlink.html"]
    assert b"missing on every disk" in lost[E + b"/dup-of-index.html"]
    assert b"size mismatch" in lost[E + b"/logo.png"]      # no Digest: checked as before
    assert b"bad header" in lost[b"/crawl-2024/big-random.bin"]
    assert b"cannot decode" in lost[E + b"/.hidden"]
    assert len(lost) == 6, lost
    report = report_of(out)
    assert all(l in report for l in lines)
    for name in (b"index.html", b"logo.png", b".hidden"):
        assert not os.path.lexists(os.fsencode(out / "crawl-2024" / "example.org") + b"/" + name)
    # everything else is there and right
    a, b = tree(built.orig), tree(out)
    for p in lost:
        del a[p]
    assert a == b          # directories too: their mtimes are set whatever is missing


def test_stale_manifest_on_one_disk_is_not_used(built, tools, restricted_bin, tmp_path):
    """A disk that missed the last checkpoint and journal lines has older meta/ files."""
    old = built.disks[3] / "meta"
    lines = (old / "MANIFEST").read_bytes().split(b"\n")
    (old / "MANIFEST").write_bytes(b"\n".join(lines[:10]) + b"\n")
    (old / "JOURNAL").write_bytes(b"")
    past = time.time() - 86400
    for f in ("MANIFEST", "JOURNAL"):
        os.utime(old / f, (past, past))
    # given first, and still not chosen
    out = tmp_path / "out"
    disks = [built.disks[3]] + built.disks[:3]
    proc = recover(tools, restricted_bin, tmp_path, *disks, out)
    assert_same_tree(built.orig, out)
    assert b"disk3" not in next(l for l in proc.stderr.split(b"\n") if l.startswith(b"# manifest:"))
    # --meta forces a choice: that old manifest still lists a file deleted since
    proc = recover(tools, restricted_bin, tmp_path, "--meta", old, *disks, tmp_path / "o2",
                   expect=1)
    assert b"lost\t/crawl-2024/dir-to-delete/gone.html\tblock " in proc.stderr
    assert len(tree(tmp_path / "o2")) < len(tree(out))


def gzip_manifests(disks: list[Path]) -> bytes:
    """Each disk's plain MANIFEST (as webfs wrote it before) turned into the
    meta/MANIFEST.gz webfs writes now, its mtime kept; the plain lines of the first."""
    first = None
    for d in disks:
        meta = d / "meta"
        plain = (meta / "MANIFEST").read_bytes()
        first = plain if first is None else first
        st = (meta / "MANIFEST").stat()
        (meta / "MANIFEST.gz").write_bytes(gzip.compress(plain))
        os.utime(meta / "MANIFEST.gz", ns=(st.st_atime_ns, st.st_mtime_ns))
        (meta / "MANIFEST").unlink()
    return first


@pytest.mark.parametrize("shell", SHELLS)
def test_recover_gzipped_manifests(built, tools, restricted_bin, tmp_path, shell):
    """MANIFEST.gz, as webfs writes it now: zcat gives the plain records, and
    the exact tree comes back (the plain MANIFEST of disks written before:
    test_recover_everything)."""
    plain = gzip_manifests(built.disks)
    zcat = subprocess.run(["zcat", built.disks[0] / "meta" / "MANIFEST.gz"], capture_output=True,
                          check=True)
    assert zcat.stdout == plain and plain.startswith(b"-\t") and b"\t/crawl-2024/" in plain
    for d in built.disks:
        (d / "meta" / "catalog.db").unlink()
    sh = [shutil.which(shell)] + (["--posix"] if shell == "bash" else [])
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out, shell=sh)
    assert_same_tree(built.orig, out)
    assert b"/meta/MANIFEST.gz (the newest of the disks)" in proc.stderr
    proc = recover(tools, restricted_bin, tmp_path, "--meta", built.disks[2] / "meta", *built.disks,
                   tmp_path / "o2")
    assert_same_tree(built.orig, tmp_path / "o2")
    assert b"MANIFEST.gz (--meta)" in proc.stderr


def test_recover_takes_the_newer_of_both_forms(built, tools, restricted_bin, tmp_path):
    """A crash inside a checkpoint can leave the new MANIFEST.gz beside the old
    plain MANIFEST: the one written last is used, on every disk."""
    gzip_manifests(built.disks)
    past = time.time() - 86400
    for d in built.disks:
        (d / "meta" / "MANIFEST").write_bytes(b"-\t0\t100644\t1.000000000\t/stale-only\n")
        os.utime(d / "meta" / "MANIFEST", (past, past))
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *built.disks, out)
    assert_same_tree(built.orig, out)


def test_recover_a_damaged_gzipped_manifest(built, tools, restricted_bin, tmp_path):
    """A MANIFEST.gz cut short: one warning, the names before the cut rebuilt."""
    gzip_manifests(built.disks)
    for d in built.disks:
        data = (d / "meta" / "MANIFEST.gz").read_bytes()
        (d / "meta" / "MANIFEST.gz").write_bytes(data[:len(data) // 2])
    out = tmp_path / "out"
    proc = subprocess.run([str(tools / "webfs-recover"), *map(str, built.disks), str(out)],
                          capture_output=True, env={"PATH": str(restricted_bin), "TMPDIR": str(tmp_path)},
                          timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert b"warn\t\tMANIFEST.gz is damaged (" in proc.stderr, proc.stderr
    assert (out / "crawl-2024").is_dir()


def test_partial_journal_line_is_ignored(built, tools, restricted_bin, tmp_path):
    for d in built.disks:
        with open(d / "meta" / "JOURNAL", "ab") as f:
            f.write(b"-\t/crawl-2024/exam")        # a write cut short by a crash
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, tmp_path / "out")
    assert b"incomplete last line" in proc.stderr
    assert_same_tree(built.orig, tmp_path / "out")


def expected_without_manifest(blocks: dict) -> dict:
    """Where webfs-recover must put each document when there is no manifest."""
    def usable(name: bytes) -> bool:
        parts = name.split(b"/")
        return (name.startswith(b"/") and len(parts) > 1 and parts[1] != b"by-signature"
                and all(p not in (b"", b".", b"..") for p in parts[1:]) and b"\0" not in name)
    claims: dict[bytes, list] = {}
    out = {}
    for key, (disk, data, hint, created) in blocks.items():
        if usable(hint):
            claims.setdefault(hint, []).append(key)
        else:
            out[b"/by-signature/" + key.encode()] = data
    for name, keys in claims.items():
        is_dir = any(other.startswith(name + b"/") for other in claims)
        if len(keys) == 1 and not is_dir:
            out[name] = blocks[keys[0]][1]
        else:
            for k in keys:
                out[b"/by-signature/" + k.encode()] = blocks[k][1]
    return out


def test_recover_without_any_manifest(built, tools, restricted_bin, tmp_path):
    for d in built.disks:
        shutil.rmtree(d / "meta")
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out)
    assert b"no MANIFEST" in proc.stderr
    got = {p: v[3] for p, v in tree(out).items() if v[0] != "dir"}
    want = expected_without_manifest(built.blocks)
    assert sorted(got) == sorted(want)
    assert got == want
    # named documents get their Created: time as mtime, mode 0644
    logo = next(v for v in built.blocks.values() if v[2].endswith(b"/logo.png"))
    st = os.lstat(out / "crawl-2024" / "example.org" / "logo.png")
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)) == logo[3]
    assert stat.S_IMODE(st.st_mode) == 0o644
    # the pieces of a split file all claim its name: they go by signature
    assert b"/crawl-2024/big-random.bin" not in got
    assert b"claimed by several" in proc.stderr


def test_recover_without_manifest_after_losing_a_disk(built, tools, restricted_bin, tmp_path):
    shutil.rmtree(built.disks[2])
    alive = built.disks[:2] + built.disks[3:]
    for d in alive:
        shutil.rmtree(d / "meta")
    unparity(tools, restricted_bin, "--out", tmp_path / "u", *alive)
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *alive, tmp_path / "u", out)
    got = {p: v[3] for p, v in tree(out).items() if v[0] != "dir"}
    assert got == expected_without_manifest(built.blocks)


def test_depth_two_archive(tmp_path_factory, tools, restricted_bin, tmp_path):
    b = build_archive(tmp_path_factory.mktemp("depth2"), history(9), ndisks=3, depth=2,
                      group_size=3, max_block=8192)
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *b.disks, out)
    assert_same_tree(b.orig, out)
    shutil.rmtree(b.disks[0])
    unparity(tools, restricted_bin, "--out", tmp_path / "u", *b.disks[1:])
    recover(tools, restricted_bin, tmp_path, *b.disks[1:], tmp_path / "u", tmp_path / "out2")
    assert_same_tree(b.orig, tmp_path / "out2")


def test_fifo_and_a_manifest_without_the_root(tmp_path_factory, tools, restricted_bin, tmp_path):
    """The writer need not list "/"; a FIFO is rebuilt with mkfifo."""
    b = build_archive(tmp_path_factory.mktemp("fifo"), [
        ("mkdir", b"/d", 0o750), ("write", b"/d/f", b"x" * 100, 0o644), ("checkpoint",)])
    for d in b.disks:
        lines = (d / "meta" / "MANIFEST").read_bytes().splitlines(keepends=True)
        lines = [l for l in lines if not l.endswith(b"\t/\n")]
        lines.append(b"-\t0\t10640\t1700000000.250000000\t/d/fifo\n")
        (d / "meta" / "MANIFEST").write_bytes(b"".join(lines))
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *b.disks, out)
    st = os.lstat(out / "d" / "fifo")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_mtime_ns == 1_700_000_000_250_000_000
    assert stat.S_IMODE(os.lstat(out / "d").st_mode) == 0o750
    assert (out / "d" / "f").read_bytes() == b"x" * 100


def test_no_manifest_reports_bad_blocks(built, tools, restricted_bin, tmp_path):
    for d in built.disks:
        shutil.rmtree(d / "meta")
    key, (disk, data, hint, created) = next(
        (k, v) for k, v in built.blocks.items() if v[2].endswith(b"/logo.png"))
    f = built.disks[disk] / "blocks" / sig_path(key, built.depth)
    f.write_bytes(b"WEBFS-BLOCK 9" + f.read_bytes()[13:])
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out, expect=1)
    assert f"lost\t(block {key})\tbad header: ".encode() in proc.stderr
    got = {p: v[3] for p, v in tree(out).items() if v[0] != "dir"}
    want = expected_without_manifest({k: v for k, v in built.blocks.items() if k != key})
    assert got == want


def test_format_man_page(tmp_path):
    page = REPO / "man" / "webfs-format.5"
    for cmd in (["groff", "-man", "-ww", "-z", str(page)],
                ["man", "--warnings", "-l", str(page)]):
        if not shutil.which(cmd[0]):
            continue
        proc = subprocess.run(cmd, capture_output=True, env=dict(os.environ, MANWIDTH="80"))
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
    text = page.read_text()
    # the worked example is right
    doc = b"<html><body>Hello, web archive!</body></html>\n"
    sig = signature(doc)
    assert sig == "2bedce12eeeacb1cff4f4580eefe0d7c" and sig in text
    for depth in (2, 3, 4):
        assert "blocks/" + sig_path(sig, depth) in text
    # everything a reader needs is named
    for word in ("WEBFS\\-BLOCK 1", "Signature", "Size", "Stored", "Codec", "Refs", "Created",
                 "Name", "WEBFS\\-PARITY 1", "Header\\-Bytes", "Stripe", "Length", "Member",
                 "MANIFEST", "JOURNAL", "catalog.db", "WEBFS\\-DISK", "webfs.conf", "depth",
                 "max_block", "group_size", "~1", "dd if=", "gunzip", "webfs\\-recover",
                 "webfs\\-unparity", "<>"):
        assert word in text, word


def test_unparity_verify_all_replaces_a_rotten_block(tmp_path_factory, tools, restricted_bin,
                                                    tmp_path):
    """A gzip block whose payload rotted on its disk: unparity --verify-all rebuilds it, and
    webfs-recover falls back to that copy when the first one does not decode."""
    b = build_archive(tmp_path_factory.mktemp("rot"), history(10))
    key, (disk, data, hint, created) = next(
        (k, v) for k, v in b.blocks.items() if v[2].endswith(b"/index.html"))
    f = b.disks[disk] / "blocks" / sig_path(key, b.depth)
    raw = bytearray(f.read_bytes())
    raw[600] ^= 0xFF
    f.write_bytes(bytes(raw))
    # without --verify-all nothing is missing, so nothing is rebuilt
    unparity(tools, restricted_bin, "--out", tmp_path / "u0", *b.disks, with_xxhash=True)
    assert not (tmp_path / "u0" / "blocks").exists()
    unparity(tools, restricted_bin, "--verify-all", "--out", tmp_path / "u", *b.disks,
             with_xxhash=True)
    assert (tmp_path / "u" / "blocks" / sig_path(key, b.depth)).is_file()
    recover(tools, restricted_bin, tmp_path, *b.disks, tmp_path / "out0", expect=1)
    recover(tools, restricted_bin, tmp_path, *b.disks, tmp_path / "u", tmp_path / "out")
    assert_same_tree(b.orig, tmp_path / "out")


# ------------------------------------------- block Digests (SHA-256) checked --
# An identity block holds the document as it is: a damaged payload still
# "decodes". Its header's Digest (the SHA-256 of the document) is what tells.

def rot_in_place(f: Path, at: int = 100) -> bytes:
    """Overwrite 4 payload bytes of block file f (its length kept); the old bytes."""
    raw = bytearray(f.read_bytes())
    old = bytes(raw)
    pos = 512 + min(at, len(raw) - 512 - 4)
    raw[pos:pos + 4] = bytes(b ^ 0x5A for b in raw[pos:pos + 4])
    f.write_bytes(bytes(raw))
    return old


def identity_block(b: Built, hint: bytes, piece: int = 0) -> tuple[str, Path]:
    """The key and file of the piece-th identity block whose Name hint is hint."""
    keys = [k for k, v in b.blocks.items() if v[2] == hint]
    files = [b.disks[b.blocks[k][0]] / "blocks" / sig_path(k, b.depth) for k in keys]
    found = [(k, f) for k, f in zip(keys, files) if b"\nCodec: identity\n" in f.read_bytes()[:512]]
    found.sort(key=lambda kf: kf[0])
    assert len(found) > piece, (hint, keys)
    return found[piece]


@pytest.mark.parametrize("shell", SHELLS)
def test_recover_checks_the_digest_of_identity_blocks(built, tools, restricted_bin, tmp_path,
                                                      shell):
    """Identity blocks damaged in place (a whole file, one piece of a split file,
    a symlink's target): webfs-recover reports those files lost, never writes
    the damaged bytes, and rebuilds everything else; without a manifest too."""
    E = b"/crawl-2024/example.org"
    damaged = [identity_block(built, E + b"/logo.png"),
               identity_block(built, b"/crawl-2024/big-random.bin", 1),
               identity_block(built, E + b"/link-rel")]
    for key, f in damaged:
        rot_in_place(f)
    sh = [shutil.which(shell)] + (["--posix"] if shell == "bash" else [])
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out, shell=sh, expect=1)
    lost = {l.split(b"\t")[1]: l.split(b"\t")[2]
            for l in proc.stderr.split(b"\n") if l.startswith(b"lost\t")}
    assert sorted(lost) == sorted([E + b"/logo.png", b"/crawl-2024/big-random.bin",
                                   E + b"/link-rel"]), proc.stderr.decode()
    for (key, f), path in zip(damaged, [E + b"/logo.png", b"/crawl-2024/big-random.bin",
                                        E + b"/link-rel"]):
        assert b"is not the Digest in its header" in lost[path], lost[path]
        assert os.fsencode(f.relative_to(f.parents[3])) in lost[path], lost[path]
        assert not os.path.lexists(os.fsencode(out) + path)
    assert b"; 3 lost;" in proc.stderr
    assert b"matched the Digest (SHA-256) in their header" in proc.stderr
    a, b = tree(built.orig), tree(out)
    for p in lost:
        del a[p]
    assert a == b
    # without a manifest: each damaged block is lost, not named with wrong bytes
    for d in built.disks:
        shutil.rmtree(d / "meta")
    out2 = tmp_path / "out2"
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out2, shell=sh, expect=1)
    want = expected_without_manifest(built.blocks)
    gone = set()
    for key, f in damaged:
        hint, data = built.blocks[key][2], built.blocks[key][1]
        gone.add(hint if want.get(hint) == data else b"/by-signature/" + key.encode())
    assert gone <= set(want)
    lost = [l.split(b"\t") for l in proc.stderr.split(b"\n") if l.startswith(b"lost\t")]
    assert sorted(l[1] for l in lost) == sorted(gone), proc.stderr.decode()
    assert all(b"is not the Digest in its header" in l[2] for l in lost)
    got = {p: v[3] for p, v in tree(out2).items() if v[0] != "dir"}
    assert got == {p: v for p, v in want.items() if p not in gone}


def test_recover_checks_the_digest_of_gzip_pieces(tmp_path_factory, tools, restricted_bin,
                                                  tmp_path):
    """A gzip block whose header's Digest is not its document's (here the
    header is the damaged part; gzip's CRC cannot tell): the file is lost,
    whether the block is a file's first piece or a later one."""
    rnd = random.Random(3)
    text = b"".join(b"<p>line %d</p>\n" % rnd.randrange(99) for _ in range(2000))
    b = build_archive(tmp_path_factory.mktemp("gz"), [
        ("write", b"/one.html", text[:20000], 0o644),
        ("write", b"/two.bin", rnd.randbytes(8192) + text[5000:], 0o644),
        ("write", b"/ok.html", text[1000:9000], 0o644), ("checkpoint",)], max_block=8192)
    for name, piece in ((b"/one.html", 0), (b"/two.bin", 1)):
        key = [k for k, v in b.blocks.items() if v[2] == name
               and b.blocks[k][1] == ((text[:20000] if piece == 0 else text[5000:])[:8192])]
        assert len(key) == 1, (name, key)
        f = b.disks[b.blocks[key[0]][0]] / "blocks" / sig_path(key[0], b.depth)
        raw = bytearray(f.read_bytes())
        assert b"\nCodec: gzip\n" in raw[:512]
        at = raw.index(b"Digest: sha256:") + 15
        raw[at] = ord("0") if raw[at] != ord("0") else ord("1")
        f.write_bytes(bytes(raw))
    proc = recover(tools, restricted_bin, tmp_path, *b.disks, tmp_path / "out", expect=1)
    lost = {l.split(b"\t")[1]: l.split(b"\t")[2]
            for l in proc.stderr.split(b"\n") if l.startswith(b"lost\t")}
    assert sorted(lost) == [b"/one.html", b"/two.bin"], proc.stderr.decode()
    assert all(b"is not the Digest in its header" in why for why in lost.values())
    assert (tmp_path / "out" / "ok.html").read_bytes() == text[1000:9000]


def test_recover_without_sha256sum_says_so_and_checks_as_before(built, tools, restricted_bin,
                                                               tmp_path):
    """No sha256sum on the PATH: one note says Digests are not checked; blocks are
    checked as before (an identity block damaged in place is not caught)."""
    bindir = tmp_path / "bin"
    shutil.copytree(restricted_bin, bindir, symlinks=True)
    (bindir / "sha256sum").unlink()
    key, f = identity_block(built, b"/crawl-2024/example.org/logo.png")
    good = tmp_path / "good"
    recover(tools, bindir, tmp_path, *built.disks, good)
    assert_same_tree(built.orig, good)
    rot_in_place(f)
    out = tmp_path / "out"
    proc = recover(tools, bindir, tmp_path, *built.disks, out)
    assert proc.stderr.count(b"sha256sum (or tee) is not installed: block Digests are not checked") == 1
    assert b"matched the Digest" not in proc.stderr


def test_unparity_verify_all_without_xxhash_rebuilds_a_damaged_identity_block(
        built, tools, restricted_bin, tmp_path):
    """An identity block damaged in place (its length kept): webfs-unparity
    --verify-all, with a Python that has no xxhash, finds it by its Digest and
    rebuilds it from parity, byte for byte; webfs-recover then gives the exact
    tree (the rebuilt copy given after the disks, as the fallback, or before them)."""
    key, f = identity_block(built, b"/crawl-2024/example.org/logo.png")
    old = rot_in_place(f)
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u0", *built.disks)
    assert not (tmp_path / "u0" / "blocks").exists()           # nothing missing
    proc = unparity(tools, restricted_bin, "--verify-all", "--out", tmp_path / "u", *built.disks)
    assert b"sha256 digests checked; xxh3-128 check off" in proc.stderr, proc.stderr
    rebuilt = tmp_path / "u" / "blocks" / sig_path(key, built.depth)
    assert rebuilt.read_bytes() == old
    assert [p for p in (tmp_path / "u" / "blocks").rglob("*") if p.is_file()] == [rebuilt]
    recover(tools, restricted_bin, tmp_path, *built.disks, tmp_path / "u", tmp_path / "out")
    assert_same_tree(built.orig, tmp_path / "out")
    recover(tools, restricted_bin, tmp_path, tmp_path / "u", *built.disks, tmp_path / "out2")
    assert_same_tree(built.orig, tmp_path / "out2")


def stripe_of(b: Built, key: str) -> tuple[Path, list[str]]:
    """The parity file whose stripe holds key, and the keys of its members."""
    for pf in (p for d in b.disks for p in (d / "parity").rglob("*") if p.is_file()):
        head = pf.read_bytes()[:4096].decode("ascii", "replace")
        members = [l.split(" ")[1] for l in head.split("\n") if l.startswith("Member: ")]
        if key in members:
            return pf, members
    raise AssertionError(f"{key} is in no stripe")


def test_unparity_without_xxhash_checks_present_and_rebuilt_blocks_by_digest(
        built, tools, restricted_bin, tmp_path):
    """Without xxhash: a damaged identity member is not XOR-ed into a rebuild
    (the lost member is reported, not written with wrong bytes), and a
    rebuild from a damaged parity file is checked by the Digest of the damaged
    copy's header."""
    key, f = identity_block(built, b"/crawl-2024/example.org/logo.png")
    pf, members = stripe_of(built, key)
    others = [k for k in members if k != key]
    assert others, members
    # 1. a member on another disk is lost, the identity member is damaged
    victim = others[0]
    vfile = built.disks[built.blocks[victim][0]] / "blocks" / sig_path(victim, built.depth)
    saved = vfile.read_bytes()
    vfile.unlink()
    rot_in_place(f)
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "u", *built.disks, expect=1)
    assert f"lost\tblocks/{sig_path(victim, built.depth)}\t".encode() in proc.stderr, proc.stderr
    assert b"SHA-256 of the document is not the Digest in its header" in proc.stderr
    assert not (tmp_path / "u" / "blocks" / sig_path(victim, built.depth)).exists()
    # 2. the identity member damaged, and the parity file too: the rebuilt
    # document is not its Digest, so it is not written
    vfile.write_bytes(saved)
    data = bytearray(pf.read_bytes())
    hbytes = int(data.split(b"Header-Bytes: ")[1].split(b"\n")[0])
    data[hbytes + 300] ^= 0xFF
    pf.write_bytes(bytes(data))
    proc = unparity(tools, restricted_bin, "--verify-all", "--out", tmp_path / "u2", *built.disks,
                    expect=1)
    assert f"lost\tblocks/{sig_path(key, built.depth)}\trebuilt from".encode() in proc.stderr
    assert b"whose Digest it was checked by" in proc.stderr, proc.stderr
    assert not (tmp_path / "u2" / "blocks" / sig_path(key, built.depth)).exists()


# ------------------------------------------------- hostile input (issue 11) --
# Records on the disks are input from whoever could write the disks: a name
# from a MANIFEST, JOURNAL or header must pass the rules a name made through
# the mount passes, and no output may leave the directory the user named.

HOSTILE_JOURNAL = [
    b"+\t-\t0\t100644\t1.000000000\t/.",
    b"+\t-\t0\t100644\t1.000000000\t/..",
    b"+\t-\t0\t40755\t1.000000000\t/crawl-2024/..",
    b"+\t-\t0\t100644\t1.000000000\t/crawl-2024/" + b"n" * 5000,
    b"+\t-\t0\t100644\t1.000000000\t/crawl-2024/example.org/link-abs/child",
    b"+\t-\t0\t40755\t1.000000000\t/crawl-2024/example.org/link-abs/dir",
    b">\t/crawl-2024/example.org/logo.png\t/../../x",
    b">\t/crawl-2024/example.org/logo.png\t/crawl-2024/../../y",
    b">\t/crawl-2024/example.org/logo.png\t/crawl-2024/example.org/link-abs/z",
    b"<>\t/crawl-2024/example.org/logo.png\t/..",
    b"+\t-\t0\t100644\t1.000000000\t/nul\0name",
    b"+\t-\t0\t100644\t1.000000000\t/bad\\qescape",
    b"+\t-\t0\t100644\t1.000000000\trelative/x",
    b"-\t/..",
    b"+\t-\t0\t100644\t1.000000000\t/crawl-2024",
]


def add_hostile_journal(disks: list[Path], lines=HOSTILE_JOURNAL) -> int:
    """Append lines to JOURNAL on every disk; returns the number of the first."""
    first = None
    for d in disks:
        j = d / "meta" / "JOURNAL"
        old = j.read_bytes()
        first = old.count(b"\n") + 1
        j.write_bytes(old + b"".join(l + b"\n" for l in lines))
    return first


@pytest.mark.parametrize("shell", SHELLS)
def test_recover_ignores_hostile_journal_names(built, tools, restricted_bin, tmp_path, shell):
    """'.', '..', 5,000-byte names, children of a symlink, renames out of the
    tree, NUL bytes, bad escapes: each line is reported with its number and
    skipped; the tree is exactly the original, nothing lands outside OUTDIR."""
    assert os.path.islink(built.orig / "crawl-2024" / "example.org" / "link-abs")
    first = add_hostile_journal(built.disks)
    out = tmp_path / "w" / "out"
    (tmp_path / "w").mkdir()
    before = sorted(os.listdir(tmp_path))
    sh = [shutil.which(shell)] + (["--posix"] if shell == "bash" else [])
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, out, shell=sh)
    assert_same_tree(built.orig, out)
    assert sorted(os.listdir(tmp_path)) == before          # nothing beside OUTDIR
    assert sorted(os.listdir(tmp_path / "w")) == ["out"]
    err = proc.stderr
    for n in range(first, first + len(HOSTILE_JOURNAL)):
        if HOSTILE_JOURNAL[n - first].startswith(b"+\t-\t0\t100644\t1.000000000\t/nul"):
            continue            # NUL lines: reported as a whole (the shell cannot number them)
        assert b"JOURNAL line %d " % n in err, (n, err.decode(errors="replace")[-3000:])
    assert b"NUL bytes" in err
    assert b"longer than 255 bytes" in err


def test_recover_report_never_leaves_outdir(built, tools, restricted_bin, tmp_path):
    """The report was OUTDIR.report, written through a symlink planted there."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    os.symlink(victim, tmp_path / "out.report")
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *built.disks, out)
    assert victim.read_bytes() == b"precious\n"
    assert b"0 lost" in report_of(out)
    assert_same_tree(built.orig, out)
    # --report names a file: it is made new, never through a symlink
    os.symlink(victim, tmp_path / "r.txt")
    recover(tools, restricted_bin, tmp_path, *built.disks, tmp_path / "out2",
            "--report", tmp_path / "r.txt", expect=2)
    assert victim.read_bytes() == b"precious\n"


def test_recover_refuses_symlink_or_nonempty_outdir(built, tools, restricted_bin, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "out")
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, tmp_path / "out", expect=2)
    assert b"symlink" in proc.stderr
    assert os.listdir(target) == []
    os.symlink(tmp_path / "victim", target / "planted")
    proc = recover(tools, restricted_bin, tmp_path, *built.disks, target, expect=2)
    assert b"not empty" in proc.stderr and not (tmp_path / "victim").exists()


def test_recover_root_file_named_like_the_report(tmp_path_factory, tools, restricted_bin,
                                                  tmp_path):
    """An archive that holds /.webfs-recover.report itself keeps it; the
    report moves aside."""
    ops = [("mkdir", b"/d", 0o755), ("write", b"/" + REPORT.encode(), b"mine\n", 0o644),
           ("write", b"/d/f", b"x" * 100, 0o600), ("checkpoint",)]
    b = build_archive(tmp_path_factory.mktemp("named"), ops)
    out = tmp_path / "out"
    recover(tools, restricted_bin, tmp_path, *b.disks, out)
    assert (out / REPORT).read_bytes() == b"mine\n"
    assert b"0 lost" in (out / (REPORT + ".1")).read_bytes()
    assert (out / "d" / "f").read_bytes() == b"x" * 100


def test_recover_hostile_name_hints(built, tools, restricted_bin, tmp_path):
    """No MANIFEST: Name: hints that climb out ('..'), are relative, hold NUL or
    name the report go to by-signature/; nothing lands outside OUTDIR."""
    hints = ["/%2E%2E/%2E%2E/escaped", "../../escaped", "/a/%00/b", "/" + REPORT,
             "/crawl-2024/" + "n" * 300]
    for d in built.disks:
        shutil.rmtree(d / "meta")
    changed = 0
    for d in built.disks:
        for f in sorted((d / "blocks").rglob("*")):
            if f.is_file() and changed < len(hints):
                raw = bytearray(f.read_bytes())
                head = bytes(raw[:512]).split(b"\n")
                head = [l for l in head if not l.startswith(b"Name: ")]
                text = b"\n".join(head[:-1]).rstrip(b" \n") + b"\nName: " + hints[changed].encode() + b"\n"
                text = text[:511].ljust(511, b" ") + b"\n"
                raw[:512] = text
                f.write_bytes(bytes(raw))
                changed += 1
    assert changed == len(hints)
    (tmp_path / "w").mkdir()
    out = tmp_path / "w" / "out"
    recover(tools, restricted_bin, tmp_path, *built.disks, out)
    assert sorted(os.listdir(tmp_path / "w")) == ["out"]
    assert not (tmp_path / "escaped").exists() and not (out / "escaped").exists()
    assert not (out / "a").exists()
    assert len(os.listdir(out / "by-signature")) >= len(hints)
    assert b"0 lost" in report_of(out)


def test_unparity_out_must_be_new_and_not_a_symlink(built, tools, restricted_bin, tmp_path):
    lost = 1
    shutil.rmtree(built.disks[lost])
    alive = [d for i, d in enumerate(built.disks) if i != lost]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # --out holding a planted symlink 'blocks' -> elsewhere
    planted = tmp_path / "planted"
    planted.mkdir()
    os.symlink(elsewhere, planted / "blocks")
    proc = unparity(tools, restricted_bin, "--out", planted, *alive, expect=2)
    assert b"not empty" in proc.stderr
    assert os.listdir(elsewhere) == []
    # --out itself a symlink
    os.symlink(elsewhere, tmp_path / "link")
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "link", *alive, expect=2)
    assert b"symlink" in proc.stderr
    assert os.listdir(elsewhere) == []
    # a new directory works
    unparity(tools, restricted_bin, "--out", tmp_path / "new", *alive)
    assert any((tmp_path / "new" / "blocks").rglob("*"))
    # a parity header whose member climbs out ('../..' as its signature) is refused
    pfile = next(p for d in alive for p in sorted((d / "parity").rglob("*")) if p.is_file())
    raw = pfile.read_bytes()
    head = raw[:512].split(b"\n")
    i = next(i for i, l in enumerate(head) if l.startswith(b"Member: "))
    head[i] = b"Member: ../../../../escaped 0 1 1 identity 2026-01-01T00:00:00Z x"
    text = b"\n".join(head)[:511].ljust(511, b" ") + b"\n"
    pfile.write_bytes(text + raw[512:])
    proc = unparity(tools, restricted_bin, "--out", tmp_path / "new2", *alive, expect=1)
    assert b"bad signature in Member line" in proc.stderr
    assert not any(p.name == "escaped" for p in tmp_path.rglob("escaped"))


def tree_by_fd(root: Path) -> dict:
    """tree(), read through directory descriptors: below PATH_MAX or not."""
    out = {}

    def visit(fd: int, rel: bytes) -> None:
        for e in os.scandir(fd):
            name = os.fsencode(e.name)
            if rel == b"" and name == os.fsencode(REPORT):
                continue
            st = os.lstat(name, dir_fd=fd)
            p = rel + b"/" + name
            if stat.S_ISDIR(st.st_mode):
                out[p] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns, None)
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                try:
                    visit(sub, p)
                finally:
                    os.close(sub)
            else:
                f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
                with os.fdopen(f, "rb") as fh:
                    out[p] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, fh.read())

    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        visit(fd, b"")
    finally:
        os.close(fd)
    return out


@pytest.mark.parametrize("shell", SHELLS)
def test_recover_a_tree_deeper_than_path_max(tmp_path_factory, tools, restricted_bin, tmp_path,
                                             shell):
    """100 levels of 50-byte names (over 5,000 bytes: past PATH_MAX, far below
    the 900-level bound): every file comes back byte for byte, and with its
    directories' modes and mtimes; nothing is left out silently."""
    top, leaf = b"the top file\n", b"the leaf at the bottom\n" * 300
    b = build_archive(tmp_path_factory.mktemp("deep"), [
        ("write", b"/top", top, 0o644), ("write", b"/leaf", leaf, 0o640), ("checkpoint",)])
    deep = b""
    dirs = []
    for i in range(100):
        deep += b"/d%03d" % i + b"x" * 46
        dirs.append(deep)
    assert len(deep) > 4096
    expect = {b"/top": ("file", 0o644, None, top), deep + b"/leaf": ("file", 0o640, None, leaf)}
    for d in b.disks:
        man = d / "meta" / "MANIFEST"
        if not man.exists():
            continue
        lines = man.read_bytes().splitlines(keepends=True)
        moved = []
        for line in lines:
            if line.endswith(b"\t/leaf\n"):
                line = line[:-len(b"/leaf\n")] + deep + b"/leaf\n"
            moved.append(line)
            if line.endswith(b"\t/\n"):
                moved += [b"-\t0\t40750\t%d.500000000\t%s\n" % (1_700_000_000 + i, p)
                          for i, p in enumerate(dirs)]
        assert any(l.endswith(deep + b"/leaf\n") for l in moved)
        man.write_bytes(b"".join(moved))
    for i, p in enumerate(dirs):
        expect[p] = ("dir", 0o750, (1_700_000_000 + i) * 10**9 + 500_000_000, None)
    sh = [shutil.which(shell)] + (["--posix"] if shell == "bash" else [])
    out = tmp_path / "out"
    proc = recover(tools, restricted_bin, tmp_path, *b.disks, out, shell=sh)
    err = proc.stderr.decode(errors="replace")
    got = tree_by_fd(out)
    for p in (b"/top", deep + b"/leaf"):
        assert p in got, err[-2000:]
        got[p] = got[p][:2] + (None,) + got[p][3:]
    assert got == expect
    report = report_of(out)
    assert b"\nlost\t" not in report and b"; 0 lost; 0 warnings" in report, report
    # one line a problem, never a stream of shell errors
    assert all(l.startswith(("#", "lost\t", "warn\t")) for l in err.splitlines()), err[-2000:]
