"""The trace CSV that `kosmos bench moe --trace-svg X.svg` writes beside the SVG (X.svg.csv, gzipped
by the device scripts): launch, label, task, sm, cta, start_ns, end_ns, cycles. Shared by
scripts/trace_windows.py and scripts/trace_match.py."""
import csv
import gzip


def read_rows(path):
    """Every record as a dict of strings (csv.DictReader rows); plain or .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return list(csv.DictReader(f))
