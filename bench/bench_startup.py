"""`mem` start-up: the wall time of a whole `mem` process for the commands agents run most, side by side with
`python -c pass` (the interpreter's own floor) and `import typer` (the CLI framework's floor), all run
interleaved so a busy machine slows each the same. Target (issue 10): under 80 ms median where
`python -c pass` takes about 20 ms, i.e. under 4x the floor.

The workspace has `--events` events (pages written and rewritten, Always lines) before timing starts.

Usage: python bench/bench_startup.py [--runs 40] [--events 357] [--importtime]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import table, workdir

REPO = Path(__file__).resolve().parent.parent
PAGE = "---\ntype: procedure\ndescription: page {n}\n---\n# Page {n}\n\nStaging first ({n}, rev {rev}).\n"


def mem_command() -> list[str]:
    exe = shutil.which("mem")
    return [exe] if exe else [sys.executable, "-c", "from cli.app import main; main()"]


def build(root: Path, events: int) -> None:
    from projections.memory import Memory

    shutil.rmtree(root, ignore_errors=True)
    with Memory.init(root, "bench") as mem:
        for n in range(events):
            if n % 10 == 9:
                mem.always_add(f"Always rule {n}.")
            else:
                mem.write_page(f"page-{n % 40}", PAGE.format(n=n % 40, rev=n).encode(), f"rev {n}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--events", type=int, default=357)
    parser.add_argument("--importtime", action="store_true", help="Also print the slowest imports of `mem status`.")
    args = parser.parse_args()

    root = workdir("startup") / "ws"
    build(root, args.events)
    page = root.parent / "page.md"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEM_WORKSPACE": str(root)}
    env.pop("PYTHONWARNINGS", None)
    # An installed `mem` runs from cached bytecode; without it every run would time compiling mindlog.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    mem = mem_command()
    revs = iter(range(10**9))

    def page_write() -> list[str]:
        page.write_text(PAGE.format(n=0, rev=f"bench {next(revs)}"))
        return [*mem, "page", "write", "page-0", "--file", str(page), "--note", "bench"]

    cases = {
        "python -c pass": lambda: [sys.executable, "-c", "pass"],
        "python -c 'import typer'": lambda: [sys.executable, "-c", "import typer"],
        "mem --version": lambda: [*mem, "--version"],
        "mem status": lambda: [*mem, "status"],
        "mem show mind.md": lambda: [*mem, "show", "mind.md"],
        "mem page write": page_write,
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for command in cases.values():  # warm-up: writes the bytecode caches
        subprocess.run(command(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(args.runs):
        for name, command in cases.items():
            argv = command()
            start = time.perf_counter()
            done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            samples[name].append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"{name} failed: {done.stderr.decode()}")

    floor = statistics.median(samples["python -c pass"])
    rows = [("command", "median ms", "p90 ms", "x python -c pass")]
    for name, times in samples.items():
        ordered = sorted(times)
        median = statistics.median(ordered)
        rows.append((name, f"{median * 1000:.1f}", f"{ordered[int(len(ordered) * 0.9)] * 1000:.1f}",
                     f"{median / floor:.2f}"))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    table(f"start-up, {args.runs} interleaved runs each, {args.events} events in the workspace, load average {load} "
          f"(target: under 80 ms where python -c pass is ~20 ms, i.e. < 4x)", rows)

    if args.importtime:
        trace = subprocess.run([sys.executable, "-X", "importtime", "-c", "from cli.app import main; main()",
                                "status"], env=env, capture_output=True).stderr.decode().splitlines()
        cumulative = []
        for line in trace:
            if line.startswith("import time:") and "|" in line and "cumulative" not in line:
                _self, total, name = line[12:].split("|")
                if not name.startswith("  "):
                    cumulative.append((int(total), name.strip()))
        table("mem status: top-level imports by cumulative time",
              [("module", "ms")] + [(name, f"{us / 1000:.1f}") for us, name in sorted(cumulative)[::-1][:15]])


if __name__ == "__main__":
    main()
