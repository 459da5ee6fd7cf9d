#!/usr/bin/env python3
"""Idle time between consecutive tasks on each SM, from a trace SVG written by kosmos
(`--trace-svg`): per (previous kind -> next kind), the number of gaps, their sum in SM-ms and
their median / mean in microseconds. Usage: scripts/trace_gaps.py TRACE.svg"""
import collections
import re
import statistics
import sys


def main(path):
    s = open(path).read()
    m = re.search(r"lanes \(one per SM\), ([0-9.]+) us", s)
    if not m:
        sys.exit(f"{path}: no kosmos trace title (lanes ..., span us)")
    # The plot starts at x = 60 and is the SVG's width less 80 px (src/runtime/trace_export.cpp);
    # durations come from the titles.
    width = float(re.search(r'<svg [^>]*width="([0-9.]+)"', s).group(1))
    us_per_px = float(m.group(1)) / (width - 80.0)
    rect = re.compile(r'<rect x="([0-9.]+)" y="([0-9.]+)" width="[0-9.]+" height="[0-9.]+" fill="[^"]+">'
                      r"<title>task \d+ (\S+) rank \d+ ([0-9.]+) us</title>")
    lanes = collections.defaultdict(list)
    for x, y, kind, us in rect.findall(s):
        start = (float(x) - 60.0) * us_per_px
        lanes[y].append((start, start + float(us), kind))
    gaps = collections.defaultdict(list)
    for tasks in lanes.values():
        tasks.sort()
        for a, b in zip(tasks, tasks[1:]):
            gaps[(a[2], b[2])].append(max(0.0, b[0] - a[1]))
    total = 0.0
    for (a, b), v in sorted(gaps.items(), key=lambda kv: -sum(kv[1])):
        total += sum(v)
        print(f"{a:>22} -> {b:<22} n={len(v):6d} sum={sum(v) / 1000:8.3f} SM-ms "
              f"median={statistics.median(v):7.2f} us mean={statistics.mean(v):7.2f} us")
    print(f"total {total / 1000:.3f} SM-ms over {len(lanes)} SMs")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
