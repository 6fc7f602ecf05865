"""The sections of tools/bench that issue 10 (a concurrent data path) asks
for, beside the older ones:

small     a second corpus of small pages (make-corpus --small-pages, median
          page about 6 KB; --small-size per crawl, two crawls: the second is
          import's crawl 2): cp -r of its first crawl
          into every target (figure small.cp), then cold cat and grep -r of
          it (small.cat.cold, small.grep.cold), interleaved and repeated like
          ingest and read, on targets of their own.
import    `webfs import` against `cp -r` into a plain directory on the same
          filesystem (figure import.1: the plain target's number is cp -r,
          webfs's is webfs import into a mount), crawl 2 beside crawl 1
          (import.2), a rerun that finds everything there (import.rerun) and
          an import into DISK:/PATH of an unmounted archive (import.disk);
          on the main corpus, and on the small one (import.small; made here
          when the small section did not run).  The source is read once before each command
          and everything is synced first, as tools/bench-import did.
underload the small section's cp -r and cold cat again, with two CPU-bound
          processes running beside (load.cp, load.cat.cold): how each
          target holds up when its wake-ups wait for a core.
scale     a --scale-files ingest of small pages (20,000; 100,000 with
          --full) with cp -r in ten slices by host: files/s of each slice,
          the daemon's RSS and CPU per file, those of its indexing process
          apart, and meta/ bytes (every disk) after each (and its peak,
          sampled every 0.5 s during the copy), and meta/ after `webfs
          umount` (at rest).  Figures at 10 %, 50 %, 100 %.
"""

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time

from bench_lib import BenchError, log, rmtree, run, sh, timed
from bench_targets import Plain, Webfs
from webfs.index import INDEX_FILE

HERE = os.path.dirname(os.path.abspath(__file__))


def _fail(ctx, section, name, exc):
    msg = str(exc)
    log("FAILED %s %s: %s", section, name, msg.splitlines()[0] if msg else "")
    ctx.failures.append({"target": name, "where": section, "error": msg[-3000:]})


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def tree_size(top):
    files = nbytes = 0
    for dirpath, _, filenames in os.walk(top):
        for f in filenames:
            files += 1
            nbytes += os.lstat(os.path.join(dirpath, f)).st_size
    return files, nbytes


def warm(path):
    """Read a tree once, so that the timed command measures the target."""
    sh("tar -cf - . | cat > /dev/null", cwd=path, check=False)


def small_corpus(ctx):
    """The small-page corpus (made once per run): its directory."""
    if ctx.extra.get("small_corpus"):
        return ctx.extra["small_corpus"]["path"]
    o = ctx.opts
    path = os.path.join(ctx.workdir, "small-corpus")
    argv = [sys.executable, os.path.join(HERE, "make-corpus"), "--seed", str(o.seed),
            "--small-pages", "--size", o.small_size, "--crawls", "2", path]
    log("making the small-page corpus: %s", " ".join(argv[2:]))
    t0 = time.perf_counter()
    run(argv, timeout=o.timeout)
    files, nbytes = tree_size(os.path.join(path, "crawl-001"))
    sizes = sorted(os.lstat(os.path.join(d, f)).st_size
                   for d, _, fs in os.walk(os.path.join(path, "crawl-001"))
                   for f in fs if f.endswith((".html", ".htm")))
    ctx.extra["small_corpus"] = {
        "path": path, "files": files, "bytes": nbytes, "size": o.small_size,
        "median_page": sizes[len(sizes) // 2] if sizes else None, "pages": len(sizes),
        "seconds": time.perf_counter() - t0}
    log("small-page corpus: %d files, %.1f MB, median page %s bytes", files, nbytes / 1e6,
        ctx.extra["small_corpus"]["median_page"])
    return path


# ---------------------------------------------------------------- small

def cold(ctx, t):
    """Unmount, drop caches, mount (ctx.cold without its mount-time figure,
    which is the main corpus's)."""
    try:
        t.remount_cold()
    except BenchError as e:
        ctx.fail(t, "remount", e)
        return False
    return True


def small(ctx):
    small_corpus(ctx)
    info = ctx.extra["small_corpus"]
    what = "small pages (median %s B), %d files" % (info["median_page"], info["files"])
    ctx.figure("small", "small.cp", "cp -r, %s" % what, "time")
    ctx.figure("small", "small.cat.cold", "cat every file, cold, small pages", "time")
    ctx.figure("small", "small.grep.cold", "grep -r zyzzogeton, cold, small pages", "time")
    _copy_then_read(ctx, "small", "small", grep=True)


def underload(ctx):
    """The small section's cp -r and cold cat with HOGS CPU-bound processes
    running beside (on 2 cores: each request's wake-ups wait for a core)."""
    small_corpus(ctx)
    info = ctx.extra["small_corpus"]
    what = "small pages, %d files, %d CPU hogs beside" % (info["files"], HOGS)
    ctx.figure("underload", "load.cp", "cp -r, %s" % what, "time")
    ctx.figure("underload", "load.cat.cold", "cat every file, cold, %s" % what, "time")
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(HOGS)]
    try:
        _copy_then_read(ctx, "underload", "load", grep=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


HOGS = 2


def _copy_then_read(ctx, section, prefix, grep):
    """cp -r of the small corpus into each target (PREFIX.cp), then a cold cat
    (PREFIX.cat.cold) and grep -r (PREFIX.grep.cold), interleaved, repeated,
    on targets of their own beside those the read sections keep."""
    corpus = small_corpus(ctx)
    src = os.path.join(corpus, "crawl-001")
    files, nbytes = ctx.extra["small_corpus"]["files"], ctx.extra["small_corpus"]["bytes"]
    try:
        with open(os.path.join(corpus, "corpus.json")) as f:
            rare = len(json.load(f)["crawls"][0]["rare_word_files"])
    except (OSError, ValueError, KeyError, IndexError):
        rare = None
    targets = [t.__class__(t.name, os.path.join(ctx.workdir, "targets-" + section, t.name), ctx.opts)
               for t in ctx.targets]
    rotated = lambda rep: targets[rep % len(targets):] + targets[:rep % len(targets)]
    for rep in range(ctx.repeat):
        for t in rotated(rep):
            try:
                t.create()
            except BenchError as e:
                ctx.fail(t, section, e)
                continue
            try:
                warm(src)
                dst = os.path.join(t.path, "crawl-001")
                m = ctx.measure(t, prefix + ".cp", rep, "cp -r %s %s" % (shlex.quote(src), shlex.quote(dst)),
                                cwd=t.path, files=files, nbytes=nbytes, sync=True)
                if not m or not m["ok"]:
                    continue
                catalog_size(ctx, t, files)
                if not cold(ctx, t):
                    continue
                ctx.measure(t, prefix + ".cat.cold", rep, "find . -type f -exec cat {} + | wc -c",
                            cwd=t.path, files=files, nbytes=nbytes,
                            check=lambda out: int(out.split()[0]) == nbytes,
                            expect="%d bytes" % nbytes)
                if not grep or not cold(ctx, t):
                    continue
                ctx.measure(t, prefix + ".grep.cold", rep,
                            "{ grep -r zyzzogeton . || test $? = 1; } | wc -l", cwd=t.path,
                            files=files, nbytes=nbytes,
                            check=(lambda out: int(out.split()[0]) == rare) if rare is not None else None,
                            expect="%s lines" % rare)
            finally:
                t.destroy()


# --------------------------------------------------------------- import

def import_runs(ctx, corpus, crawls, tag, info):
    """cp -r into a plain directory against webfs import into a mount, crawl
    by crawl; rerun of the first; import into DISK:/PATH unmounted."""
    o = ctx.opts
    srcs = [os.path.join(corpus, c) for c in crawls]
    sizes = [tree_size(s) for s in srcs]
    where = " (small pages)" if tag else ""
    ctx.figure("import", "import.%s1" % tag, "%s%s into an empty directory: cp -r to a plain "
               "directory (plain) vs webfs import into a mount (webfs)" % (crawls[0], where), "time")
    if len(crawls) > 1:
        ctx.figure("import", "import.%s2" % tag, "%s beside %s: cp -r (plain) vs webfs import "
                   "(webfs)" % (crawls[1], crawls[0]), "time")
    ctx.figure("import", "import.%srerun" % tag, "webfs import %s%s again (nothing new)" % (crawls[0], where),
               "time")
    ctx.figure("import", "import.%sdisk" % tag, "webfs import %s%s into DISK:/PATH, unmounted"
               % (crawls[0], where), "time")
    root = os.path.join(ctx.workdir, "targets-import")
    plain = Plain("plain", os.path.join(root, "plain"), o)
    web = Webfs("webfs", os.path.join(root, "webfs"), o)
    why = web.available()
    if why:
        raise BenchError(why)
    cmd = shlex.quote(o.webfs_cmd)

    def step(t, key, rep, command, i):
        warm(srcs[i])
        os.sync()               # no writeback of an earlier step lands in this one
        m = ctx.measure(t, key, rep, command, cwd=root, files=sizes[i][0], nbytes=sizes[i][1],
                        sync=True)
        return m["seconds"] if m and m["ok"] else None

    runs = info.setdefault("runs", {})
    for rep in range(ctx.repeat):
        r = {}
        plain.create()
        try:
            for i, s in enumerate(srcs):
                r["cp_plain_%d" % (i + 1)] = step(
                    plain, "import.%s%d" % (tag, i + 1), rep,
                    "cp -r %s %s" % (shlex.quote(s), shlex.quote(os.path.join(plain.path, crawls[i]))), i)
        finally:
            plain.destroy()
        web.create()
        try:
            for i, s in enumerate(srcs):
                r["import_%d" % (i + 1)] = step(
                    web, "import.%s%d" % (tag, i + 1), rep,
                    "%s import %s %s" % (cmd, shlex.quote(s), shlex.quote(web.path + "/")), i)
            r["import_rerun"] = step(web, "import.%srerun" % tag, rep, "%s import %s %s" % (
                cmd, shlex.quote(srcs[0]), shlex.quote(web.path + "/")), 0)
            web.umount()
            web.destroy()
            for d in web.backing():
                os.makedirs(d, exist_ok=True)
            web.mkfs()           # a fresh archive, not mounted
            disk = web.backing()[0]
            r["import_disk"] = step(web, "import.%sdisk" % tag, rep, "%s import %s %s" % (
                cmd, shlex.quote(srcs[0]), shlex.quote(disk + ":/")), 0)
        finally:
            web.destroy()
        runs.setdefault(tag or "main", []).append(r)
    keys = sorted({k for x in runs[tag or "main"] for k in x})
    med = {k: _median([x.get(k) for x in runs[tag or "main"]]) for k in keys}
    info.setdefault("median", {})[tag or "main"] = med
    info.setdefault("files", {})[tag or "main"] = [s[0] for s in sizes]
    if med.get("cp_plain_1") and med.get("import_1"):
        log("import (%s): webfs import vs cp -r to a plain directory %.2fx", tag or "main",
            med["cp_plain_1"] / med["import_1"])
    if med.get("import_1") and med.get("import_2"):
        log("import (%s): crawl 2 vs crawl 1 through import %.2fx faster", tag or "main",
            med["import_1"] / med["import_2"])


def import_section(ctx):
    if not any(t.name == "webfs" for t in ctx.targets):
        log("import: skipped (webfs is not among the targets)")
        return
    info = {}
    ctx.extra["import"] = info
    try:
        import_runs(ctx, ctx.corpus, ctx.ingest_crawls, "", info)
    except BenchError as e:
        _fail(ctx, "import", "webfs", e)
    try:
        import_runs(ctx, small_corpus(ctx), ["crawl-001", "crawl-002"], "small.", info)
    except BenchError as e:
        _fail(ctx, "import", "webfs", e)


# ---------------------------------------------------------------- scale

def slices(top, n):
    """The host directories of top (sorted) in n slices of about the same
    number of files: [([host, ...], files, bytes)]."""
    hosts = []
    for h in sorted(os.listdir(top)):
        f, b = tree_size(os.path.join(top, h))
        hosts.append((h, f, b))
    total = sum(f for _, f, _ in hosts)
    out = []
    cur, cf, cb, done = [], 0, 0, 0
    for h, f, b in hosts:
        cur.append(h)
        cf += f
        cb += b
        if done + cf >= total * (len(out) + 1) / n and len(out) < n - 1:
            out.append((cur, cf, cb))
            done += cf
            cur, cf, cb = [], 0, 0
    if cur:
        out.append((cur, cf, cb))
    return out


def catalog_size(ctx, t, files):
    """A catalog in PostgreSQL (the webfs-pg target): its tables' bytes per
    file after a cp -r, beside the scale section's meta/ per file (issue 25)."""
    if hasattr(t, "catalog_bytes"):
        size = t.catalog_bytes()
        ctx.extra["pg_catalog"] = {"files": files, "bytes": size, "per_file": size / files}
        log("%s: the catalog's tables in PostgreSQL after cp -r of %d files: %.0f B a file",
            t.name, files, size / files)


def meta_bytes(t):
    """Apparent bytes under meta/ on every disk of t (catalog, JOURNAL,
    MANIFEST, spill), as tests/t4_meta_budget counts them: not the query
    index kept there by default (derived data; the query section measures it)."""
    total = 0
    for d in t.backing():
        for dirpath, _, files in os.walk(os.path.join(d, "meta")):
            for f in files:
                if not f.startswith(INDEX_FILE):
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


class MetaSampler:
    """meta_bytes(t) every `every` seconds in a thread, while a slice is
    copied: the peak between checkpoints, not only at the slices' ends."""

    def __init__(self, t, every=0.5):
        self.t, self.every, self.peak = t, every, None     # None: no sample taken
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                self.peak = max(self.peak or 0, meta_bytes(self.t))
            except OSError:
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def slice_figures(before, after, files):
    """CPU per file and RSS of the daemon alone and of the processes it started
    (webfs's indexing process, whose passes come every 30 s while a copy goes
    on: a slice has one or none), from daemon_stats before and after a slice."""
    own0, own = before.get("alone") or {}, after.get("alone") or {}
    if None in (before.get("cpu"), after.get("cpu"), own0.get("cpu"), own.get("cpu")):
        return {"daemon_cpu_per_file": None, "indexer_cpu_per_file": None, "rss": own.get("rss"),
                "hwm": own.get("hwm"), "indexer_rss": None}
    own_cpu = own["cpu"] - own0["cpu"]
    return {"daemon_cpu_per_file": own_cpu / files,
            "indexer_cpu_per_file": (after["cpu"] - before["cpu"] - own_cpu) / files,
            "rss": own["rss"], "hwm": own["hwm"], "indexer_rss": after["rss"] - own["rss"]}


def scale(ctx):
    if not any(t.name == "webfs" for t in ctx.targets):
        log("scale: skipped (webfs is not among the targets)")
        return
    o = ctx.opts
    want = o.scale_files
    info = {"files_wanted": want, "tool": "cp -r", "slices": []}
    ctx.extra["scale"] = info
    ctx.figure("scale", "scale", "ingest rate, daemon RSS and meta/ against files ingested",
               "custom")
    corpus = os.path.join(ctx.workdir, "scale-corpus")
    t = None
    try:
        # --small-pages: 0.1 images a page, so files ~ 1.1 x pages
        t0 = time.perf_counter()
        run([sys.executable, os.path.join(HERE, "make-corpus"), "--seed", str(o.seed + 2),
             "--small-pages", "--pages", str(max(1, int(want / 1.1))), "--crawls", "1", corpus],
            timeout=o.timeout)
        info["corpus_seconds"] = time.perf_counter() - t0
        src = os.path.join(corpus, "crawl-001")
        parts = slices(src, 10)
        # The same slices into a plain directory first: the rate a slice
        # allows (file sizes differ between slices) and what the kernel's
        # writeback does to any filesystem as the data grows. Each slice
        # starts after `sync`, for both, so one slice's writeback is not
        # charged to the next (the freshly made corpus was the first case).
        plain = os.path.join(ctx.workdir, "scale-plain")
        os.makedirs(plain)
        plain_rates = []
        for hosts, files, _ in parts:
            os.sync()
            cmd = "cp -r %s %s/" % (" ".join(shlex.quote(h) for h in hosts), shlex.quote(plain))
            dt, _, rc, err, _ = timed(cmd, cwd=src, timeout=o.timeout)
            if rc != 0:
                raise BenchError("cp -r into a plain directory: %s" % err.strip()[-300:])
            plain_rates.append(files / dt if dt else None)
        rmtree(plain)
        t = Webfs("webfs-scale", os.path.join(ctx.workdir, "targets", "webfs-scale"), o)
        t.create()
        dst = os.path.join(t.path, "crawl-001")
        os.makedirs(dst)
        info["rss_empty"] = ((t.daemon_stats() or {}).get("alone") or {}).get("rss")
        done = nbytes_done = 0
        peak_meta = 0
        for i, (hosts, files, nbytes) in enumerate(parts):
            warm_cmd = "tar -cf - %s | cat > /dev/null" % " ".join(shlex.quote(h) for h in hosts)
            sh(warm_cmd, cwd=src, check=False)
            os.sync()
            cmd = "cp -r %s %s/" % (" ".join(shlex.quote(h) for h in hosts), shlex.quote(dst))
            before = t.daemon_stats() or {}
            with MetaSampler(t) as sampler:
                dt, _, rc, err, _ = timed(cmd, cwd=src, timeout=o.timeout)
            if rc != 0:
                raise BenchError("cp -r slice %d: %s" % (i + 1, err.strip()[-300:]))
            done += files
            nbytes_done += nbytes
            mb = meta_bytes(t)
            peak_meta = max(peak_meta, mb, sampler.peak or 0)
            s = {"slice": i + 1, "files": files, "bytes": nbytes, "seconds": dt,
                 "rate": files / dt if dt else None, "plain_rate": plain_rates[i],
                 "files_done": done, "meta_bytes": mb,
                 "meta_per_file": mb / done, "meta_peak_during": sampler.peak}
            s.update(slice_figures(before, t.daemon_stats() or {}, files))
            info["slices"].append(s)
            log("scale: %d files (%d%%): %.0f files/s, daemon RSS %.1f MiB (indexing process "
                "%.1f MiB), meta/ %.0f B a file", done, round(100 * (i + 1) / len(parts)),
                s["rate"] or 0, (s["rss"] or 0) / 2**20, (s["indexer_rss"] or 0) / 2**20,
                s["meta_per_file"])
        info["files"], info["bytes"] = done, nbytes_done
        t.sync()
        info["meta_synced"] = meta_bytes(t)
        peak_meta = max(peak_meta, info["meta_synced"])
        t.umount()
        info["meta_at_rest"] = meta_bytes(t)
        info["meta_per_file_at_rest"] = info["meta_at_rest"] / done
        info["meta_per_file_peak"] = peak_meta / done if done else None
        info["meta_peak"] = peak_meta
        sl = info["slices"]
        # the first slice at or past each share of the files
        at = lambda frac: next(x for x in sl if x["files_done"] >= frac * done - 1e-9)
        info["at"] = {str(p): at(p / 100) for p in (10, 50, 100)}
        info["rate_end_vs_start"] = (sl[-1]["rate"] / sl[0]["rate"]) if sl[0]["rate"] else None
        first, last = sl[0], sl[-1]
        if first["daemon_cpu_per_file"] and last["daemon_cpu_per_file"]:
            info["cpu_per_file_end_vs_start"] = (last["daemon_cpu_per_file"]
                                                / first["daemon_cpu_per_file"])
        if info["at"]["10"].get("rss") and info["at"]["100"].get("rss"):
            info["rss_100_vs_10"] = info["at"]["100"]["rss"] / info["at"]["10"]["rss"]
        log("scale: rate at the end / at the start %.2f; RSS at 100%% / at 10%% %s; meta/ per "
            "file at rest %.0f B, peak %.0f B", info["rate_end_vs_start"] or 0,
            "%.2f" % info["rss_100_vs_10"] if info.get("rss_100_vs_10") else "?",
            info["meta_per_file_at_rest"], info["meta_per_file_peak"] or 0)
        ctx.measurements.append({"target": "webfs", "figure": "scale", "rep": 0, "ok": True,
                                 "value": info["rate_end_vs_start"], "result": dict(info)})
    except (BenchError, ValueError, OSError) as e:
        info["error"] = str(e)[-1000:]
        _fail(ctx, "scale", "webfs-scale", e)
    finally:
        if t is not None:
            t.destroy()
            rmtree(t.root)
        rmtree(corpus)


SECTIONS = {
    "small": (small, "a small-page corpus (median ~6 KB): cp -r, cold cat and grep -r"),
    "underload": (underload, "the small section's cp -r and cold cat with two CPU hogs beside"),
    "import": (import_section, "webfs import vs cp -r to a plain directory; crawl 2 vs crawl 1"),
    "scale": (scale, "a 20,000-file ingest (100,000 with --full): rate, RSS, meta/ at 10/50/100 %"),
}
