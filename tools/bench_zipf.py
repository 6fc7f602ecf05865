#!/usr/bin/env python3
"""Random page reads for tools/bench: a Zipf mix over a list of files.

    bench_zipf.py ROOT LIST --reads N [--seed S] [--s 1.0]

LIST holds paths relative to ROOT, one a line.  Each path gets a popularity
rank from a seeded shuffle (or the order of LIST, with --ranked); N reads are
drawn with probability ~ 1/rank^s; each read opens the file, reads it whole
and closes it.  Prints JSON: the count, total seconds and bytes, and latency
percentiles in milliseconds.  The same seed gives the same sequence on every
target.  Standard library.

Open arrivals (the cooling section): with --rate R, or --busy B --delay D,
the reads (--reads, or as many as arrive in --seconds) arrive at Poisson
times (rate R per second, seeded) and are served by up to --threads threads
at once; a read's response time runs from its
arrival to its answer, so it includes the time it queued.  --busy B --delay D
picks R so that the disk with the largest share of the reads (by the
xattr user.webfs.disk of each file, a webfs mount) is busy B of the time if
each read costs it D seconds.  --drop-cache drops each file's pages from the
kernel's cache after reading it (posix_fadvise DONTNEED), so every read
reaches the filesystem; --verify SRC compares every read with SRC/path.

Closed loop (throughput against concurrency): --closed N --seconds S runs N
readers, each reading pages (Zipf, or uniform with --s 0) one after the
other for S seconds.
"""

import argparse
import concurrent.futures
import itertools
import json
import os
import random
import sys
import threading
import time


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[i]


def read_whole(path, drop=False):
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            parts.append(b)
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return b"".join(parts)


def disk_of(path):
    """The first disk index in user.webfs.disk, or None (not webfs)."""
    try:
        return int(os.getxattr(path, "user.webfs.disk").split(b",")[0])
    except (OSError, ValueError):
        return None


def open_loop(a, rng, ranked, cum, probs):
    """Poisson arrivals served by a thread pool; returns the JSON dict."""
    disks = [disk_of(p) for p in ranked]
    share = {}
    for d, p in zip(disks, probs):
        if d is not None:
            share[d] = share.get(d, 0.0) + p
    rate = a.rate
    if rate is None:
        if not share:
            sys.exit("bench_zipf: --busy needs files with user.webfs.disk (a webfs mount)")
        rate = a.busy / (max(share.values()) * a.delay)
    n = a.reads if a.seconds is None else max(100, int(round(rate * a.seconds)))
    seq_idx = rng.choices(range(len(ranked)), cum_weights=cum, k=n)
    arrivals = random.Random(a.seed + 1)
    gaps = [arrivals.expovariate(rate) for _ in seq_idx]
    expected = {}
    lat = []
    per_disk = {}
    lat_disk = {}
    errors = []
    nbytes = [0]
    lock = threading.Lock()
    clock = time.perf_counter

    def serve(i, due):
        p = ranked[i]
        try:
            data = read_whole(p, a.drop_cache)
        except OSError as e:
            with lock:
                errors.append("%s: %s" % (p, e))
            return
        done = clock()
        bad = None
        if a.verify:
            try:
                want = expected.get(p)
                if want is None:
                    with open(os.path.join(a.verify, p), "rb") as f:
                        want = expected[p] = f.read()
                if data != want:
                    bad = "%s: wrong bytes" % p
            except OSError as e:
                bad = "%s: cannot verify: %s" % (p, e)
        with lock:
            lat.append(done - due)
            nbytes[0] += len(data)
            d = disks[i]
            per_disk[d] = per_disk.get(d, 0) + 1
            lat_disk[d] = lat_disk.get(d, 0.0) + (done - due)
            if bad:
                errors.append(bad)

    late = []
    futures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.threads) as pool:
        t0 = clock()
        due = t0
        for i, gap in zip(seq_idx, gaps):
            due += gap
            pause = due - clock()
            if pause > 0:
                time.sleep(pause)
            late.append(max(0.0, clock() - due))
            futures.append(pool.submit(serve, i, due))
    total = clock() - t0
    for fut in futures:
        if fut.exception() is not None:
            errors.append("reader: %r" % fut.exception())
    lat.sort()
    late.sort()
    ms = lambda s: None if s is None else s * 1e3
    n = len(lat)
    reads = sum(per_disk.values())
    return {
        "mode": "open", "reads": len(seq_idx), "answered": n, "distinct": len(set(seq_idx)),
        "files": len(ranked), "seconds": total, "bytes": nbytes[0], "errors": len(errors),
        "error_lines": errors[:5], "rate_per_s": rate, "offered_share": share,
        "busy": a.busy, "delay_s": a.delay, "threads": a.threads,
        "reads_per_disk": {str(k): v for k, v in sorted(per_disk.items(), key=lambda kv: str(kv[0]))},
        "mean_ms_per_disk": {str(k): lat_disk[k] / v * 1e3
                             for k, v in sorted(per_disk.items(), key=lambda kv: str(kv[0]))},
        "disk_max_over_mean": (max(per_disk.values()) / (reads / len(per_disk))) if per_disk else None,
        "mean_ms": ms(sum(lat) / n) if n else None,
        "p50_ms": ms(percentile(lat, 50)), "p90_ms": ms(percentile(lat, 90)),
        "p99_ms": ms(percentile(lat, 99)), "max_ms": ms(lat[-1]) if lat else None,
        "late_p99_ms": ms(percentile(late, 99)), "late_max_ms": ms(late[-1]) if late else None,
    }


def closed_loop(a, ranked, cum):
    """--closed N readers, each reading as fast as it can for --seconds."""
    stop = time.perf_counter() + (a.seconds or 5.0)
    counts = [0] * a.closed
    lat = [[] for _ in range(a.closed)]
    errors = []

    def reader(k):
        rng = random.Random(a.seed * 1000 + k)
        while True:
            p = rng.choices(ranked, cum_weights=cum)[0]
            s = time.perf_counter()
            if s >= stop:
                return
            try:
                read_whole(p, a.drop_cache)
            except OSError as e:
                errors.append("%s: %s" % (p, e))
                continue
            lat[k].append(time.perf_counter() - s)
            counts[k] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=reader, args=(k,)) for k in range(a.closed)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.perf_counter() - t0
    every = sorted(x for l in lat for x in l)
    n = len(every)
    return {"mode": "closed", "readers": a.closed, "reads": n, "seconds": total,
            "reads_per_s": n / total if total else None, "errors": len(errors),
            "error_lines": errors[:5], "mean_ms": sum(every) / n * 1e3 if n else None,
            "p90_ms": percentile(every, 90) * 1e3 if n else None}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("list")
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--s", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    ap.add_argument("--ranked", action="store_true",
                    help="LIST is in popularity order already (no shuffle)")
    ap.add_argument("--rate", type=float, help="open arrivals at this many reads per second")
    ap.add_argument("--busy", type=float, help="open arrivals keeping the busiest disk this busy")
    ap.add_argument("--delay", type=float, default=0.01,
                    help="seconds a disk takes per read, for --busy (default 0.01)")
    ap.add_argument("--seconds", type=float,
                    help="open arrivals: as many reads as arrive in this time at the rate "
                         "(instead of --reads)")
    ap.add_argument("--closed", type=int, metavar="N",
                    help="N readers at once, each reading as fast as it can for --seconds "
                         "(a throughput figure)")
    ap.add_argument("--threads", type=int, default=64, help="readers at once (open arrivals)")
    ap.add_argument("--drop-cache", action="store_true",
                    help="posix_fadvise DONTNEED after each read")
    ap.add_argument("--verify", metavar="SRC", help="compare each read with SRC/path")
    a = ap.parse_args(argv)
    if a.verify:
        a.verify = os.path.abspath(a.verify)
    with open(a.list) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    if not paths:
        sys.exit("bench_zipf: empty list")
    rng = random.Random(a.seed)
    ranked = paths[:]
    if not a.ranked:
        rng.shuffle(ranked)
    weights = [1.0 / (i + 1) ** a.s for i in range(len(ranked))]
    cum = list(itertools.accumulate(weights))
    os.chdir(a.root)
    if a.closed:
        print(json.dumps(closed_loop(a, ranked, cum)))
        return
    if a.rate is not None or a.busy is not None:
        probs = [w / cum[-1] for w in weights]
        print(json.dumps(open_loop(a, rng, ranked, cum, probs)))
        return
    seq = rng.choices(ranked, cum_weights=cum, k=a.reads)
    lat = []
    nbytes = 0
    errors = 0
    clock = time.perf_counter_ns
    t0 = clock()
    for p in seq:
        s = clock()
        try:
            with open(p, "rb", buffering=0) as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    nbytes += len(b)
        except OSError:
            errors += 1
        lat.append(clock() - s)
    total = (clock() - t0) / 1e9
    lat.sort()
    ms = lambda ns: None if ns is None else ns / 1e6
    print(json.dumps({
        "reads": len(seq), "distinct": len(set(seq)), "files": len(paths),
        "seconds": total, "bytes": nbytes, "errors": errors,
        "p50_ms": ms(percentile(lat, 50)), "p90_ms": ms(percentile(lat, 90)),
        "p99_ms": ms(percentile(lat, 99)), "max_ms": ms(lat[-1]),
        "mean_ms": ms(sum(lat) / len(lat)),
    }))


if __name__ == "__main__":
    main()
