"""The web archive section of tools/bench (issue 12):

warc      a WARC of at least --warc-captures response records (10,000 by
          default), one per file of a make-corpus crawl (--small-pages, seeded
          like the rest), written per-record gzipped by warcio's WARCWriter.
          Figure warc.import: `webfs import-warc` into a fresh mount against
          `cdxj-indexer` reading the same file (the cheapest peer that parses
          every record), records/s (aim >= 0.5x). Figure warc.export:
          `webfs export-warc --order disk` of the imported collection against
          `tar -cf - COLLECTION | wc -c` through the mount, both cold, pages/s
          (aim >= 1.0x). Medians of --repeat runs, the commands interleaved.
          Nothing is removed before the last run (each run imports into
          an archive of its own), and the runs start when the bench's last
          removal is a minute old: see bench_lib.settle_deletions.
          Figure warc.replay: `webfs replay` of the imported collection,
          seconds from the command's start to its "now run" line (the
          server listening): the first start after the import (its CDXJ
          lines made by import-warc) against 1 s; a second start beside.
          Figure warc.latency: ms of a capture (every 50th, id_) through
          `webfs replay` + wayback (pywb reading the mount's .webfs/warc
          files) against plain pywb (`wb-manager add` of the same WARC +
          wayback), the requests interleaved (which server goes first
          alternates), each server's first answer (pywb loading its
          modules) left out, medians (aim <= 1.2x); the load average at the
          end of the requests is kept beside it. Each capture is asked once:
          plain pywb reads its WARC from the page cache (wb-manager add just
          copied it), webfs assembles the record from its blocks as the
          daemon holds them after the export (in its piece cache, or read
          again).
"""

import io
import os
import shlex
import socket
import subprocess
import sys
import time

from bench_lib import BenchError, log, rmtree, run, settle_deletions, timed
from bench_targets import Webfs
from bench_webfs import median, section_fail

HERE = os.path.dirname(os.path.abspath(__file__))


def write_warc(crawl, out):
    """Every file of a crawl directory as a response record (URL http://PATH);
    returns how many records were written and every 50th URL."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter
    n, urls = 0, []
    with open(out, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for d, dirs, files in os.walk(crawl):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(d, name)
                with open(path, "rb") as fh:
                    body = fh.read()
                ctype = "text/html" if name.endswith((".html", ".htm")) else "application/octet-stream"
                http = StatusAndHeaders("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))],
                                        protocol="HTTP/1.1")
                url = "http://" + os.path.relpath(path, crawl)
                if n % 50 == 0:
                    urls.append(url)
                rec = w.create_warc_record(url, "response",
                                           payload=io.BytesIO(body), http_headers=http,
                                           warc_headers_dict={"WARC-Date": "2024-01-01T12:00:00Z"})
                w.write_record(rec)
                n += 1
    return n, urls


def replay_start(webfs_cmd, collection, pywb_dir, timeout):
    """Seconds from `webfs replay` starting to its server listening (its "now run" line)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.Popen(shlex.split(webfs_cmd) + ["replay", "--port", str(port), collection, pywb_dir],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = t0 + timeout
        for line in proc.stdout:
            if line.startswith(b"now run"):
                return time.perf_counter() - t0
            if time.perf_counter() > deadline:
                break
        raise BenchError("webfs replay did not start")
    finally:
        proc.terminate()
        proc.wait()


def _get_ms(port, path, deadline):
    """Milliseconds of one GET on 127.0.0.1 (body read), waiting up to the deadline
    for the server to answer at all."""
    import http.client
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            t0 = time.perf_counter()
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise BenchError("GET %s: %d" % (path[:80], r.status))
            return (time.perf_counter() - t0) * 1000
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError("no answer on port %d" % port) from None
            time.sleep(0.2)
        finally:
            conn.close()


def replay_latency(webfs_cmd, collection, src, work, urls, timeout):
    """Median ms of a capture (id_ replay) through webfs replay + wayback and through
    plain pywb (wb-manager add of the same WARC + wayback), the requests interleaved."""
    procs = []

    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    try:
        pw, ref = os.path.join(work, "pywb-latency"), os.path.join(work, "pywb-plain")
        rep = subprocess.Popen(shlex.split(webfs_cmd) + ["replay", "--port", str(port()), collection, pw],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(rep)
        for line in rep.stdout:
            if line.startswith(b"now run"):
                break
        os.makedirs(ref)
        for argv in (["wb-manager", "init", "c"], ["wb-manager", "add", "c", src]):
            subprocess.run(argv, cwd=ref, check=True, capture_output=True, timeout=timeout)
        ports = {}
        for name, where in (("webfs", pw), ("pywb", ref)):
            ports[name] = port()
            procs.append(subprocess.Popen(["wayback", "-b", "127.0.0.1", "-p", str(ports[name])], cwd=where,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        coll = {"webfs": os.path.basename(collection.rstrip("/")), "pywb": "c"}
        times = {"webfs": [], "pywb": []}
        deadline = time.monotonic() + timeout
        for name in ports:          # each server's first answer loads pywb's own modules: not a capture's time
            _get_ms(ports[name], "/%s/20240101120000id_/%s" % (coll[name], urls[-1]), deadline)
        for i, url in enumerate(urls):
            for name in (("webfs", "pywb") if i % 2 == 0 else ("pywb", "webfs")):
                times[name].append(_get_ms(ports[name], "/%s/20240101120000id_/%s" % (coll[name], url), deadline))
        return median(times["webfs"]), median(times["pywb"]), os.getloadavg()[0]
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def warc_section(ctx):
    if not any(t.name == "webfs" for t in ctx.targets):
        log("warc: skipped (webfs is not among the targets)")
        return
    o = ctx.opts
    info = {"captures_wanted": o.warc_captures}
    ctx.extra["warc"] = info
    work = os.path.join(ctx.workdir, "warc")
    corpus = os.path.join(work, "corpus")
    src = os.path.join(work, "bench.warc.gz")
    webs = []
    try:
        os.makedirs(work, exist_ok=True)
        run([sys.executable, os.path.join(HERE, "make-corpus"), "--seed", str(o.seed + 3), "--small-pages",
             "--pages", str(o.warc_captures), "--crawls", "1", corpus],
            timeout=o.timeout)
        t0 = time.perf_counter()
        records, urls = write_warc(os.path.join(corpus, "crawl-001"), src)
        if records < o.warc_captures:
            raise BenchError("the WARC has %d records, fewer than %d" % (records, o.warc_captures))
        info.update(records=records, bytes=os.path.getsize(src), write_seconds=time.perf_counter() - t0)
        log("warc: %d records, %.1f MB (per-record gzip, warcio)", records, info["bytes"] / 1e6)
        waited = settle_deletions()
        if waited:
            log("warc: waited %.0f s for the bench's last removal to age (see bench_lib)", waited)
        cmd = shlex.quote(o.webfs_cmd)
        runs = info["runs"] = []
        for rep in range(ctx.repeat):
            r = {}
            dt, out, rc, err, _ = timed("cdxj-indexer %s | wc -l" % shlex.quote(src), timeout=o.timeout)
            if rc != 0 or int(out.split()[0]) != records:
                raise BenchError("cdxj-indexer: %s %s" % (out.strip(), err.strip()[-300:]))
            r["cdxj"] = dt
            web = Webfs("webfs-warc", os.path.join(work, "target-%d" % rep), o)
            webs.append(web)
            web.create()
            os.sync()
            dt, out, rc, err, _ = timed("%s import-warc --collection c %s %s" % (
                cmd, shlex.quote(src), shlex.quote(web.path + "/")), timeout=o.timeout)
            if rc != 0:
                raise BenchError("import-warc: %s" % (out + err).strip()[-500:])
            web.sync()
            r["import"] = dt
            coll = shlex.quote(os.path.join(web.path, "c"))
            for key, line in (("tar", "tar -cf - -C %s . | wc -c" % coll),
                              ("export", "%s export-warc --force --order disk %s %s" % (
                                  cmd, coll, shlex.quote(os.path.join(work, "out.warc.gz"))))):
                web.remount_cold()
                dt, out, rc, err, _ = timed(line, timeout=o.timeout)
                if rc != 0:
                    raise BenchError("%s: %s" % (line, (out + err).strip()[-500:]))
                r[key] = dt
                if key == "export" and "(100%) byte-identical" not in out:
                    raise BenchError("export-warc: not every record byte-identical: %s" % out.strip())
            pywb_dir = os.path.join(work, "pywb-%d" % rep)
            r["replay_first"] = replay_start(o.webfs_cmd, os.path.join(web.path, "c"), pywb_dir, o.timeout)
            r["replay"] = replay_start(o.webfs_cmd, os.path.join(web.path, "c"), pywb_dir, o.timeout)
            r["replay_ms"], r["pywb_ms"], r["latency_load"] = replay_latency(o.webfs_cmd, os.path.join(web.path, "c"), src,
                                                          os.path.join(work, "latency-%d" % rep), urls, o.timeout)
            web.umount()            # removed with the others at the end
            runs.append(r)
            log("warc: cdxj-indexer %.2f s, import-warc %.2f s (%.2fx); tar %.2f s, export-warc %.2f s "
                "(%.2fx); replay starts in %.2f s (%.2f s the first time); a capture in %.1f ms, "
                "plain pywb %.1f ms (%.2fx, load %.1f)", r["cdxj"], r["import"], r["cdxj"] / r["import"], r["tar"],
                r["export"], r["tar"] / r["export"], r["replay"], r["replay_first"], r["replay_ms"],
                r["pywb_ms"], r["replay_ms"] / r["pywb_ms"], r["latency_load"])
        med = info["median"] = {k: median([x.get(k) for x in runs])
                                for k in ("cdxj", "import", "tar", "export", "replay", "replay_first",
                                                          "replay_ms", "pywb_ms")}
        info["import_vs_cdxj"] = med["cdxj"] / med["import"]
        info["export_vs_tar"] = med["tar"] / med["export"]
        info["replay_vs_pywb"] = med["replay_ms"] / med["pywb_ms"]
    except (BenchError, OSError, ValueError) as e:
        info["error"] = str(e)[-1000:]
        section_fail(ctx, "warc", "webfs", e)
    finally:
        for web in webs:
            web.destroy()
        rmtree(work)


SECTIONS = {
    "warc": (warc_section, "a WARC of 10,000 captures: import-warc vs cdxj-indexer, export-warc vs tar, "
                           "replay start-up, replay latency vs plain pywb"),
}
