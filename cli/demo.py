"""`mem demo`: one agent through ingest, update, Always edits, delete, replay, `show --at`, its loop,
a compaction and a citation resolved through the audit."""

import shutil
import tempfile
import time
from pathlib import Path

import typer

from eventstore.errors import InvalidInput
from eventstore.ids import now_ms
from eventstore.instants import format_instant
from projections.memory import Memory
from projections.replay import check, replay

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


def step(title: str) -> None:
    typer.secho(f"\n== {title}", bold=True)


def show_file(root: Path, path: str) -> None:
    typer.echo(f"--- {path}")
    typer.echo((root / path).read_text().rstrip("\n"))


def run_demo(keep: Path | None = None) -> None:
    if keep and Path(keep).exists() and (not Path(keep).is_dir() or any(Path(keep).iterdir())):
        raise InvalidInput(f"{keep} is not empty; `mem demo --keep` needs a new or empty directory")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mem-demo-"))
    try:
        _run(root / "artemis")
        _run_team(root / "team")
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            typer.echo(f"\nworkspace kept at {root}")


def _run(root: Path) -> None:
    step(f"mem init --agent artemis   (in {root})")
    mem = Memory.init(root, "artemis")

    step("mem page write deploy-procedure   (ingest)")
    event = mem.write_page("deploy-procedure", DEPLOY_V1, "Distilled from the deploy runbook.")
    typer.echo(f"seq {event.seq}: ingest mind/deploy-procedure.md")
    mem.write_page("monitor-agent", MONITOR, "First notes on the monitor agent.")
    typer.echo("ingest mind/monitor-agent.md")

    step("mem always add")
    for line in ("Nothing from me on weekends unless it's urgent. They want their time off.",
                 "Prod deploys wait for the owner's ack. The 08-12 incident came from skipping it."):
        mem.always_add(line)
        typer.echo(f"always + {line}")
    before_update = now_ms()
    time.sleep(0.01)

    step("mem page write deploy-procedure   (update)")
    mem.write_page("deploy-procedure", DEPLOY_V2, "Prod ack requirement added after the 08-12 incident.")
    show_file(root, "mind/deploy-procedure.md")

    step("mem always remove 2 ; mem page delete monitor-agent")
    mem.always_remove(2)
    mem.delete_page("monitor-agent", "Merged into the team page.")
    show_file(root, "mind.md")
    show_file(root, "mind/log.md")

    step("mem log")
    for event in mem.events():
        typer.echo(f"{event.seq:>3}  {event.kind:<14} {getattr(event.body, 'slug', getattr(event.body, 'line', ''))}")

    step("mem replay   (delete every view, rebuild from the log)")
    report = replay(mem)
    typer.echo(f"replayed {report.events} events; files rewritten: {len(report.files.written)} "
               "(none: the rebuild is byte-identical)")
    typer.echo(f"mem replay --check: {'no differences' if check(mem).same else 'DIFFERENT'}")

    at = format_instant(before_update)
    step(f"mem show mind/deploy-procedure.md --at {at}   (before the update)")
    typer.echo(mem.show("mind/deploy-procedure.md", mem.seq_at(before_update)).rstrip("\n"))
    step(f"mem show mind.md --at {at}")
    typer.echo(mem.show("mind.md", mem.seq_at(before_update)).rstrip("\n"))

    step("mem loop append ×4 ; mem loop compact --preserve 1")
    for role, text in (("user", "The staging deploy failed on the migration."),
                       ("assistant", "Rolled back; the migration needs the new column first."),
                       ("user", "Then prod needs my ack before anything ships."),
                       ("assistant", "Understood: prod waits for your ack.")):
        seq = mem.loop_append(role, [{"type": "text", "text": text}]).seq
        typer.echo(f"[S{seq}] {role}: {text}")
    ack_seq = seq - 1
    mem.loop_compact(f"Staging failed, rolled back; prod needs the owner's ack [S{ack_seq}].", preserve=1)
    for row in mem.loop():
        typer.echo(f"[S{row.seq}] {row.role}: {row.text()}")
    for row in mem.audit_rows():
        typer.echo(f"audit {row.id}: {row.source} seq {row.start_seq}..{row.end_seq}, {row.entry_count} entries, "
                   f"{row.size_bytes} bytes of JSON, brotli")

    step(f"mem cite [S{ack_seq}]   (compacted away: resolved through the audit blob)")
    hit = mem.cite(f"[S{ack_seq}]").hit
    typer.echo(f"source {hit.source}, audit id {hit.audit_id}, loop {hit.loop}: "
               f"{hit.entry['role']}: {hit.entry['content_json'][0]['text']}")

    step("mem search \"prod ack\"   (FTS5/BM25 over pages, the loop and its audit; --at searches the past)")
    from projections import trust

    today = trust.day_of(now_ms())
    for hit in mem.search("prod ack", day=today, limit=3):
        typer.echo(f"{hit.citation:<40} {hit.path:<44} {hit.snippet[:70]}")
    typer.echo(f"as of seq {ack_seq - 1}: "
               f"{[h.citation for h in mem.search('prod ack', as_of=ack_seq - 1, day=today)]}")

    verified = mem.verify()
    step("mem verify")
    typer.echo(f"ok: {verified.checked} events, digests and chain intact" if verified.ok else verified.problem)
    mem.close()


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


def _run_team(root: Path) -> None:
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
    finally:
        for client in clients.values():
            client.close()
        for memory in team.values():
            memory.close()
        hub.stop()
