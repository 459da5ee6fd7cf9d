#!/usr/bin/env python3
"""The SASS instructions with the most warp-stall samples in an Nsight Compute source page.

Usage (on the GPU machine):
  ncu --section SourceCounters --section WarpStateStats --kernel-name regex:persistent \
      --launch-skip N --launch-count 1 -o rep build/kosmos bench moe ...
  ncu --import rep.ncu-rep --page source --csv --print-source sass > rep.csv
  python3 scripts/ncu_top_stalls.py rep.csv [COUNT]

Prints the stall columns the CSV has, the total sample count, then COUNT (default 40) rows: samples,
share, not-issued samples, address, SASS. (The thirteenth session's GEMM1 / GEMM2 tables in
docs/perf-notes.md came from it.)
"""
import csv, sys
path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
rows = list(csv.reader(open(path, errors="replace")))
# find the header row (contains "Source")
hi = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
h = [c.strip() for c in rows[hi]]
data = rows[hi + 1:]
def col(name):
    for i, c in enumerate(h):
        if name in c: return i
    return None
ia, isrc, iall = col("Address"), col("Source"), col("Warp Stall Sampling (All")
inot = col("Warp Stall Sampling (Not")
print("columns:", len(h), "| stall cols:", [c for c in h if "stall" in c.lower()][:30])
def num(r, i):
    try: return float(r[i].replace(",", ""))
    except Exception: return 0.0
tot = sum(num(r, iall) for r in data if len(r) > iall)
print("total samples", tot)
top = sorted((r for r in data if len(r) > iall), key=lambda r: -num(r, iall))[:n]
for r in top:
    print(f"{num(r, iall):8.0f} {100*num(r, iall)/max(tot,1):5.1f}%  {num(r, inot) if inot is not None else 0:8.0f}  {r[ia] if ia is not None else ''}  {r[isrc][:90]}")
