"""Helpers shared by the benchmark scripts: timing, peak memory, a results table."""

import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn, repeat: int = 3) -> float:
    """The median wall time of `repeat` runs of fn(), in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(title: str, rows: list[tuple]) -> None:
    print(f"\n{title}")
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def workdir(name: str) -> Path:
    path = Path(os.environ.get("MEM_BENCH_DIR", Path(__file__).parent / ".work")) / name
    path.mkdir(parents=True, exist_ok=True)
    return path
