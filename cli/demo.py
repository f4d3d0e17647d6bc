"""`mem demo`: one agent through ingest, update, Always edits, delete, replay, `show --at`, its loop,
a compaction and a citation resolved through the audit."""

import shlex
import shutil
import tempfile
import time
from pathlib import Path

import typer

from eventstore.errors import InvalidInput
from eventstore.ids import now_ms
from eventstore.instants import format_instant
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
    "audit blob": "an audit blob holds the loop messages a compaction removed, compressed, so that a "
                  "citation of them still resolves.",
    "hub position": "a hub position counts the events a hub has received, in its order; an agent's "
                    "position says how far it has pulled.",
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


def mem_cli(root: Path, *args: str) -> None:
    """Runs a real `mem` command in this process, shown as typed: what follows is the CLI's own output."""
    from .app import app, register_commands

    register_commands()
    typer.secho(f"\n$ mem {shlex.join(args)}", bold=True)
    code = app(args=["-w", str(root), *args], standalone_mode=False)
    if isinstance(code, int) and code != 0:
        raise InvalidInput(f"mem {shlex.join(args)} failed ({code})")


def run_demo(keep: Path | None = None) -> None:
    if keep and Path(keep).exists() and (not Path(keep).is_dir() or any(Path(keep).iterdir())):
        raise InvalidInput(f"{keep} is not empty; `mem demo --keep` needs a new or empty directory")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mem-demo-"))
    told: set[str] = set()
    typer.echo(INTRO)
    try:
        _run(root / "artemis", told)
        _run_team(root / "team", told)
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


def _run_team(root: Path, told: set[str]) -> None:
    from sync.client import HubClient, Remote, pull, push
    from sync.contracts import parse_contract
    from sync.server import BackgroundHub
    from sync.storage import open_storage

    root.mkdir(parents=True)
    step("a hub on 127.0.0.1, three agents, one contract   (mem hub agent add / contract apply / serve)")
    hub_db = str(root / "hub.db")
    admin = open_storage(hub_db)
    admin.apply_contract(parse_contract(TEAM_CONTRACT))
    names = ("main", "writer", "research")
    tokens = {name: admin.add_agent(name) for name in names}
    admin.close()
    hub = BackgroundHub(hub_db).start()
    typer.echo(f"hub at {hub.url}; insights: everyone writes and reads; drafts: main and writer write")
    team = {name: Memory.init(root / name, name) for name in names}
    clients = {name: HubClient(hub.url, tokens[name]) for name in names}
    remote = Remote(name="hub", url=hub.url, token_file="-")

    def sync_all(rounds: int = 2) -> None:
        for _ in range(rounds):
            for name in names:
                push(team[name], remote, clients[name])
            for name in names:
                pull(team[name], remote, clients[name])

    try:
        sync_all(1)
        step("mem entry add insights ...   (each agent, then mem sync)")
        for name, text in (("research", "[FACT] The staging database is a nightly copy of prod"),
                           ("writer", "[LESSON] Announce after the deploy, never before"),
                           ("main", "[DECISION] Launch on Tuesday")):
            team[name].entry_add("insights", text)
            typer.echo(f"{name}: {text}")
        sync_all()
        insights = "memory/cross-domain-insights.md"
        show_file(team["research"].root, insights)
        same = len({(team[n].root / insights).read_bytes() for n in names}) == 1
        typer.echo(f"byte-identical in all three workspaces: {same}")

        step("a shared page edited by two agents at once   (mem page write launch --layer drafts)")
        team["writer"].shared_page_write("drafts", "launch", _draft("We launch on Tuesday."))
        sync_all()
        team["main"].shared_page_write("drafts", "launch", _draft("We launch on Tuesday at 10:00."))
        team["writer"].shared_page_write("drafts", "launch", _draft("We launch on Tuesday. Tell support first."))
        sync_all()
        time.sleep(0.01)
        moment = now_ms()
        time.sleep(0.01)
        for name in names:
            for c in team[name].conflicts():
                typer.echo(f"{name} sees drafts/{c.slug}: {len(c.heads)} heads, winner {c.winner[:18]}")

        step("mem resolve drafts/launch   (main writes an update whose parents are both heads)")
        team["main"].resolve("drafts", "launch", _draft("We launch on Tuesday at 10:00. Tell support first."))
        sync_all()
        for name in names:
            left = team[name].conflicts()
            text = (team[name].root / "content/drafts/launch.md").read_text().splitlines()[-1]
            typer.echo(f"{name}: {len(left)} conflicts; launch.md ends: {text}")

        step(f"what each agent believed at {format_instant(moment)}   (mem believed / mem hub believed)")
        for name in names:
            seq = team[name].seq_at(moment)
            lines = [line for line in (team[name].show(insights, seq) or "").splitlines() if line.startswith("[")]
            page = team[name].show("content/drafts/launch.md", seq) or ""
            typer.echo(f"{name} (seq {seq}): {len(lines)} insights; launch.md then: {page.splitlines()[-1]}")
        for name in names:
            typer.echo(f"hub: {name} had acknowledged hub events up to position "
                       f"{hub.storage.received_by(name, moment)} by then")
            explain("hub position", told)
    finally:
        for client in clients.values():
            client.close()
        for memory in team.values():
            memory.close()
        hub.stop()
