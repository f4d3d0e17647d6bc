"""`mem adopt` of many pages written by hand: a workspace of `--existing` pages, then `--pages` new
page files dropped into mind/ and a tenth of the existing ones edited, adopted by one `mem` process.
`--baseline REV` runs the same adoption with the code of commit REV (extracted with `git archive`) on a
copy of the same workspace, the two alternating `--runs` times, and checks both record as many events and
the same mind.md.

Usage: python bench/bench_adopt.py [--pages 3000] [--existing 300] [--runs 2] [--baseline main]
"""

import argparse
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import table, workdir

from bench_replay import extract

REPO = Path(__file__).resolve().parent.parent
PAGE = "---\ntype: lesson\ndescription: page {n} {rev}\n---\n# Page {n}\n\nLearned on run {rev}: staging first.\n"


def build(root: Path, existing: int) -> None:
    from projections.memory import Memory

    shutil.rmtree(root, ignore_errors=True)
    with Memory.init(root, "bench") as mem:
        for n in range(existing):
            mem.write_page(f"old-{n}", PAGE.format(n=n, rev="first").encode(), "bench")


def edit_by_hand(root: Path, pages: int, existing: int) -> None:
    for n in range(pages):
        (root / f"mind/new-{n}.md").write_text(PAGE.format(n=n, rev="by hand"))
    for n in range(0, existing, 10):
        (root / f"mind/old-{n}.md").write_text(PAGE.format(n=n, rev="edited by hand"))


def adopt(root: Path, code: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    env.pop("MEM_WORKSPACE", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from cli.app import main; main()", "-w", str(root), "adopt",
                           "--json"], env=env, cwd=code, capture_output=True)  # -c: the cwd comes first on sys.path
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mem adopt failed ({code}): {done.stderr.decode()[-2000:]}")
    with sqlite3.connect(root / ".mem/log.db") as db:
        events = db.execute("SELECT count(*) FROM events").fetchone()[0]
    return seconds, f"{events} events, mind.md {hashlib.sha256((root / 'mind.md').read_bytes()).hexdigest()[:12]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=3000, help="new page files written by hand")
    parser.add_argument("--existing", type=int, default=300, help="pages recorded before (a tenth edited by hand)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--baseline", default="none", help="a commit whose `mem adopt` runs side by side, or 'none'")
    args = parser.parse_args()

    base = workdir("adopt")
    template = base / "template"
    build(template, args.existing)
    edit_by_hand(template, args.pages, args.existing)
    with tempfile.TemporaryDirectory(prefix="mem-bench-adopt-") as tmp:
        codes = {"this code": REPO}
        if args.baseline != "none":
            if extract(args.baseline, Path(tmp)) is None:
                raise SystemExit(f"baseline {args.baseline} could not be extracted with git archive")
            codes[f"baseline {args.baseline}"] = Path(tmp)
        times: dict[str, list[float]] = {name: [] for name in codes}
        recorded: dict[str, set[str]] = {name: set() for name in codes}
        for _ in range(args.runs):
            for name, code in codes.items():
                root = base / "run"
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(template, root)
                seconds, events = adopt(root, code)
                times[name].append(seconds)
                recorded[name].add(events)
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        rows = [("code", "runs (s)", "pages a second (best)", "recorded")]
        adopted = args.pages + args.existing // 10
        for name in codes:
            rows.append((name, ", ".join(f"{s:.1f}" for s in times[name]), f"{adopted / min(times[name]):,.0f}",
                         ", ".join(sorted(recorded[name]))))
        table(f"mem adopt of {args.pages} new and {args.existing // 10} edited pages ({args.existing} recorded before), "
              f"load average {load}", rows)
        if len(codes) > 1:
            ours, theirs = (min(t) for t in times.values())
            print(f"\nthis code is {theirs / ours:.1f}x faster than {args.baseline} (best runs)")
            if len({frozenset(r) for r in recorded.values()}) != 1:
                raise SystemExit("the two codes recorded different events or mind.md")


if __name__ == "__main__":
    main()
