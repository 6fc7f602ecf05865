"""The query section of tools/bench (issue 26): query access and streams.

query     a make-corpus --small-pages crawl of --warc-captures pages (10,000
          by default), `webfs import`ed into a fresh unmounted archive twice,
          with WEBFS_INDEX=0 and with indexing (figure: the ratio of their
          times, aim >= 0.7x; beside it, with the wait of a search right
          after it for the index to be complete, no aim); the index's size against the stored
          (compressed) bytes of the HTML and text it covers (aim <= 0.5x);
          then mounted, cold each time: `webfs search --count` of the rare
          word against `grep -rl` of it over the mount (aim >= 100x; see
          _searches for what is cold and what warm), and a
          subset stream (`webfs stream --tar --host H`) against reading the
          same pages with cat in a random order, pages/s (WebBase's ratio was
          75-180x on its disks). Medians of --repeat runs.
"""

import os
import random
import shlex
import sqlite3
import sys

from bench_lib import BenchError, drop_caches, failure_lines, log, rmtree, run, timed
from bench_targets import Webfs
from bench_webfs import median, section_fail

HERE = os.path.dirname(os.path.abspath(__file__))


def covered_bytes(disk):
    """(index bytes, stored bytes of the blocks of the HTML and text documents it indexes)."""
    meta = os.path.join(disk, "meta")
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(meta, "catalog.db"), uri=True)
    try:
        db.execute("ATTACH ? AS ix", ("file:%s?mode=ro" % os.path.join(meta, "index.db"),))
        stored = db.execute("SELECT coalesce(sum(b.stored), 0) FROM blocks b JOIN ix.docs d ON d.sig = lower(hex(b.sig)) "
                            "WHERE d.kind IN ('html', 'text')").fetchone()[0]
    finally:
        db.close()
    size = sum(os.path.getsize(os.path.join(meta, n)) for n in os.listdir(meta) if n.startswith("index.db"))
    return size, stored


def one_run(o, work, crawl, rep):
    """The figures of one run, on a target of its own."""
    from bench_sections import RARE_WORD         # here: bench_sections imports this module
    cmd, r = shlex.quote(o.webfs_cmd), {}
    web = Webfs("webfs-query", os.path.join(work, "target-%d" % rep), o)
    try:
        for index in ("0", "1"):
            web.destroy()
            for d in web.backing():
                os.makedirs(d, exist_ok=True)
            web.mkfs()
            dt, out, rc, err, _ = timed("WEBFS_INDEX=%s %s import %s %s:/" % (
                index, cmd, shlex.quote(crawl), shlex.quote(web.backing()[0])), timeout=o.timeout)
            if rc != 0:
                raise BenchError("import: %s" % (out + err)[-500:])
            r["import_index" if index == "1" else "import_plain"] = dt
        # An import that leaves many files to index does not wait for them (webfs(1)):
        # a search waits for that pass, and the index is measured once it is done.
        wait, _, rc, err, _ = timed("%s search --count %s %s" % (cmd, RARE_WORD, shlex.quote(web.backing()[0])),
                                    timeout=o.timeout)
        if rc != 0:
            raise BenchError("search after the import: %s" % err[-500:])
        r["index_done"] = r["import_index"] + wait
        r["index_bytes"], r["covered_bytes"] = covered_bytes(web.backing()[0])
        web.mount()
        mnt = shlex.quote(web.path)
        r.update(_searches(web, cmd, RARE_WORD, o))
        # The host with the most pages: a subset big enough that start-up does not decide the rate.
        host = max(sorted(os.listdir(crawl)), key=lambda h: len(_files(os.path.join(crawl, h))))
        pages = [os.path.join(web.path, "crawl-001", host, p) for p in _files(os.path.join(crawl, host))]
        random.Random(o.seed + rep).shuffle(pages)
        listing = os.path.join(work, "pages-%d" % rep)
        with open(listing, "w") as f:
            f.write("".join(p + "\n" for p in pages))
        web.remount_cold()
        dt, out, rc, err, _ = timed("%s stream --tar --host %s %s 2>/dev/null | tar -tf - | wc -l" % (
            cmd, shlex.quote(host), mnt), timeout=o.timeout)
        r["stream_pages_s"] = int(out.split()[0]) / dt if rc == 0 else None
        web.remount_cold()
        dt, out, rc, err, _ = timed("tr '\\n' '\\0' < %s | xargs -0 cat | wc -c" % shlex.quote(listing),
                                    timeout=o.timeout)
        r["random_pages_s"] = len(pages) / dt if rc == 0 else None
        r["subset_pages"] = len(pages)
        return r
    finally:
        web.destroy()


# Each search figure is the median of this many runs, each on a mount made anew.
SEARCH_RUNS = 5


def _searches(web, cmd, word, o):
    """The search figures, each the median of SEARCH_RUNS, against grep -rl,
    all with every cache of the kernel dropped just before (the index, the
    catalog, the pages, as grep's pages are): "search_first", `webfs search
    --count` as the mount's first command (with the catch-up pass of the
    index every mount starts with); "search", the same once that pass is
    done (the aim's figure); "search_dir", listing .webfs/search/WORD/.
    Warm is only the client's own process: before each `webfs search`,
    one of '/', which click's path refuses (not an archive) without asking
    a daemon, loads Python, click and webfs's modules."""
    search = "%s search --count %s %s" % (cmd, word, shlex.quote(web.path))
    warm_client = "%s search --count warm-up / 2>/dev/null" % cmd
    runs, figures = {"search_first": [], "search": [], "search_dir": []}, {}
    for _ in range(SEARCH_RUNS):
        web.remount_cold()
        timed(warm_client, timeout=o.timeout)
        runs["search_first"].append(_count(search, web, o))
        drop_caches()
        timed(warm_client, timeout=o.timeout)
        runs["search"].append(_count(search, web, o))
        drop_caches()
        runs["search_dir"].append(_count("ls .webfs/search/%s | wc -l" % word, web, o))
    web.remount_cold()
    timed(search, timeout=o.timeout)                # the mount's catch-up pass done, as for the search
    drop_caches()
    runs["grep"] = [_count("{ grep -rl %s . || test $? = 1; } | wc -l" % word, web, o)]
    for key, got in runs.items():
        figures[key], figures[key + "_found"] = median([t for t, _ in got]), got[-1][1]
    return figures


def _count(line, web, o):
    """(seconds, the number it printed) of a shell line run in the mount."""
    dt, out, rc, err, _ = timed(line, cwd=web.path, timeout=o.timeout)
    return dt, int(out.split()[0]) if rc == 0 and out.split() else None


def _files(top):
    return sorted(os.path.relpath(os.path.join(d, n), top) for d, _, names in os.walk(top) for n in names)


def query_section(ctx):
    if not any(t.name == "webfs" for t in ctx.targets):
        log("query: skipped (webfs is not among the targets)")
        return
    o = ctx.opts
    info = ctx.extra["query"] = {"pages": o.warc_captures, "runs": []}
    work = os.path.join(ctx.workdir, "query")
    try:
        os.makedirs(work, exist_ok=True)
        corpus = os.path.join(work, "corpus")
        run([sys.executable, os.path.join(HERE, "make-corpus"), "--seed", str(o.seed + 5), "--small-pages",
             "--pages", str(o.warc_captures), "--crawls", "1", corpus], timeout=o.timeout)
        crawl = os.path.join(corpus, "crawl-001")
        for rep in range(ctx.repeat):
            r = one_run(o, work, crawl, rep)
            info["runs"].append(r)
            log("query: import %.2f s indexing (index done %.2f s) vs %.2f s not (%.2fx); index %.1f MB vs %.1f MB covered (%.2fx); "
                "search %.3f s (listing %.3f s) vs grep -rl %.2f s (%.0fx); stream %.0f pages/s vs random %.0f",
                r["import_index"], r["index_done"], r["import_plain"], r["import_plain"] / r["import_index"],
                r["index_bytes"] / 1e6,
                r["covered_bytes"] / 1e6, r["index_bytes"] / max(1, r["covered_bytes"]), r["search"],
                r["search_dir"], r["grep"], r["grep"] / r["search"], r["stream_pages_s"] or 0,
                r["random_pages_s"] or 0)
        keys = ("import_index", "index_done", "import_plain", "index_bytes", "covered_bytes", "search", "search_first",
                "search_dir", "grep",
                "stream_pages_s", "random_pages_s")
        info["median"] = {k: median([x.get(k) for x in info["runs"]]) for k in keys}
    except (BenchError, OSError, ValueError, sqlite3.Error) as e:
        info["error"] = str(e)[-1000:]
        section_fail(ctx, "query", "webfs", e)
    finally:
        rmtree(work)


def render_query(result):
    q = (result.get("extra") or {}).get("query") or {}
    m = q.get("median")
    if not m:
        return failure_lines(q)
    ratio = lambda a, b: (a / b) if a and b else float("nan")       # noqa: E731
    return ["A make-corpus --small-pages crawl of %s pages; medians of %d runs (a search figure: of %d "
            "each, on a mount made anew, the kernel's caches dropped just before, the client's "
            "interpreter warmed):" % ("{:,}".format(q["pages"]), len(q["runs"]), SEARCH_RUNS), "",
            "| figure | webfs | against | ratio | aim |", "|--|--:|--:|--:|--:|",
            "| webfs search (s) vs grep -rl, cold | %.3f | %.2f | %.0f× | ≥ 100× |" % (
                m["search"], m["grep"], ratio(m["grep"], m["search"])),
            "| … as the mount's first command (its catch-up pass of the index with it) | %.3f | %.2f | %.0f× | |" % (
                m.get("search_first") or 0, m["grep"], ratio(m["grep"], m.get("search_first"))),
            "| listing .webfs/search/WORD/ (s) vs grep -rl, cold | %.3f | %.2f | %.0f× | |" % (
                m.get("search_dir") or 0, m["grep"], ratio(m["grep"], m.get("search_dir"))),
            "| index vs compressed text covered (MB) | %.1f | %.1f | %.2f× | ≤ 0.5× |" % (
                m["index_bytes"] / 1e6, m["covered_bytes"] / 1e6, ratio(m["index_bytes"], m["covered_bytes"])),
            "| webfs import indexing vs not (s) | %.2f | %.2f | %.2f× | ≥ 0.7× |" % (
                m["import_index"], m["import_plain"], ratio(m["import_plain"], m["import_index"])),
            "| … until its index is complete (a search right after it waits for the last pass) | %.2f | %.2f "
            "| %.2f× | |" % (m.get("index_done") or 0, m["import_plain"], ratio(m["import_plain"], m.get("index_done"))),
            "| subset stream vs random cat (pages/s, %d pages), cold | %.0f | %.0f | %.1f× | (WebBase 75–180×) |" % (
                q["runs"][-1].get("subset_pages", 0), m["stream_pages_s"] or 0, m["random_pages_s"] or 0,
                ratio(m["stream_pages_s"], m["random_pages_s"])), ""]


SECTIONS = {
    "query": (query_section, "webfs search vs grep -rl, index size, import with indexing, subset stream "
                             "vs random reads"),
}
