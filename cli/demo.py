"""`mem demo`: one agent through ingest, update, Always edits, delete, replay, `show --at`, its loop,
a compaction and a citation resolved through the audit."""

import contextlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

from eventstore.errors import InvalidInput
from eventstore.ids import now_ms
from eventstore.instants import format_instant
from eventstore.workspace import current_directory
from projections.memory import Memory

DEPLOY_V1 = b"""---
type: procedure
description: staging first, then prod
sources:
  - adf-file://imported/runbooks/deploy.md
---
# Deploy procedure

Deploy to staging first, always.
"""

DEPLOY_V2 = b"""---
type: procedure
description: staging first, prod needs an owner ack
status: current
stale_after: 2027-06-01
sources:
  - adf-file://imported/runbooks/deploy.md
---
# Deploy procedure

Deploy to staging first, always.
Prod deploys need an explicit owner ack (the 08-12 incident).
"""

MONITOR = b"""---
type: person
description: the monitor agent, slow on weekends
---
# Monitor agent

Prefers batch queries.
"""


INTRO = ("An event log keeps every change to this memory as an event that is only ever appended, never "
         "rewritten; the files an agent reads (mind.md, the pages) are rebuilt from it. So you can read the "
         "memory as it was at any moment, see who changed what and why, and merge several agents' work "
         "without losing any of it.")
TERMS = {
    "seq": "seq N is the event's position in this workspace's log: each change is one event, numbered in order.",
    "audit blob": "an audit blob holds the loop messages a compaction removed, compressed, so that a "
                  "citation of them still resolves.",
    "contract": "the contract lists the shared layers, who may write each (producers) and who reads it "
                "(consumers); applying it is itself an event on the hub.",
    "hub position": "a hub position counts the events a hub has received, in its order; an agent's "
                    "position says how far it has pulled.",
    "token": "the token is written once, to a file only its owner can read: the hub keeps only its hash.",
    "remote": "a remote is a hub this workspace syncs with: `mem sync` pushes this agent's events in the "
              "layers it produces and pulls those it consumes.",
    "heads": "two agents changed the same shared page without seeing each other's version: both versions "
             "stay (two heads) and every replica shows the same winner until someone resolves them.",
}


def step(title: str) -> None:
    typer.secho(f"\n== {title}", bold=True)


def explain(term: str, told: set[str]) -> None:
    """Says what a term means the first time the demo shows it."""
    if term not in told:
        told.add(term)
        typer.echo(f"   ({TERMS[term]})")


def show_file(root: Path, path: str) -> None:
    typer.echo(f"--- {path}")
    typer.echo((root / path).read_text().rstrip("\n"))


def mem_cli(root: Path | None, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    """Runs a real `mem` command in this process, shown as typed (`root` is passed as `-w`, unshown): what
    follows is what the command prints, on stdout and stderr, which is also returned."""
    from .app import app, register_commands

    register_commands()
    typer.secho(f"\n$ mem {shlex.join(args)}", bold=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = app(args=[*(["-w", str(root)] if root else []), *args], standalone_mode=False)
    sys.stdout.write(out.getvalue())
    if (code if isinstance(code, int) else 0) not in codes:
        raise InvalidInput(f"mem {shlex.join(args)} failed ({code})")
    return out.getvalue()


def run_demo(keep: Path | None = None) -> None:
    current_directory()  # a deleted cwd is refused before anything is made (the team's part comes back to it)
    if keep and Path(keep).exists() and not Path(keep).is_dir():
        raise InvalidInput(f"{keep} is a file; `mem demo --keep` needs a new or empty directory")
    if keep and Path(keep).exists() and any(Path(keep).iterdir()):
        raise InvalidInput(f"{keep} is not empty; `mem demo --keep` needs a new or empty directory")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mem-demo-"))
    told: set[str] = set()
    typer.echo(INTRO)
    try:
        _run(root / "artemis", told)
        _run_team(root / "team", told)
        typer.echo("\nthat was the demo: the README goes on from here (a hub of your own, the MCP server, `mem ui`)")
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            typer.echo(f"\nworkspace kept at {root}")


def _run(root: Path, told: set[str]) -> None:
    inputs = root.parent / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for name, text in (("deploy-v1.md", DEPLOY_V1), ("deploy-v2.md", DEPLOY_V2), ("monitor.md", MONITOR)):
        (inputs / name).write_bytes(text)
    root.mkdir(parents=True)
    mem_cli(root, "init", "--agent", "artemis")
    mem_cli(root, "page", "write", "deploy-procedure", "--file", str(inputs / "deploy-v1.md"),
            "--note", "Distilled from the deploy runbook.")
    explain("seq", told)
    mem_cli(root, "page", "write", "monitor-agent", "--file", str(inputs / "monitor.md"),
            "--note", "First notes on the monitor agent.")
    for line in ("Nothing from me on weekends unless it's urgent. They want their time off.",
                 "Prod deploys wait for the owner's ack. The 08-12 incident came from skipping it."):
        mem_cli(root, "always", "add", line)
    time.sleep(0.01)
    before_update = format_instant(now_ms())
    time.sleep(0.01)
    mem_cli(root, "page", "write", "deploy-procedure", "--file", str(inputs / "deploy-v2.md"),
            "--note", "Prod ack requirement added after the 08-12 incident.")
    mem_cli(root, "show", "deploy-procedure")
    mem_cli(root, "always", "remove", "2")
    mem_cli(root, "page", "delete", "monitor-agent", "--note", "Merged into the team page.")
    mem_cli(root, "show", "mind.md")
    mem_cli(root, "show", "mind/log.md")
    mem_cli(root, "log")

    step("delete every view and rebuild it from the log: the files come back byte for byte")
    mem_cli(root, "replay")
    mem_cli(root, "replay", "--check")
    step("the memory before the update")
    mem_cli(root, "show", "deploy-procedure", "--at", before_update)
    mem_cli(root, "show", "mind.md", "--at", before_update)

    step("the agent's loop (its conversation), compacted into a summary")
    for role, text in (("user", "The staging deploy failed on the migration."),
                       ("assistant", "Rolled back; the migration needs the new column first."),
                       ("user", "Then prod needs my ack before anything ships."),
                       ("assistant", "Understood: prod waits for your ack.")):
        mem_cli(root, "loop", "append", "--role", role, "--text", text)
    with Memory.open(root) as mem:
        ack_seq = mem.loop()[-1].seq - 1
    (inputs / "summary.md").write_text(f"Staging failed, rolled back; prod needs the owner's ack [S{ack_seq}].")
    mem_cli(root, "loop", "compact", "--summary-file", str(inputs / "summary.md"), "--preserve", "1")
    explain("audit blob", told)
    mem_cli(root, "loop", "show")
    mem_cli(root, "audit", "list")
    step("a citation of a compacted message still resolves, through the audit blob")
    mem_cli(root, "cite", f"[S{ack_seq}]")
    step("full-text search (BM25) over pages, the loop and its audit; --seq or --at searches the past")
    mem_cli(root, "search", "prod ack", "-n", "3")
    mem_cli(root, "search", "prod ack", "--seq", str(ack_seq - 1))
    mem_cli(root, "verify")


TEAM_CONTRACT = """
[layers.insights]
path = "memory/cross-domain-insights.md"
format = "entries"
producers = ["*"]
consumers = ["*"]

[layers.drafts]
path = "content/drafts/"
format = "pages"
producers = ["main", "writer"]
consumers = ["main", "writer", "research"]
"""


def _draft(text: str) -> bytes:
    return f"---\ntype: draft\ndescription: the launch announcement\n---\n# Launch post\n\n{text}\n".encode()


def start_hub(db: str) -> tuple[subprocess.Popen, str]:
    """`mem serve` as its own process, as a user would run it in another terminal; returns it and its URL."""
    import httpx

    from sync.server import free_port

    port = free_port()
    args = ["serve", "--db", db, "--port", str(port)]
    typer.secho(f"\n$ mem {shlex.join(args)} &", bold=True)
    package_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    with open("hub.log", "w") as log:
        hub = subprocess.Popen([sys.executable, "-c", "from cli.app import main; main()", *args], env=env,
                               stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if hub.poll() is not None or time.monotonic() > deadline:
            hub.kill()
            raise InvalidInput(f"`mem serve` did not start: {Path('hub.log').read_text().strip()}")
        time.sleep(0.05)
    typer.echo(Path("hub.log").read_text().rstrip("\n"))
    return hub, url


def _run_team(root: Path, told: set[str]) -> None:
    root.mkdir(parents=True)
    names = ("main", "writer", "research")
    (root / "contract.toml").write_text(TEAM_CONTRACT.lstrip())
    for name, text in (("draft.md", "We launch on Tuesday."), ("main.md", "We launch on Tuesday at 10:00."),
                       ("writer.md", "We launch on Tuesday. Tell support first."),
                       ("resolved.md", "We launch on Tuesday at 10:00. Tell support first.")):
        (root / name).write_bytes(_draft(text))
    cwd = current_directory()
    os.chdir(root)  # the commands below name the hub, the workspaces and the files as a user in it would
    hub = None
    try:
        step("a hub on 127.0.0.1 for three agents, and its contract")
        show_file(root, "contract.toml")
        mem_cli(None, "hub", "init", "--db", "hub.db")
        mem_cli(None, "hub", "contract", "apply", "contract.toml", "--db", "hub.db")
        explain("contract", told)
        explain("hub position", told)
        for name in names:
            mem_cli(None, "hub", "agent", "add", name, "--token-file", f"{name}.token", "--db", "hub.db")
            explain("token", told)
        hub, url = start_hub("hub.db")
        for name in names:
            mem_cli(None, "-w", name, "init", "--agent", name)
            mem_cli(None, "-w", name, "remote", "add", "hub", url, "--token-file", f"{name}.token")
            explain("remote", told)

        def sync_all() -> None:
            for name in names:
                mem_cli(None, "-w", name, "sync")
            for name in names[:-1]:  # what the later agents pushed
                mem_cli(None, "-w", name, "pull")

        step("each agent adds an entry to the shared `insights` layer, then syncs")
        for name, text in (("research", "[FACT] The staging database is a nightly copy of prod"),
                           ("writer", "[LESSON] Announce after the deploy, never before"),
                           ("main", "[DECISION] Launch on Tuesday")):
            mem_cli(None, "-w", name, "entry", "add", "insights", text)
        sync_all()
        mem_cli(None, "-w", "research", "show", "memory/cross-domain-insights.md")

        step("a shared page edited by two agents at once")
        mem_cli(None, "-w", "writer", "page", "write", "launch", "--layer", "drafts", "--file", "draft.md")
        sync_all()
        mem_cli(None, "-w", "main", "page", "write", "launch", "--layer", "drafts", "--file", "main.md")
        mem_cli(None, "-w", "writer", "page", "write", "launch", "--layer", "drafts", "--file", "writer.md")
        sync_all()
        mem_cli(None, "-w", "research", "conflicts", codes=(1,))
        explain("heads", told)
        time.sleep(0.01)
        moment = format_instant(now_ms())
        time.sleep(0.01)

        step("main resolves it: one version whose parents are both heads")
        mem_cli(None, "-w", "main", "resolve", "drafts/launch", "--file", "resolved.md")
        sync_all()
        mem_cli(None, "-w", "research", "conflicts")
        mem_cli(None, "-w", "research", "show", "content/drafts/launch.md")

        step("before the resolution: what research read then, and what the hub had sent it")
        mem_cli(None, "-w", "research", "show", "content/drafts/launch.md", "--at", moment)
        mem_cli(None, "hub", "believed", "research", "--at", moment, "--db", "hub.db")
        explain("hub position", told)
    finally:
        os.chdir(cwd)
        if hub is not None:
            hub.terminate()
            hub.wait(timeout=10)
