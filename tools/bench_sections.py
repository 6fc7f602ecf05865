"""The sections of tools/bench.  A section is a function section(ctx) that
declares its figures with ctx.figure(...) and records measurements with
ctx.measure(...) / ctx.record(...).  Register it in SECTIONS (order matters:
ingest first, so that space sees the ingested archives).

To add a section (rebuild with a dead disk, cooling, ...):

    def rebuild(ctx):
        ctx.figure("rebuild", "rebuild.disk", "rebuild one disk", "time")
        for rep in range(ctx.repeat):
            for t in ctx.order(rep):
                ...ctx.measure(t, "webfs rebuild ...", files=..., nbytes=...)
    SECTIONS["rebuild"] = (rebuild, "rebuild throughput with a dead disk")

Interleave targets (ctx.order(rep) rotates them) and repeat ctx.repeat
times; the report shows medians.
"""

import os
import shlex
import sys

from bench_lib import BenchError

RARE_WORD = "zyzzogeton"


# --------------------------------------------------------------- ingest

def ingest(ctx):
    crawls = ctx.ingest_crawls
    tools = [("cp", "cp -r {src} {dst}"), ("rsync", "rsync -a {src}/ {dst}/")]
    for tool, _ in tools:
        for i, c in enumerate(crawls):
            what = "into an empty target" if i == 0 else "beside " + ", ".join(crawls[:i])
            ctx.figure("ingest", "ingest.%s.%d" % (tool, i + 1),
                       "%s %s (%s)" % ("cp -r" if tool == "cp" else "rsync -a", c, what), "time")
    last = ctx.repeat - 1
    for rep in range(ctx.repeat):
        for t in ctx.order(rep):
            for tool, template in tools:
                try:
                    t.create()
                except BenchError as e:
                    ctx.fail(t, "ingest", e)
                    continue
                for i, c in enumerate(crawls):
                    src = os.path.join(ctx.corpus, c)
                    dst = os.path.join(t.path, c)
                    ctx.warm_source(c)
                    files, nbytes = ctx.size_of([c])
                    ctx.measure(t, "ingest.%s.%d" % (tool, i + 1), rep,
                                template.format(src=shlex.quote(src), dst=shlex.quote(dst)),
                                cwd=t.path, files=files, nbytes=nbytes, sync=True)
                if rep == 0 or rep == last:
                    ctx.check_tree(t, crawls, "after %s" % tool)
                if rep == last and tool == "rsync":
                    ctx.snapshot_space(t, crawls)
                if rep == last and tool == "rsync" and t.name in ctx.keep_ingest:
                    ctx.state[t.name] = ("ingest", list(crawls))
                else:
                    t.destroy()                  # free the space before the next one
                    ctx.state[t.name] = None


# ---------------------------------------------------------------- space

def space(ctx):
    ctx.figure("space", "space.alloc", "bytes on the backing disks (du)", "bytes",
               better="lower")
    ctx.figure("space", "space.apparent", "apparent size on the disks (du --apparent-size)",
               "bytes", better="lower")
    if not ctx.space:
        ctx.ensure_read_state()
        for t in ctx.targets:
            ctx.snapshot_space(t, ctx.state_crawls(t))
    ref = ctx.reference()
    ideal = ref["distinct_compressed_bytes"]
    ctx.figure("space", "space.ideal", "du bytes / (distinct documents, each %s or "
               "stored; no parity, no headers)" % ref["compressed_with"], "ratio", better="lower")
    for name, s in ctx.space.items():
        t = ctx.target(name)
        for key in ("alloc", "apparent"):
            ctx.record(t, "space.%s" % key, 0, value=s[key], corpus=s["corpus_" + key],
                       crawls=s["crawls"])
        if ideal and s["crawls"] == ref["crawls"]:
            ctx.record(t, "space.ideal", 0, value=s["alloc"] / ideal)
        if s.get("breakdown"):
            # block files, parity files, meta (the report's webfs table and the aim)
            ctx.measurements.append({"target": name, "figure": "space.breakdown", "rep": 0,
                                     "ok": True, "breakdown": s["breakdown"], "crawls": s["crawls"]})


# ----------------------------------------------------------------- read

def read(ctx):
    ctx.ensure_read_state()
    files, nbytes = ctx.size_of(ctx.crawls)
    rare = ctx.rare_count()
    tests = [
        ("cat", "find . -type f -exec cat {} + | wc -c",
         lambda out: int(out.split()[0]) == nbytes, "%d bytes" % nbytes),
        ("tar", "tar -cf - . | wc -c",
         lambda out: int(out.split()[0]) >= nbytes, ">= %d bytes" % nbytes),
        ("grep", "{ grep -r %s . || test $? = 1; } | wc -l" % RARE_WORD,
         (lambda out: int(out.split()[0]) == rare) if rare is not None else None,
         "%s lines" % rare),
    ]
    labels = {"cat": "cat every file (find -exec cat)", "tar": "tar -cf - . | wc -c",
              "grep": "grep -r %s" % RARE_WORD}
    ctx.figure("read", "mount.cold", "mount time, cold (s)", "seconds", better="lower")
    cold_and_warm(ctx, "read", "read", tests, labels, files, nbytes)


def cold_and_warm(ctx, section, prefix, tests, labels, files, nbytes):
    """Each command run cold (after remount and dropped caches), then warm, on every
    target in turn: figures '<prefix>.<name>.cold' and '.warm'."""
    for name, _, _, _ in tests:
        for temp in ("cold", "warm"):
            ctx.figure(section, "%s.%s.%s" % (prefix, name, temp), "%s, %s" % (labels[name], temp),
                       "time")
    for name, cmd, check, expect in tests:
        for rep in range(ctx.repeat):
            for t in ctx.order(rep):
                if not ctx.cold(t, rep):
                    continue
                for temp in ("cold", "warm"):
                    ctx.measure(t, "%s.%s.%s" % (prefix, name, temp), rep, cmd, cwd=t.path,
                                files=files, nbytes=nbytes, check=check, expect=expect)


# ------------------------------------------------------------- metadata

def metadata(ctx):
    ctx.ensure_read_state()
    files, _ = ctx.size_of(ctx.crawls)
    tests = [
        ("find", "find . -type f | wc -l", lambda out: int(out.split()[0]) == files,
         "%d files" % files),
        ("ls", "ls -lR > /dev/null", None, None),
        ("du", "du -s .", None, None),
    ]
    labels = {"find": "find -type f | wc -l", "ls": "ls -lR > /dev/null", "du": "du -s"}
    cold_and_warm(ctx, "metadata", "meta", tests, labels, files, None)


# --------------------------------------------------------------- random

def random_reads(ctx):
    ctx.ensure_read_state()
    pages = ctx.page_list()
    list_path = os.path.join(ctx.workdir, "pages.list")
    with open(list_path, "w") as f:
        f.write("".join(p + "\n" for p in pages))
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_zipf.py")
    n = ctx.opts.zipf_reads
    for temp in ("cold", "warm"):
        ctx.figure("random", "zipf.%s" % temp,
                   "Zipf page reads (%d of %d pages), %s" % (n, len(pages), temp), "time",
                   unit="reads")
        for q in ("p50", "p90", "p99"):
            ctx.figure("random", "zipf.%s.%s" % (temp, q), "Zipf read latency %s, %s" % (q, temp),
                       "latency", better="lower")
    for rep in range(ctx.repeat):
        for t in ctx.order(rep):
            if not ctx.cold(t, rep):
                continue
            for temp in ("cold", "warm"):
                cmd = "%s %s %s %s --reads %d --seed %d" % (
                    shlex.quote(sys.executable), shlex.quote(tool), shlex.quote(t.path),
                    shlex.quote(list_path), n, ctx.opts.seed + rep)
                # the reader's own clock (without python start-up) is the figure
                m = ctx.measure(t, "zipf.%s" % temp, rep, cmd, cwd=t.path, files=n, nbytes=None,
                                parse_json=True, unit="reads")
                r = m.get("result") if m else None
                if not r:
                    continue
                for q in ("p50", "p90", "p99"):
                    ctx.record(t, "zipf.%s.%s" % (temp, q), rep, value=r[q + "_ms"])


# --------------------------------------------------------------- daemon

def daemon(ctx):
    """Daemon CPU and memory, from the figures the other sections took."""
    ctx.figure("daemon", "daemon.hwm", "daemon peak RSS, whole run (MiB)", "mem", better="lower")
    ctx.figure("daemon", "daemon.rss", "daemon RSS at the end (MiB)", "mem", better="lower")
    for key, label in (("ingest.cp.1", "ingest cp -r crawl 1"),
                       ("ingest.cp.2", "ingest cp -r crawl 2"),
                       ("read.cat.cold", "cat all, cold"), ("read.cat.warm", "cat all, warm"),
                       ("meta.ls.cold", "ls -lR, cold")):
        if key in ctx.figures:
            ctx.figure("daemon", "cpu." + key, "daemon CPU s: %s" % label, "cpu", better="lower")
    for t in ctx.targets:
        if not t.fuse:
            continue
        ms = [m for m in ctx.measurements if m["target"] == t.name]
        hwm = [m["daemon_hwm"] for m in ms if m.get("daemon_hwm")]
        st = t.daemon_stats()
        if st and st.get("hwm"):
            hwm.append(st["hwm"])
        if hwm:
            ctx.record(t, "daemon.hwm", 0, value=max(hwm))
        if st and st.get("rss"):
            ctx.record(t, "daemon.rss", 0, value=st["rss"])
        for m in ms:
            key = "cpu." + m["figure"]
            if key in ctx.figures and m.get("daemon_cpu") is not None:
                ctx.record(t, key, m["rep"], value=m["daemon_cpu"])


import bench_catscale  # noqa: E402
import bench_datapath  # noqa: E402
import bench_query  # noqa: E402
import bench_warc  # noqa: E402
import bench_webfs  # noqa: E402
import bench_s3  # noqa: E402
import bench_pg  # noqa: E402

SECTIONS = {
    "ingest": (ingest, "cp -r and rsync -a of crawl 1 into an empty target, then crawl 2"),
    "space": (space, "bytes on the backing directories vs the corpus"),
    "read": (read, "cat, tar, grep of everything, cold and warm"),
    "metadata": (metadata, "find, ls -lR, du, cold and warm"),
    "random": (random_reads, "Zipf mix of whole-page reads, latency percentiles"),
    "daemon": (daemon, "FUSE daemon CPU time and peak memory"),
    **bench_datapath.SECTIONS,
    **bench_webfs.SECTIONS,
    **bench_s3.SECTIONS,
    **bench_pg.SECTIONS,
    **bench_warc.SECTIONS,
    **bench_query.SECTIONS,
    **bench_catscale.SECTIONS,
}
