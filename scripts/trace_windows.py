#!/usr/bin/env python3
"""Where in a launch its tasks ran slower: reads the CSV that `kosmos bench moe --trace-svg X.svg`
writes beside the SVG (X.svg.csv: launch 0 = one more fused run, 1.. = the unfused composition's
launches right after it; 100, 101.. = the same left by the last timed runs) and prints, per launch, the span cut into --windows equal windows by task start: for each
label with at least --min tasks, the tasks starting there, their mean us and SM clock (MHz, from the
records' cycles), and which labels shared the SMs in that window (busy share).

  scripts/trace_windows.py bwd-trace.svg.csv[.gz] [--windows 8] [--min 200]
"""
import argparse
import collections
import sys

from trace_csv import read_rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--min", type=int, default=200, help="labels with fewer tasks in a launch are not broken down")
    a = ap.parse_args()
    launches = collections.defaultdict(list)
    for row in read_rows(a.csv):
        launches[int(row["launch"])].append((row["label"], int(row["start_ns"]), int(row["end_ns"]), int(row["cycles"])))
    if not launches:
        sys.exit("no records in " + a.csv)
    for launch in sorted(launches):
        recs = launches[launch]
        span = max(e for _, _, e, _ in recs) or 1
        w = span / a.windows
        counts = collections.Counter(l for l, _, _, _ in recs)
        big = sorted(l for l, n in counts.items() if n >= a.min)
        print(f"launch {launch} ({'fused' if launch % 100 == 0 else 'unfused'}{', timed' if launch >= 100 else ''}): span {span / 1e3:.1f} us, "
              f"{len(recs)} tasks; per window: label n / mean us / MHz, then busy share by label")
        for i in range(a.windows):
            lo, hi = i * w, (i + 1) * w
            cells = []
            for l in big:
                sel = [(s, e, c) for ll, s, e, c in recs if ll == l and lo <= s < hi]
                if not sel:
                    continue
                ns = sum(e - s for s, e, _ in sel)
                mhz = sum(c for _, _, c in sel) / ns * 1e3 if ns else 0
                cells.append(f"{l} {len(sel)}/{ns / len(sel) / 1e3:.1f}/{mhz:.0f}")
            busy = collections.Counter()
            for l, s, e, _ in recs:
                ov = min(e, hi) - max(s, lo)
                if ov > 0:
                    busy[l] += ov
            tot = sum(busy.values()) or 1
            share = " ".join(f"{l} {100 * v / tot:.0f}%" for l, v in busy.most_common(4))
            print(f"  {lo / 1e3:8.1f}-{hi / 1e3:8.1f} us: {'; '.join(cells):70s} | {share}")


if __name__ == "__main__":
    main()
