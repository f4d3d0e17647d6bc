"""A tool call's latency through `mem mcp` (the MCP SDK's stdio client, a server in a subprocess) against the
same operation as a `mem` subprocess: `view` of a page against `mem show`, `str_replace` in a page (one
page.update event each) against `mem page write --file`. Both sides append the same events; the log runs
at the default durability (synchronous=FULL: each append waits for an fsync) and at NORMAL. The SDK's own
floor is measured too: a `ping` round trip over the same connection, which runs no tool at all; and the
same calls through the SDK's in-memory client (the server in this process, no transport) show what the
server itself spends, and a bare SQLite commit of one row at the same `synchronous`, timed between
those calls, shows what the disk alone costs an append then.

Usage: python bench/bench_mcp.py [--calls 300] [--processes 30] [--pages 50]
"""

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from common import table, workdir
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from cli.mcp_server import FileFlush, build_server
from eventstore.workspace import Workspace, WorkspaceConfig
from projections.memory import Memory

REPO = Path(__file__).resolve().parent.parent
PAGE = "---\ntype: procedure\ndescription: page {n}\n---\n# Page {n}\n\nStaging first, then prod ({n}).\nrev 0\n"


def mem_command() -> list[str]:
    exe = shutil.which("mem")
    return [exe] if exe else [sys.executable, "-c", "from cli.app import main; main()"]


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def timed_call(times: list[float], measure: bool, call):
    start = time.perf_counter()
    result = await call
    if measure:
        times.append(time.perf_counter() - start)
    if getattr(result, "is_error", False):
        raise RuntimeError(result.content[0].text)


class BareCommit:
    """The disk's floor for one append: a bare SQLite commit of one 300-byte row (WAL mode, the log's
    `synchronous`), timed between the tool calls so that both meet the same disk and the same load."""

    def __init__(self, root: Path, synchronous: str):
        path = root.parent / f"bare-{synchronous.lower()}.db"
        path.unlink(missing_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {synchronous}")
        self.db.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, body BLOB)")

    def __call__(self, times: list[float], measure: bool) -> None:
        start = time.perf_counter()
        self.db.execute("INSERT INTO t (body) VALUES (?)", (os.urandom(300),))
        if measure:
            times.append(time.perf_counter() - start)


async def calls_through(session, calls: int, times: dict[str, list[float]], first: int = 0, ping: bool = True,
                        bare: BareCommit | None = None):
    """`calls` rounds of (ping,) view and str_replace (and a bare commit) after 20 unmeasured ones; page-0's
    `rev N` line counts on."""
    for i in range(first, first + calls + 20):
        measure = i >= first + 20
        if ping:
            await timed_call(times["ping"], measure, session.send_ping())
        await timed_call(times["view"], measure, session.call_tool("view", {"path": "/memories/mind/page-0.md"}))
        await timed_call(times["str_replace"], measure, session.call_tool(
            "str_replace", {"path": "/memories/mind/page-0.md", "old_str": f"rev {i}\n", "new_str": f"rev {i + 1}\n"}))
        if bare:
            bare(times["bare"], measure)


def through_mcp(root: Path, calls: int) -> dict[str, list[float]]:
    command = mem_command()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp", "--workspace", str(root)], env=env)
    times: dict[str, list[float]] = {"ping": [], "view": [], "str_replace": []}

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await calls_through(session, calls, times)

    anyio.run(main)
    return times


def in_process(root: Path, calls: int, synchronous: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"ping": [], "view": [], "str_replace": [], "bare": []}

    async def main():
        with Memory.open(root) as mem:
            async with Client(build_server(mem)) as client:
                await calls_through(client.session, calls, times, first=calls + 20, ping=False,
                                    bare=BareCommit(root, synchronous))
                await anyio.sleep(FileFlush.QUIET * 2)  # the server writes the files once the calls pause

    anyio.run(main)
    return times


def through_cli(root: Path, runs: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    page = root.parent / "page.md"
    times: dict[str, list[float]] = {"view": [], "str_replace": []}
    for i in range(runs):
        for name, args in (("view", ["show", "mind/page-1.md"]), ("str_replace", ["page", "write", "page-1", "--file",
                                                                                    str(page)])):
            page.write_text(PAGE.format(n=1).replace("rev 0", f"rev {i + 1}"))
            start = time.perf_counter()
            subprocess.run([*mem_command(), *args, "--workspace", str(root)], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--processes", type=int, default=30)
    parser.add_argument("--pages", type=int, default=50)
    args = parser.parse_args()
    rows = [("synchronous", "operation", "mcp p50 ms", "mcp p99 ms", "mem subprocess p50 ms", "p99 ms",
             "subprocess ÷ mcp (p50)")]
    for synchronous in ("FULL", "NORMAL"):
        root = workdir("mcp") / f"ws-{synchronous.lower()}"
        shutil.rmtree(root, ignore_errors=True)
        Memory.init(root, "bench").close()
        Workspace(root).write_config(WorkspaceConfig(agent="bench", synchronous=synchronous))
        with Memory.open(root) as mem:
            for n in range(args.pages):
                mem.write_page(f"page-{n}", PAGE.format(n=n).encode())
        mcp, cli = through_mcp(root, args.calls), through_cli(root, args.processes)
        local = in_process(root, args.calls, synchronous)
        rows.append((synchronous, "ping (the SDK's floor)", *(f"{v:.2f}" for v in percentiles(mcp["ping"])), "", "",
                     ""))
        for name in ("view", "str_replace"):
            (m50, m99), (c50, c99) = percentiles(mcp[name]), percentiles(cli[name])
            rows.append((synchronous, name, f"{m50:.2f}", f"{m99:.2f}", f"{c50:.1f}", f"{c99:.1f}",
                         f"{c50 / m50:.0f}x"))
        for name in ("view", "str_replace"):
            rows.append((synchronous, f"{name}, in-process client", *(f"{v:.2f}" for v in percentiles(local[name])),
                         "", "", ""))
        rows.append((synchronous, "bare SQLite commit, between those calls", *(f"{v:.2f}" for v in percentiles(local["bare"])),
                     "", "", ""))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    table(f"tool call latency: {args.calls} calls through the stdio client, {args.processes} `mem` processes "
          f"({args.pages} pages); load average {load}", rows)


if __name__ == "__main__":
    main()
