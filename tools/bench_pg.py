"""The postgres section of tools/bench (issue 25): webfs with its catalog in
PostgreSQL against webfs with SQLite, and two machines against one.

A server of the section's own (tests/postgres.py, as the tests and the
webfs-pg target start one: Debian's postgresql package, a Unix socket
only); skipped with the reason when PostgreSQL or psycopg is missing.
Four runs per repetition, interleaved (their order rotates), each on a
fresh archive of 4 local disks:

sqlite, pg  `cp -r` of crawl 1 into the empty archive (with `sync`), then
            `cat` of every file after a cold remount (caches dropped).
one         one mount copying crawl 1 and crawl 2 at once (two cp -r) into
            a PostgreSQL archive; then the database's size per file
            (pg_total_relation_size of the catalog's tables, schema public,
            over the files copied; the query index's schema apart).
two         two mounts of one PostgreSQL archive (two state directories and
            mount points on this host: two "machines" sharing its cores),
            each copying one crawl at the same moment.

Beside the copies' seconds, the CPU seconds they cost (what the load does
not change): each daemon's (all its threads), the server's (its processes
and the backends that ended) and the copies' own (cp and its shell).

Aims: pg against sqlite >= 0.8x for both commands; two against one >= 1.5x
the files per second.  The report's functions need only the standard
library (tools/bench_report.py imports them).
"""

import os
import resource
import shlex
import subprocess
import time

from bench_lib import BenchError, log, proc_cpu, rmtree
from bench_targets import Webfs, WebfsPostgres

AIM_ENGINE = 0.8
AIM_MACHINES = 1.5
REPEAT = 2          # at most: the section's four runs cost about a minute a repetition
KINDS = ("sqlite", "pg", "one", "two")
CAT = "find . -type f -exec cat {} + | wc -c"
TABLES_SIZE = ("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
               "JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'public' AND c.relkind = 'r'")


def postgres(ctx):
    info = {"runs": []}
    ctx.extra["postgres"] = info
    root = os.path.join(ctx.workdir, "targets-postgres")
    sqlite = Webfs("webfs", os.path.join(root, "webfs"), ctx.opts)
    pg = WebfsPostgres("webfs-pg", os.path.join(root, "webfs-pg"), ctx.opts)
    why = pg.available()
    if why:
        info["error"] = "skipped: " + why
        log("postgres: %s", info["error"])
        return
    crawls = ctx.ingest_crawls[:2]
    if len(crawls) < 2:
        info["error"] = "skipped: two crawls needed (--crawls 2)"
        return
    files, nbytes = ctx.size_of(crawls[:1])
    info.update(crawls=crawls, files=[ctx.size_of([c])[0] for c in crawls], bytes=nbytes)
    second = SecondMachine(pg, os.path.join(root, "webfs-pg-b"))
    for rep in range(min(ctx.repeat, REPEAT)):
        for kind in KINDS[rep % len(KINDS):] + KINDS[:rep % len(KINDS)]:
            run = {"kind": kind, "rep": rep}
            try:
                if kind in ("sqlite", "pg"):
                    t = sqlite if kind == "sqlite" else pg
                    run.update(copy_then_cat(ctx, t, crawls[0], nbytes))
                elif kind == "one":
                    run.update(one_machine(ctx, pg, crawls))
                else:
                    run.update(two_machines(ctx, pg, second, crawls))
            except BenchError as e:
                run["error"] = str(e)[-300:]
                ctx.fail(pg if kind != "sqlite" else sqlite, "postgres", e)
            finally:
                second.destroy()
                for t in (sqlite, pg):
                    t.destroy()
            info["runs"].append(run)
            log("postgres %s rep %d: %s", kind, rep,
                {k: v for k, v in run.items() if k not in ("kind", "rep")})


class SecondMachine(Webfs):
    """Another machine's mount of the archive FIRST made: its second disk, a
    state directory and a mount point of its own."""

    def __init__(self, first, root):
        super().__init__(first.name + "-b", root, first.opts)
        self.first = first

    def mount_argv(self):
        o = self.mount_opts
        return (["env", "WEBFS_STATE_DIR=" + os.path.join(self.root, "state"), self.cmd(), "mount"]
                + (["-o", o] if o else []) + [self.first.backing()[1], self.path])

    def backing(self):
        return []               # the first machine's disks: its destroy removes them

    def create(self):
        self.destroy()
        os.makedirs(self.root, exist_ok=True)
        self.mount()

    def destroy(self):
        self.umount()
        rmtree(self.root)


def timed(cmd, cwd, expect=None):
    """Seconds a shell command takes (with `sync` after it); expect: the
    byte count its output must start with."""
    t0 = time.perf_counter()
    p = subprocess.run(["bash", "-c", cmd + " && sync"], cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError("%r exited %d: %s" % (cmd, p.returncode, p.stderr.strip()[-300:]))
    if expect is not None and int(p.stdout.split()[0]) != expect:
        raise BenchError("%r gave %s, not %d" % (cmd, p.stdout.split()[0], expect))
    return round(dt, 3)


def copy_then_cat(ctx, t, crawl, nbytes):
    t.create()
    src = os.path.join(ctx.corpus, crawl)
    ctx.warm_source(crawl)
    out = {"cp": timed("cp -r %s %s" % (shlex.quote(src), shlex.quote(os.path.join(t.path, crawl))), t.path)}
    t.remount_cold()
    out["cold_cat"] = timed(CAT, t.path, expect=nbytes)
    return out


def both_at_once(ctx, pairs):
    """A shell line copying each (crawl, mount point) at the same moment; it
    fails when any copy fails. Each copy is waited for by its PID: ``wait -n``
    found no child when both had ended before it ran (exit 127, a tiny run)."""
    for crawl, _ in pairs:
        ctx.warm_source(crawl)
    cps = ["cp -r %s %s & p%d=$!" % (shlex.quote(os.path.join(ctx.corpus, c)), shlex.quote(os.path.join(m, c)), i)
           for i, (c, m) in enumerate(pairs)]
    waits = " ".join("$p%d" % i for i in range(len(pairs)))
    return "; ".join(cps) + "; s=0; for p in %s; do wait $p || s=1; done; exit $s" % waits


class CpuSpent:
    """CPU seconds the daemons, the server and this process's children
    spend between start and ``spent``."""

    def __init__(self, daemons):
        self.daemons = daemons
        with open(os.path.join(WebfsPostgres.server.data, "postmaster.pid")) as f:
            self.server = int(f.readline())
        self.start = self._now()

    def _now(self):
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ([proc_cpu(t.pid) for t in self.daemons], proc_cpu(self.server), kids.ru_utime + kids.ru_stime)

    def spent(self):
        (d0, s0, c0), (d1, s1, c1) = self.start, self._now()
        return {"cpu_daemons": [round(b - a, 2) for a, b in zip(d0, d1)], "cpu_server": round(s1 - s0, 2),
                "cpu_cp": round(c1 - c0, 2)}


def one_machine(ctx, pg, crawls):
    pg.create()
    cpu = CpuSpent([pg])
    out = {"copy": timed(both_at_once(ctx, [(c, pg.path) for c in crawls]), pg.path)}
    out.update(cpu.spent())
    pg.sync()
    out["db_bytes"] = int(pg.server.psql(pg.database, TABLES_SIZE).strip())
    out["db_files"] = ctx.size_of(crawls)[0]
    return out


def two_machines(ctx, pg, second, crawls):
    pg.create()
    second.create()
    cpu = CpuSpent([pg, second])
    out = {"copy": timed(both_at_once(ctx, [(crawls[0], pg.path), (crawls[1], second.path)]), pg.path)}
    out.update(cpu.spent())
    # Each machine sees the other's crawl whole (close-to-open: the copies have returned).
    out["seen_s"] = timed("find . -type f | wc -l", second.path, expect=ctx.size_of(crawls)[0])
    return out


# ------------------------------------------------------------------ report

def _median(runs, kind, key):
    vals = sorted(r[key] for r in runs if r["kind"] == kind and "error" not in r and r.get(key))
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def pg_aims(pgx):
    """Issue 25's rows: (aim, figure, met)."""
    runs = pgx.get("runs") or []
    out = []
    for what, key in (("`cp -r` crawl 1", "cp"), ("cold `cat` of everything", "cold_cat")):
        label = "%s, catalog in PostgreSQL vs SQLite ≥ %s×" % (what, AIM_ENGINE)
        lite, pg = _median(runs, "sqlite", key), _median(runs, "pg", key)
        out.append((label, "%.2f× (%.2f vs %.2f s)" % (lite / pg, pg, lite), lite / pg >= AIM_ENGINE)
                   if lite and pg else (label, "not measured", None))
    label = "two machines copying a crawl each at once vs one copying both, files/s ≥ %s×" % AIM_MACHINES
    one, two = _median(runs, "one", "copy"), _median(runs, "two", "copy")
    out.append((label, "%.2f× (%.2f vs %.2f s; two mounts on one host share its cores)" % (one / two, two, one),
                one / two >= AIM_MACHINES) if one and two else (label, "not measured", None))
    label = "PostgreSQL database per file (no aim)"
    per = _median([dict(r, per=r["db_bytes"] / r["db_files"]) for r in runs if r.get("db_files")], "one", "per")
    out.append((label, "%.0f B (%s files)" % (per, sum(pgx.get("files") or [])) if per else "not measured", None))
    return out


def render(result):
    pgx = (result.get("extra") or {}).get("postgres")
    if not pgx:
        return []
    if pgx.get("error"):
        return ["%s" % pgx["error"][:300], ""]
    runs = pgx["runs"]
    out = ["Fresh archives of 4 local disks; median seconds of the runs, their order rotated. "
           "`cp -r` of %s (%s files) into the empty archive, then `cat` of every file after a "
           "cold remount, with the catalog in SQLite and in PostgreSQL (a server on a Unix "
           "socket, fsync off); then two crawls copied at once (%s files) into one mount, or one "
           "into each of two mounts of one archive (two state directories on this host)." % (
               pgx["crawls"][0], "{:,}".format(pgx["files"][0]), "{:,}".format(sum(pgx["files"]))), "",
           "| run | cp -r | cold cat | two crawls at once |", "|---|--:|--:|--:|"]
    for kind, what in (("sqlite", "SQLite"), ("pg", "PostgreSQL"), ("one", "PostgreSQL, one mount"),
                       ("two", "PostgreSQL, two mounts")):
        cells = [_median(runs, kind, k) for k in ("cp", "cold_cat", "copy")]
        out.append("| %s | %s |" % (what, " | ".join("%.2f s" % c if c else "–" for c in cells)))
    out.append("")
    files = sum(pgx["files"])
    for kind, what in (("one", "one mount"), ("two", "two mounts")):
        cpu = [dict(r, daemons=sum(r["cpu_daemons"])) for r in runs if r["kind"] == kind and "cpu_daemons" in r]
        if cpu:
            out.append("CPU a file of the two crawls at once, %s (medians): daemons %.2f ms, server %.2f ms, "
                       "cp %.2f ms." % (what, *(1000 * _median(cpu, kind, k) / files
                                                for k in ("daemons", "cpu_server", "cpu_cp"))))
    out.append("")
    return out


SECTIONS = {"postgres": (postgres, "webfs with its catalog in PostgreSQL vs SQLite (cp -r, cold cat); "
                         "two mounts of one archive vs one")}
