"""The sections of tools/bench that are about webfs alone (no peer does
parity, cooling or a catalog): rebuild, cooling and memory.  Each makes
archives of its own under the run's work directory, from the run's corpus,
mounted and unmounted through the Webfs target (so the run's clean-up
unmounts them whatever happens), and keeps everything it measured in
ctx.extra[section] (tables) and ctx.measurements (raw runs).

rebuild   C disks (--rebuild-disks, 6), once with G = C and once with each
          G < C of --rebuild-groups (6,3): ingest the ingested crawls with
          cp -r, unmount, delete one disk, `webfs rebuild --json` it into an
          empty directory (caches dropped first); repeated --repeat times,
          the configurations interleaved.  Figures: MB/s (webfs's clock and
          the command's wall time), bytes read from each survivor per byte
          rebuilt against (G-1)/(C-1) (Golubchik & Muntz), the bytes the
          kernel read for the command (a check on webfs's own counters),
          `webfs scrub --json` (MB read / s, caches dropped first) and
          `webfs fsck` after the last rebuild, parity overhead.
cooling   --disks disks, one crawl's pages; mounted with
          disk_delay=I:D on every disk (one I/O at a time per disk, D
          seconds each) and piece_cache=0; an open-arrival Zipf workload
          (bench_zipf.py --busy) through the mount, each read past the page
          cache, then `webfs cool`, then the same workload again.  Scenario
          "spread": popularity ranks shuffled (the skew hashing leaves);
          "hot": the pages of one disk take the top ranks (a hot collection).
memory    two archives, one of --mem-pages pages and one --mem-scale times
          as many (make-corpus --pages, one crawl): the daemon's RSS after
          mounting, its peak during cp -r, after a remount, and its peak
          during cat of every file and ls -lR.
"""

import json
import os
import random
import resource
import shlex
import shutil
import sys
import time

from bench_lib import BenchError, drop_caches, log, rmtree, run, sh, timed
from bench_targets import Webfs

HERE = os.path.dirname(os.path.abspath(__file__))
FUSE_READ = 128 * 1024      # pages up to this size are one FUSE read, so one block read


# ------------------------------------------------------------- helpers

def archive(ctx, name, disks=None, mkfs_opts=None, mount_opts=None):
    o = ctx.opts
    t = Webfs(name, os.path.join(ctx.workdir, "targets", name), o, disks=disks,
              mkfs_opts=mkfs_opts, mount_opts=mount_opts)
    why = t.available()
    if why:
        raise BenchError(why)
    return t


def join_opts(*parts):
    return ",".join(p for p in parts if p)


def subset(ctx, crawl, max_bytes):
    """Host directories of crawl (sorted), as many as fit in max_bytes
    (all when max_bytes is None): [(relative path, files, bytes)]."""
    top = os.path.join(ctx.corpus, crawl)
    out = []
    total = 0
    for host in sorted(os.listdir(top)):
        files = nbytes = 0
        for dirpath, _, filenames in os.walk(os.path.join(top, host)):
            for f in filenames:
                files += 1
                nbytes += os.lstat(os.path.join(dirpath, f)).st_size
        if max_bytes is not None and out and total + nbytes > max_bytes:
            break
        out.append((os.path.join(crawl, host), files, nbytes))
        total += nbytes
    return out


def copy_in(ctx, t, crawls, max_bytes=None):
    """cp -r the crawls (or the first max_bytes of each, by host) into the
    mounted archive t; returns (files, bytes, seconds)."""
    files = nbytes = 0
    seconds = 0.0
    for c in crawls:
        hosts = subset(ctx, c, max_bytes)
        os.makedirs(os.path.join(t.path, c), exist_ok=True)
        cmd = "cp -r %s %s" % (" ".join(shlex.quote(os.path.join(ctx.corpus, h)) for h, _, _ in hosts),
                               shlex.quote(os.path.join(t.path, c)) + "/")
        dt, out, rc, err, _ = timed(cmd, timeout=ctx.opts.timeout)
        if rc != 0:
            raise BenchError("%s: %s failed: %s" % (t.name, cmd[:200], err.strip()[-500:]))
        files += sum(f for _, f, _ in hosts)
        nbytes += sum(b for _, _, b in hosts)
        seconds += dt
    return files, nbytes, seconds


# Runs webfs.commands.rebuild_disk.measure in a Python that imports webfs, and adds what
# the kernel counted for the process during the call (/proc/self/io): rchar,
# the bytes its read calls returned (block and parity files, catalog, conf),
# and read_bytes, what it made the kernel fetch from the device.
REBUILD_RUN = r"""
import json, sys, time
from webfs.commands import rebuild_disk
def io():
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}
disk, index, to = sys.argv[1], int(sys.argv[2]), sys.argv[3]
a = io(); t0 = time.perf_counter()
fig = rebuild_disk.measure(disk, index, to)
t1 = time.perf_counter(); b = io()
print(json.dumps({"figures": fig, "call_seconds": t1 - t0, "rchar": b["rchar"] - a["rchar"],
                  "read_bytes": b["read_bytes"] - a["read_bytes"]}))
"""


def webfs_python(ctx):
    """A Python that can import webfs (this one, or the one running the webfs CLI)."""
    cands = [sys.executable]
    try:
        with open(shutil.which(ctx.opts.webfs_cmd) or ctx.opts.webfs_cmd) as f:
            first = f.readline()
        if first.startswith("#!"):
            cands.append(first[2:].strip().split()[0])
    except (OSError, TypeError):
        pass
    for py in cands:
        if run([py, "-c", "import webfs.commands.rebuild_disk"], check=False).returncode == 0:
            return py
    return None


def cli_json(ctx, argv, timeout=None):
    """Run `webfs ARGV --json`; (seconds, parsed JSON or None, process)."""
    t0 = time.perf_counter()
    p = run([ctx.opts.webfs_cmd] + [str(a) for a in argv] + ["--json"], check=False,
            timeout=timeout or ctx.opts.timeout)
    dt = time.perf_counter() - t0
    try:
        data = json.loads(p.stdout)
    except ValueError:
        data = None
    return dt, data, p


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def section_fail(ctx, section, name, exc):
    msg = str(exc)
    log("FAILED %s %s: %s", section, name, msg.splitlines()[0] if msg else "")
    ctx.failures.append({"target": name, "where": section, "error": msg[-3000:]})


def no_webfs(ctx, section):
    if any(t.name == "webfs" for t in ctx.targets):
        return False
    log("%s: skipped (webfs is not among the targets)", section)
    return True


# ------------------------------------------------------------- rebuild

def rebuild(ctx):
    if no_webfs(ctx, "rebuild"):
        return
    o = ctx.opts
    c = o.rebuild_disks
    groups = []
    for g in (int(x) for x in o.rebuild_groups.split(",") if x.strip()):
        g = min(g, c)
        if g >= 2 and g not in groups:
            groups.append(g)
    lost = c // 2                     # not disk 0, which holds the catalog
    max_bytes = parse_size(o.extra_size) if o.extra_size else None
    info = {"disks": c, "lost_disk": lost, "crawls": ctx.ingest_crawls, "configs": []}
    ctx.extra["rebuild"] = info
    ctx.figure("rebuild", "rebuild.mbps", "rebuild throughput (MB/s, webfs's clock)", "custom")
    configs = []
    for g in groups:
        name = "webfs-rebuild-G%d" % g
        mkfs = join_opts_sp(o.webfs_mkfs_opts, "--group-size %d" % g)
        try:
            t = archive(ctx, name, disks=c, mkfs_opts=mkfs)
            t.create()
            files, nbytes, secs = copy_in(ctx, t, ctx.ingest_crawls, max_bytes)
            t.umount()                 # writes the open stripes' parity
            st = t.status(t.backing()[0]) or {}
        except BenchError as e:
            section_fail(ctx, "rebuild", name, e)
            continue
        prot = st.get("protection") or {}
        cfg = {"group_size": g, "name": name, "files": files, "bytes": nbytes,
               "ingest_seconds": secs, "blocks": st.get("blocks"),
               "block_bytes": st.get("block_bytes"), "payload_bytes": st.get("payload_bytes"),
               "parity_bytes": prot.get("parity_bytes"), "parity_overhead": prot.get("parity_overhead"),
               "expected_overhead": prot.get("expected_overhead"), "stripes": prot.get("stripes"),
               "open_stripes": prot.get("open_stripes"),
               "predicted_share": (g - 1) / (c - 1), "runs": []}
        info["configs"].append(cfg)
        configs.append((t, cfg, [t.backing()[lost]]))
        log("%s: %d files, %.1f MB in %.1f s; parity overhead %s (1/(G-1) = %.3f)", name, files,
            nbytes / 1e6, secs, prot.get("parity_overhead"), 1 / (g - 1))
    py = webfs_python(ctx)
    info["how"] = "webfs.commands.rebuild_disk.measure()" if py else "webfs rebuild --json"
    for rep in range(ctx.repeat):
        k = rep % len(configs) if configs else 0
        for t, cfg, where in configs[k:] + configs[:k]:
            rmtree(where[0])             # the disk dies (the first one, then the last rebuilt one)
            new = os.path.join(t.root, "rebuilt-%d" % rep)
            drop_caches()
            if py:
                run([py, "-c", "import webfs.commands.rebuild_disk"], check=False)   # its modules cached again
                argv = [py, "-c", REBUILD_RUN, t.backing()[0], str(lost), new]
            else:
                run([o.webfs_cmd, "--version"], check=False)
                argv = [o.webfs_cmd, "rebuild", "--disk", str(lost), "--to", new, "--json",
                        t.backing()[0]]
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = run(argv, check=False, timeout=o.timeout)
            dt = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                data = json.loads(p.stdout)
            except ValueError:
                data = None
            where[0] = new
            fig = (data or {}).get("figures") or {}
            r = {"rep": rep, "wall_seconds": dt, "rc": p.returncode, "figures": fig,
                 "rchar": (data or {}).get("rchar"), "read_bytes": (data or {}).get("read_bytes"),
                 "device_read_bytes": (ru1.ru_inblock - ru0.ru_inblock) * 512,
                 "device_write_bytes": (ru1.ru_oublock - ru0.ru_oublock) * 512}
            if p.returncode != 0 or not fig:
                r["error"] = (p.stderr or p.stdout).strip()[-500:]
                section_fail(ctx, "rebuild", cfg["name"], BenchError(
                    "webfs rebuild exit %d: %s" % (p.returncode, r["error"])))
            shares = list((fig.get("read_share_per_disk") or {}).values())
            if shares:
                r["share_min"], r["share_max"] = min(shares), max(shares)
                r["share_mean"] = sum(shares) / len(shares)
                r["survivor_bytes"] = sum((fig.get("bytes_read_per_disk") or {}).values())
            cfg["runs"].append(r)
            ctx.measurements.append({"target": "webfs", "figure": "rebuild.G%d" % cfg["group_size"],
                                     "rep": rep, "ok": p.returncode == 0 and bool(fig),
                                     "seconds": fig.get("seconds"), "value": fig.get("mb_per_s"),
                                     "result": r})
            log("%s rebuild rep %d: %s MB in %s s (%s MB/s; wall %.2f s), share per survivor "
                "%s..%s (predicted %.2f)", cfg["name"], rep,
                "%.1f" % (fig.get("bytes_written", 0) / 1e6), fig.get("seconds"),
                fig.get("mb_per_s"), dt, r.get("share_min"), r.get("share_max"),
                cfg["predicted_share"])
    for t, cfg, where in configs:
        # scrub: every block and parity file read and checked, caches dropped first
        drop_caches()
        dt, sc, p = cli_json(ctx, ["scrub", t.backing()[0]])
        fig = (sc or {}).get("figures") or {}
        cfg["scrub"] = {"wall_seconds": dt, "rc": p.returncode, "seconds": fig.get("seconds"),
                        "bytes_read": fig.get("bytes_read"), "blocks": fig.get("blocks"),
                        "problems": fig.get("problems"),
                        "bytes_read_per_disk": fig.get("bytes_read_per_disk"),
                        "mb_per_s": (fig["bytes_read"] / fig["seconds"] / 1e6)
                        if fig.get("seconds") and fig.get("bytes_read") else None}
        if p.returncode != 0 or not fig:
            section_fail(ctx, "rebuild", cfg["name"], BenchError(
                "webfs scrub exit %d: %s" % (p.returncode, (p.stderr or p.stdout).strip()[-300:])))
        else:
            ctx.measurements.append({"target": "webfs", "figure": "scrub.G%d" % cfg["group_size"],
                                     "rep": 0, "ok": True, "seconds": fig.get("seconds"),
                                     "value": cfg["scrub"]["mb_per_s"], "result": cfg["scrub"]})
            log("%s scrub: %.1f MB read in %.2f s (%s MB/s; wall %.2f s), %s problem(s)",
                cfg["name"], fig["bytes_read"] / 1e6, fig["seconds"],
                "%.1f" % cfg["scrub"]["mb_per_s"] if cfg["scrub"]["mb_per_s"] else "?", dt,
                fig.get("problems"))
        p = run([o.webfs_cmd, "fsck", t.backing()[0]], check=False, timeout=o.timeout)
        cfg["fsck_rc"] = p.returncode
        if p.returncode != 0:
            cfg["fsck"] = (p.stdout + p.stderr).strip()[-1000:]
            section_fail(ctx, "rebuild", cfg["name"], BenchError(
                "webfs fsck after the rebuilds: exit %d: %s" % (p.returncode, cfg["fsck"][-300:])))
        rs = [r for r in cfg["runs"] if r.get("figures")]
        f = lambda key: median([r["figures"].get(key) for r in rs])
        cfg["median"] = {
            "mb_per_s": f("mb_per_s"), "seconds": f("seconds"), "bytes_written": f("bytes_written"),
            "blocks_rebuilt": f("blocks_rebuilt"), "parity_rebuilt": f("parity_rebuilt"),
            "wall_seconds": median([r["wall_seconds"] for r in rs]),
            "share_min": median([r.get("share_min") for r in rs]),
            "share_max": median([r.get("share_max") for r in rs]),
            "share_mean": median([r.get("share_mean") for r in rs]),
            "survivor_bytes": median([r.get("survivor_bytes") for r in rs]),
            "rchar": median([r.get("rchar") for r in rs]),
            "device_read_bytes": median([r["device_read_bytes"] for r in rs]),
        }
        t.destroy()
        rmtree(t.root)


def join_opts_sp(*parts):
    return " ".join(p for p in parts if p)


def parse_size(text):
    s = str(text).strip().upper().rstrip("B")
    mult = 1
    if s and s[-1] in "KMGT":
        mult = 1024 ** ("KMGT".index(s[-1]) + 1)
        s = s[:-1]
    return int(float(s) * mult)


# ------------------------------------------------- slow disks (cooling, readers)

def slow_archive(ctx, name, crawl, max_bytes, delay):
    """An archive of --disks disks holding crawl (or its first max_bytes, by
    host), mounted with disk_delay=I:delay on every disk (one I/O at a time
    per disk) and piece_cache=0, caches dropped: what the cooling and readers
    sections read from.  Returns (target, pages, disk of each page, files,
    bytes); pages are those of one FUSE read at most, shuffled (seeded), each
    looked up once through the mount."""
    o = ctx.opts
    t = archive(ctx, name, disks=o.disks)
    try:
        t.create()
        files, nbytes, _ = copy_in(ctx, t, [crawl], max_bytes)
        t.umount()
        delays = ",".join("%d:%g" % (i, delay) for i in range(o.disks))
        t.mount_opts = join_opts(o.webfs_mount_opts, "disk_delay=" + delays, "piece_cache=0")
        drop_caches()
        t.mount()
        hosts = {h for h, _, _ in subset(ctx, crawl, max_bytes)}
        pages = sorted(p for p in ctx.page_list()
                       if "/".join(p.split("/", 2)[:2]) in hosts
                       and os.path.getsize(os.path.join(ctx.corpus, p)) <= FUSE_READ)
        random.Random(o.seed).shuffle(pages)
        disk = {}
        for p in pages:                       # also the warm-up: every lookup made once
            try:
                disk[p] = int(os.getxattr(os.path.join(t.path, p), "user.webfs.disk")
                              .split(b",")[0])
            except (OSError, ValueError):
                disk[p] = None
    except BaseException:
        t.destroy()
        rmtree(t.root)
        raise
    return t, pages, disk, files, nbytes


def closed_readers(ctx, t, list_path, counts, seconds):
    """Reads/s through mount t with N concurrent readers for each N in
    counts, pages chosen uniformly from list_path, each read past the page
    cache: [bench_zipf --closed result]."""
    tool = os.path.join(HERE, "bench_zipf.py")
    out = []
    for n in counts:
        p = run([sys.executable, tool, t.path, list_path, "--ranked", "--s", "0",
                 "--closed", str(n), "--seconds", str(seconds), "--drop-cache",
                 "--seed", str(ctx.opts.seed)], check=False, timeout=ctx.opts.timeout)
        try:
            r = json.loads(p.stdout)
        except ValueError:
            raise BenchError("bench_zipf --closed: %s" % p.stderr.strip()[-300:])
        out.append(r)
        log("%s: %d reader(s): %.0f reads/s, mean %.1f ms", t.name, n,
            r["reads_per_s"] or 0, r["mean_ms"] or 0)
    return out


def readers(ctx):
    """Reads/s against concurrent readers (--readers) on --disks slow disks
    (--readers-delay each, one I/O at a time): issue 10's 'readers in
    parallel'.  The ceiling is disks / delay reads per second."""
    if no_webfs(ctx, "readers"):
        return
    o = ctx.opts
    counts = [int(x) for x in o.readers.split(",") if x.strip()]
    d = o.readers_delay
    info = {"disks": o.disks, "delay_s": d, "ceiling_per_s": o.disks / d,
            "seconds": o.readers_seconds, "runs": []}
    ctx.extra["readers"] = info
    ctx.figure("readers", "readers", "reads/s against concurrent readers, slow disks", "custom")
    max_bytes = parse_size(o.extra_size) if o.extra_size else None
    t = None
    try:
        t, pages, _, files, nbytes = slow_archive(ctx, "webfs-readers", ctx.crawls[0],
                                                  max_bytes, d)
        info.update(pages=len(pages), files=files, bytes=nbytes,
                    mount=" ".join(t.mount_argv()).replace(ctx.workdir, "$W"))
        list_path = os.path.join(t.root, "pages.list")
        with open(list_path, "w") as f:
            f.write("".join(p + "\n" for p in pages))
        info["runs"] = closed_readers(ctx, t, list_path, counts, o.readers_seconds)
        for r in info["runs"]:
            ctx.measurements.append({"target": "webfs", "figure": "readers.%d" % r["readers"],
                                     "rep": 0, "ok": True, "value": r["reads_per_s"],
                                     "result": r})
    except (BenchError, ValueError, OSError) as e:
        info["error"] = str(e)[-1000:]
        section_fail(ctx, "readers", "webfs-readers", e)
    finally:
        if t is not None:
            t.destroy()
            rmtree(t.root)


# ------------------------------------------------------------- cooling

def cooling(ctx):
    if no_webfs(ctx, "cooling"):
        return
    o = ctx.opts
    d = o.cool_delay
    scenarios = [s.strip() for s in o.cool_scenarios.split(",") if s.strip()]
    info = {"disks": o.disks, "delay_s": d, "busy": o.cool_busy, "seconds": o.cool_seconds,
            "threads": o.cool_threads,
            "delta": o.cool_delta, "zipf_s": 1.0, "scenarios": []}
    ctx.extra["cooling"] = info
    ctx.figure("cooling", "cooling.mean", "mean response time before/after webfs cool", "custom")
    crawl = ctx.crawls[0]
    max_bytes = parse_size(o.extra_size) if o.extra_size else None
    tool = os.path.join(HERE, "bench_zipf.py")
    for sc in scenarios:
        name = "webfs-cool-%s" % sc
        res = {"scenario": sc}
        info["scenarios"].append(res)
        t = None
        try:
            t, pages, disk, files, nbytes = slow_archive(ctx, name, crawl, max_bytes, d)
            res["mount"] = " ".join(t.mount_argv()).replace(ctx.workdir, "$W")
            if sc == "hot":
                count = {}
                for p in pages:
                    count[disk[p]] = count.get(disk[p], 0) + 1
                hot = max((k for k in count if k is not None), key=lambda k: (count[k], -k))
                pages.sort(key=lambda p: disk[p] != hot)          # stable: shuffled within
                res["hot_disk"] = hot
            res["pages"] = len(pages)
            list_path = os.path.join(t.root, "ranked.list")
            with open(list_path, "w") as f:
                f.write("".join(p + "\n" for p in pages))

            def workload(extra):
                cmd = [sys.executable, tool, t.path, list_path, "--ranked", "--seconds",
                       str(o.cool_seconds), "--seed", str(o.seed), "--drop-cache",
                       "--verify", ctx.corpus] + extra
                p = run(cmd, check=False, timeout=o.timeout)
                if p.returncode != 0:
                    raise BenchError("bench_zipf: %s" % p.stderr.strip()[-500:])
                r = json.loads(p.stdout)
                if r.get("errors"):
                    raise BenchError("%d read errors: %s" % (r["errors"], "; ".join(r["error_lines"])))
                return r

            busy = busy_for(o.cool_busy, sc)
            res["busy"] = busy
            before = workload(["--busy", str(busy), "--delay", str(d), "--threads",
                               str(o.cool_threads)])
            res["before"] = before
            log("%s before: %d reads at %.0f/s, mean %.1f ms, p90 %.1f ms; reads per disk %s",
                name, before["reads"], before["rate_per_s"], before["mean_ms"], before["p90_ms"],
                before["reads_per_disk"])
            _, heat_before, _ = cli_json(ctx, ["heat", "--top", "0", t.path])
            res["heat_before"] = (heat_before or {}).get("figures")
            dt, cooled, p = cli_json(ctx, ["cool", "--delta", o.cool_delta, t.path])
            if not cooled or p.returncode != 0:
                raise BenchError("webfs cool exit %d: %s" % (p.returncode, p.stderr.strip()[-500:]))
            fig = cooled.get("figures") or {}
            res["cool"] = {"seconds": dt, "moves": len(fig.get("moves") or []),
                           "bytes_moved": fig.get("bytes_moved"), "reason": fig.get("reason"),
                           "ratio_before": fig.get("ratio_before"), "ratio_after": fig.get("ratio_after"),
                           "disk_heat_before": fig.get("disk_heat_before"),
                           "disk_heat_after": fig.get("disk_heat_after")}
            log("%s cool: %d moves, %s bytes in %.1f s; heat max/mean %s -> %s (%s)", name,
                res["cool"]["moves"], fig.get("bytes_moved"), dt, fig.get("ratio_before"),
                fig.get("ratio_after"), fig.get("reason"))
            before["model_mean_ms"] = mdl_mean_ms(before, d)
            after = workload(["--rate", repr(before["rate_per_s"]), "--threads",
                              str(o.cool_threads)])
            after["model_mean_ms"] = mdl_mean_ms(after, d)
            res["after"] = after
            _, heat_after, _ = cli_json(ctx, ["heat", "--top", "0", t.path])
            res["heat_after"] = (heat_after or {}).get("figures")
            log("%s after: mean %.1f ms, p90 %.1f ms; reads per disk %s", name, after["mean_ms"],
                after["p90_ms"], after["reads_per_disk"])
            res["files"], res["bytes"] = files, nbytes
            ctx.measurements.append({"target": "webfs", "figure": "cooling.%s" % sc, "rep": 0,
                                     "ok": True, "value": before["mean_ms"] / after["mean_ms"],
                                     "result": {k: v for k, v in res.items()}})
        except (BenchError, ValueError, OSError) as e:
            res["error"] = str(e)[-1000:]
            section_fail(ctx, "cooling", name, e)
        finally:
            if t is not None:
                t.destroy()
                rmtree(t.root)


def busy_for(spec, scenario):
    """--cool-busy: one number, or scenario:number pairs."""
    default = None
    for part in str(spec).split(","):
        k, sep, v = part.partition(":")
        if not sep:
            default = float(k)
        elif k.strip() == scenario:
            return float(v)
    return default if default is not None else 0.8


def mdl_mean_ms(r, d):
    """Mean response time (ms) the reads of run r would have if each disk
    were an M/D/1 queue of its own, serving its share of the arrivals in d
    seconds a read (Pollaczek-Khinchine: wait = rho d / 2(1 - rho)); None
    when a disk would be overloaded.  Beside the measured mean it says how
    much of the response time the disks explain."""
    counts = r.get("reads_per_disk") or {}
    n = sum(counts.values())
    if not n:
        return None
    total = 0.0
    for c in counts.values():
        rho = r["rate_per_s"] * c / n * d
        if rho >= 1:
            return None
        total += c / n * (d + rho * d / (2 * (1 - rho)))
    return total * 1e3


# -------------------------------------------------------------- memory

def memory(ctx):
    if no_webfs(ctx, "memory"):
        return
    o = ctx.opts
    scales = [1, o.mem_scale]
    info = {"pages": o.mem_pages, "scales": []}
    ctx.extra["memory"] = info
    ctx.figure("memory", "memory.hwm", "daemon peak RSS against archive size", "custom")
    for scale in scales:
        name = "webfs-mem-%dx" % scale
        res = {"scale": scale, "pages": o.mem_pages * scale}
        info["scales"].append(res)
        corpus = os.path.join(ctx.workdir, "mem-corpus-%dx" % scale)
        t = None
        try:
            run([sys.executable, os.path.join(HERE, "make-corpus"), "--seed", str(o.seed + 1),
                 "--pages", str(o.mem_pages * scale), "--crawls", "1", corpus])
            t = archive(ctx, name)
            t.create()
            res["rss_empty"] = (t.daemon_stats() or {}).get("rss")
            src = os.path.join(corpus, "crawl-001")
            files = int(sh("find . -type f | wc -l", cwd=src).stdout.split()[0])
            res["files"] = files
            dt, _, rc, err, _ = timed("cp -r %s %s" % (shlex.quote(src), shlex.quote(t.path + "/")),
                                      timeout=o.timeout)
            if rc != 0:
                raise BenchError("cp -r: %s" % err.strip()[-300:])
            t.sync()
            st = t.daemon_stats() or {}
            res["ingest_seconds"] = dt
            res["hwm_ingest"], res["rss_ingest"] = st.get("hwm"), st.get("rss")
            status = t.status() or {}
            res["blocks"], res["references"] = status.get("blocks"), status.get("references")
            t.umount()
            t.mount()
            res["rss_mounted"] = (t.daemon_stats() or {}).get("rss")
            # every file's metadata (lookups, getattr, readdir): what the kernel makes
            # the daemon keep per inode
            got = sh("find . -type f | wc -l; ls -lR > /dev/null; du -s . > /dev/null", cwd=t.path)
            if int(got.stdout.split()[0]) != files:
                raise BenchError("the mount shows %s files, expected %d" % (got.stdout.split()[0], files))
            st = t.daemon_stats() or {}
            res["hwm_meta"] = st.get("hwm")
            # every file's bytes: adds the decoded-piece cache (mount option piece_cache)
            got = sh("find . -type f -exec cat {} + | wc -c", cwd=t.path)
            res["read_bytes"] = int(got.stdout.split()[0])
            st = t.daemon_stats() or {}
            res["hwm_read"], res["rss_read"] = st.get("hwm"), st.get("rss")
            # the same without that cache
            t.umount()
            t.mount_opts = join_opts(o.webfs_mount_opts, "piece_cache=0")
            t.mount()
            sh("find . -type f -exec cat {} + > /dev/null; ls -lR > /dev/null", cwd=t.path)
            res["hwm_read_nocache"] = (t.daemon_stats() or {}).get("hwm")
            log("%s: %d files; RSS empty %s, peak ingest %s, mounted %s, peak find+ls+du %s, "
                "peak cat %s, peak cat with piece_cache=0 %s (MiB)", name, files,
                *("%.1f" % (res[k] / 2**20) if res.get(k) else "?"
                  for k in ("rss_empty", "hwm_ingest", "rss_mounted", "hwm_meta", "hwm_read",
                            "hwm_read_nocache")))
            ctx.measurements.append({"target": "webfs", "figure": "memory.%dx" % scale, "rep": 0,
                                     "ok": True, "value": max(res.get("hwm_ingest") or 0,
                                                              res.get("hwm_meta") or 0,
                                                              res.get("hwm_read_nocache") or 0),
                                     "result": dict(res)})
        except (BenchError, ValueError, OSError) as e:
            res["error"] = str(e)[-1000:]
            section_fail(ctx, "memory", name, e)
        finally:
            if t is not None:
                t.destroy()
                rmtree(t.root)
            rmtree(corpus)


SECTIONS = {
    "rebuild": (rebuild, "rebuild a lost disk, G = C and G < C: MB/s, bytes read per survivor; "
                         "then scrub MB/s"),
    "readers": (readers, "reads/s with 1, 4, 16, 64 readers on slow disks (issue 10)"),
    "cooling": (cooling, "Zipf reads on slow disks before and after webfs cool: response time"),
    "memory": (memory, "daemon RSS with 1x and Nx the files (does it grow with the archive?)"),
}
