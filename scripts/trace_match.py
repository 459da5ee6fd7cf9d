#!/usr/bin/env python3
"""Matches one label's tasks between two launches of a trace CSV and prints their cost ratios.

The CSV is what `kosmos bench moe --trace-svg PATH` writes beside the SVG (PATH.csv, optionally
gzipped; scripts/trace_csv.py). The k-th task of LABEL in launch A
(by task index) is matched with the k-th of LABEL in launch B -- the fused launch's GEMM tiles and
the same tiles in their own (unfused) launch come in the same order. Per match: cycles A / cycles B
and time A / time B; printed for all matches and split by the label of the task the CTA ran before
(in launch A) and by whether the task started before --split-us (e.g. while dispatch still runs).

  scripts/trace_match.py CSV A B LABEL [--split-us 900] [--min-cycles 20000]

Tasks of B shorter than --min-cycles (empty slots of a worst-case plan) are left out.
"""
import argparse
import collections
import statistics
import sys

from trace_csv import read_rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("a", type=int, help="launch number of the launch to compare (e.g. 100, the timed fused run)")
    ap.add_argument("b", type=int, help="launch number of the reference launch (e.g. 105, its own unfused launch)")
    ap.add_argument("label", help='task label, e.g. "gemm GEMM1 gate_up+SwiGLU"')
    ap.add_argument("--split-us", type=float, default=900.0, help="early / late boundary in launch A (us)")
    ap.add_argument("--min-cycles", type=int, default=20000, help="leave out reference tasks shorter than this")
    o = ap.parse_args()
    rows = read_rows(o.csv)
    launch = {n: [r for r in rows if int(r["launch"]) == n] for n in (o.a, o.b)}
    tasks = {n: sorted((r for r in launch[n] if r["label"] == o.label), key=lambda r: int(r["task"])) for n in launch}
    if not tasks[o.a] or len(tasks[o.a]) != len(tasks[o.b]):
        sys.exit(f"launches {o.a} / {o.b} hold {len(tasks[o.a])} / {len(tasks[o.b])} tasks labelled '{o.label}'")
    # The task each CTA ran before, in launch A.
    prev = {}
    by_cta = collections.defaultdict(list)
    for r in launch[o.a]:
        by_cta[r["cta"]].append(r)
    for seq in by_cta.values():
        seq.sort(key=lambda r: int(r["start_ns"]))
        for i, r in enumerate(seq):
            prev[(r["label"], r["task"])] = seq[i - 1] if i else None
    groups = collections.defaultdict(list)
    for x, y in zip(tasks[o.a], tasks[o.b]):
        if int(y["cycles"]) < o.min_cycles:
            continue
        ratio = (int(x["cycles"]) / int(y["cycles"]),
                 (int(x["end_ns"]) - int(x["start_ns"])) / (int(y["end_ns"]) - int(y["start_ns"])))
        p = prev[(x["label"], x["task"])]
        when = "early" if int(x["start_ns"]) < o.split_us * 1e3 else "late"
        groups[("all", "")].append(ratio)
        groups[("after " + (p["label"] if p else "nothing"), when)].append(ratio)
    print(f"{o.label}: launch {o.a} against {o.b}, {len(groups[('all', '')])} matched tasks")
    for (after, when), v in sorted(groups.items()):
        print(f"  {after:40s} {when:5s} n={len(v):5d}  cycles ratio median {statistics.median(c for c, _ in v):.3f}"
              f" mean {statistics.mean(c for c, _ in v):.3f}  time ratio median {statistics.median(t for _, t in v):.3f}")


if __name__ == "__main__":
    main()
