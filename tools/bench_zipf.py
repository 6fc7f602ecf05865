#!/usr/bin/env python3
"""Random page reads for tools/bench: a Zipf mix over a list of files.

    bench_zipf.py ROOT LIST --reads N [--seed S] [--s 1.0]

LIST holds paths relative to ROOT, one a line.  Each path gets a popularity
rank from a seeded shuffle; N reads are drawn with probability ~ 1/rank^s;
each read opens the file, reads it whole and closes it.  Prints JSON: the
count, total seconds and bytes, and latency percentiles in milliseconds.
The same seed gives the same sequence on every target.  Standard library.
"""

import argparse
import itertools
import json
import os
import random
import sys
import time


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[i]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("list")
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--s", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    a = ap.parse_args(argv)
    with open(a.list) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    if not paths:
        sys.exit("bench_zipf: empty list")
    rng = random.Random(a.seed)
    ranked = paths[:]
    rng.shuffle(ranked)
    cum = list(itertools.accumulate(1.0 / (i + 1) ** a.s for i in range(len(ranked))))
    seq = rng.choices(ranked, cum_weights=cum, k=a.reads)
    os.chdir(a.root)
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
