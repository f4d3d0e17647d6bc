"""`mem demo`: one agent through ingest, update, Always edits, delete, replay, `show --at`, its loop,
a compaction and a citation resolved through the audit."""

import shutil
import tempfile
import time
from pathlib import Path

import typer

from eventstore.instants import format_instant
from projections.memory import Memory
from projections import audit as auditing
from projections.replay import check, replay

DEPLOY_V1 = b"""---
type: procedure
description: staging first, then prod
sources:
  - adf-audit://seq/3
---
# Deploy procedure

Deploy to staging first, always. [S3]
"""

DEPLOY_V2 = b"""---
type: procedure
description: staging first, prod needs an owner ack
status: current
sources:
  - adf-audit://seq/3
  - adf-audit://seq/9
---
# Deploy procedure

Deploy to staging first, always. [S3]
Prod deploys need an explicit owner ack. [S9]
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
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mem-demo-"))
    try:
        _run(root)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            typer.echo(f"\nworkspace kept at {root}")


def _run(root: Path) -> None:
    step(f"mem init --agent artemis   (in {root})")
    mem = Memory.init(root, "artemis")

    step("mem page write deploy-procedure   (ingest)")
    seq = mem.write_page("deploy-procedure", DEPLOY_V1, "Learned from the 08-12 deploy. [S3]")
    typer.echo(f"seq {seq}: ingest mind/deploy-procedure.md")
    mem.write_page("monitor-agent", MONITOR, "First notes on the monitor agent.")
    typer.echo("ingest mind/monitor-agent.md")

    step("mem always add")
    for line in ("Nothing from me on weekends unless it's urgent. They want their time off.",
                 "Prod deploys wait for the owner's ack. The 08-12 incident came from skipping it."):
        mem.always_add(line)
        typer.echo(f"always + {line}")
    before_update = mem.log.recorded_at(mem.log.head())
    time.sleep(0.01)

    step("mem page write deploy-procedure   (update)")
    mem.write_page("deploy-procedure", DEPLOY_V2, "Prod ack requirement added after the 08-12 incident. [S9]")
    show_file(root, "mind/deploy-procedure.md")

    step("mem always remove 2 ; mem page delete monitor-agent")
    mem.always_remove(2)
    mem.delete_page("monitor-agent", "Merged into the team page.")
    show_file(root, "mind.md")
    show_file(root, "mind/log.md")

    step("mem log")
    for event in mem.log.read():
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
        seq = mem.loop_append(role, [{"type": "text", "text": text}])
        typer.echo(f"[S{seq}] {role}: {text}")
    ack_seq = seq - 1
    seq = mem.loop_compact(f"Staging failed, rolled back; prod needs the owner's ack [S{ack_seq}].", preserve=1)
    for row in auditing.loop_rows(mem.views):
        typer.echo(f"[S{row.seq}] {row.role}: {row.text()}")
    for row in auditing.audit_rows(mem.views):
        typer.echo(f"audit {row.id}: {row.source} seq {row.start_seq}..{row.end_seq}, {row.entry_count} entries, "
                   f"{row.size_bytes} bytes of JSON, brotli")

    step(f"mem cite [S{ack_seq}]   (compacted away: resolved through the audit blob)")
    hit = auditing.cite(mem.views, mem.log, f"[S{ack_seq}]").hit
    typer.echo(f"source {hit.source}, audit id {hit.audit_id}, loop {hit.loop}: "
               f"{hit.entry['role']}: {hit.entry['content_json'][0]['text']}")

    verified = mem.log.verify()
    step("mem verify")
    typer.echo(f"ok: {verified.checked} events, digests and chain intact" if verified.ok else verified.problem)
    mem.close()
