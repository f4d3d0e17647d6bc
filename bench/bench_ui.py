"""`mem ui`: each page's server time on a large workspace, against the library call that page is
built on (the baseline: the same read without HTML), side by side.

Uses the log bench_replay.py builds (built here when missing: page writes over 2,000 slugs with
Always edits mixed in). Pages are served in-process (starlette's TestClient), so the time is the
server's: open the workspace, read, render. Usage: python bench/bench_ui.py [-n 100000] [--reads 20]
"""

import argparse
import statistics
import time

from bench_replay import build_log
from common import table, workdir

from starlette.testclient import TestClient

from cli.web.app import create_app
from projections import history as histories
from projections.audit import believed
from projections.memory import Memory
from projections.views import page_path


def median_ms(fn, reads: int) -> float:
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    root = workdir("replay") / f"ws-{args.n}"
    if not (root / ".mem" / "log.db").exists():
        build_log(root, args.n)
    memory = Memory.open(root)
    memory.refresh()
    head = memory.log.head()
    middle = head // 2
    client = TestClient(create_app(root))

    def page(url):
        def fetch():
            answer = client.get(url)
            assert answer.status_code == 200, answer.text[:300]
        return fetch

    library = {
        "asof": lambda: believed(memory.views, middle, last=10, include_all=True),
        "history": lambda: histories.history(memory, page_path("page-7"), head),
    }
    urls = [("asof", f"/asof?seq={middle}&page=page-7"), ("asof (now)", "/asof?page=page-7"),
            ("history", "/history?page=page-7"), ("timeline", "/timeline"),
            ("timeline (filtered)", "/timeline?kind=page.update"), (f"timeline (seq {middle})", f"/timeline?seq={middle}"),
            ("conflicts", "/conflicts"), ("search", f"/search?q=version&seq={middle}"), ("contract", "/contract")]
    rows = [("page", "server ms (median)", "library call ms", "ratio")]
    for name, url in urls:
        served = median_ms(page(url), args.reads)
        base = library.get(name.split()[0])
        base_ms = median_ms(base, args.reads) if base and name.split()[0] == name else None
        rows.append((name, f"{served:.1f}", f"{base_ms:.1f}" if base_ms else "-",
                     f"{served / base_ms:.2f}x" if base_ms else "-"))
    table(f"mem ui pages on a {head:,}-event workspace ({args.reads} reads each)", rows)
    memory.close()


if __name__ == "__main__":
    main()
