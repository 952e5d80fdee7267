#!/usr/bin/python3
"""How well two accuracy tunes' measurements agree with each other: the ceiling that any
estimator's rank correlation meets on this device (docs/bench/estimator-accuracy.md).

    scripts/accuracy_repeatability.py A.db B.db [--gpu pocl-cpu]

Per workload with at least 3 variants measured ok in both DBs: Spearman's rho between the
two DBs' medians over those variants, and whether both measured the same variant fastest.
Prints the median rho and the count of workloads whose fastest variant agrees."""
import argparse
import os
import sqlite3
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_opencl import spearman  # noqa: E402: one definition of the statistic


def medians(path, gpu):
    if not os.path.exists(path):
        sys.exit("error: no tuning DB at %s" % path)
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    rows = db.execute(
        "SELECT v.workload, v.key, m.median_us FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "WHERE m.gpu_type = ? AND m.status = 'ok' AND m.emulated = 0 AND v.template != 'reference'", (gpu,))
    return {(w, k): t for w, k, t in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--gpu", default="pocl-cpu")
    args = p.parse_args()
    a, b = medians(args.a, args.gpu), medians(args.b, args.gpu)
    by = {}
    for key in a.keys() & b.keys():
        by.setdefault(key[0], []).append((a[key], b[key]))
    rhos, same = [], 0
    for pairs in by.values():
        if len(pairs) < 3:
            continue
        r = spearman([x for x, _ in pairs], [y for _, y in pairs])
        rhos.append(0.0 if r != r else r)
        same += min(range(len(pairs)), key=lambda i: pairs[i][0]) == min(range(len(pairs)), key=lambda i: pairs[i][1])
    if not rhos:
        sys.exit("error: no workload has 3 variants measured in both DBs")
    print("workloads %d, median rho between the two DBs %.2f, same fastest variant in %d of %d"
          % (len(rhos), statistics.median(rhos), same, len(rhos)))


if __name__ == "__main__":
    main()
