"""`mem redact` and `mem hub redact`: remove event bodies from the log, keeping the chain."""

from typing import Optional

import typer

from .app import JsonOpt, app, fail, memory
from .output import LEFT_ON_DISK, emit_json, event_line, kept_by_hand, redacted_line
from .sync_commands import DbOpt, hub_app, storage

ReasonOpt = typer.Option(..., "--reason", help="Why: what a redacted version reads instead (\\[redacted: REASON]).")


@app.command()
def redact(targets: Optional[list[str]] = typer.Argument(None, help="Seqs or event ids (an entry's by its start, as its file shows it)."),
           reason: str = ReasonOpt,
           match: Optional[str] = typer.Option(None, "--match", help="Every event whose text matches this regex."),
           layer: Optional[str] = typer.Option(None, "--layer", help="With --match: only this layer."),
           yes: bool = typer.Option(False, "--yes", help="With --match: redact what it lists."),
           json: bool = JsonOpt):
    """Remove events' bodies from the log and rebuild every view and file without them."""
    from projections import redact as redacting

    if match == "":
        fail("--match needs a pattern (a regular expression)", 2)
    if bool(targets) == bool(match):
        fail("give seqs or ids, or --match REGEX", 2)
    with memory() as mem:
        events = redacting.search(mem, match, layer) if match else redacting.resolve(mem, targets)
        report = redacting.redact(mem, events, reason, apply=not match or yes)
        listed = [event_line(e) for e in events]
    if report.left_on_disk:
        typer.echo(f"warning: {LEFT_ON_DISK}", err=True)
    if kept_by_hand(report):
        typer.echo(f"warning: {kept_by_hand(report)}", err=True)
    if json:
        return emit_json(report)
    for line in listed:
        typer.echo(line)
    typer.echo(redacted_line(report, "add --yes to do it"))


@hub_app.command("redact")
def hub_redact(ids: list[str] = typer.Argument(..., help="Event ids."), reason: str = ReasonOpt, db: str = DbOpt,
               json: bool = JsonOpt):
    """Redact events on the hub as its administrator; consumers remove the bodies on their next pull."""
    for id in ids:
        if id.isdigit():
            fail(f"{id} is a number, not an event id: the hub redacts by id (an agent's `mem log --json` shows "
                 "it, as the hub's pages do)", 2)
    hub = storage(db)
    try:
        results = hub.admin_redact(ids, reason)
    finally:
        hub.close()
    if json:
        return emit_json(results)
    for result in results:
        typer.echo(f"redaction at hub position {result.position}")
