"""`mem redact` and `mem hub redact`: remove event bodies from the log, keeping the chain."""

import sqlite3
from pathlib import Path
from typing import Optional

import typer

from eventstore.errors import MemError

from .app import JsonOpt, app, fail, memory
from .output import LEFT_ON_DISK, VIEWS_HOLD, emit_json, event_line, kept_by_hand, progress_bar, redacted_line
from .sync_commands import DbOpt, hub_app, mirror_dir, storage

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
    from sync.client import unsent

    if match == "":
        fail("--match needs a pattern (a regular expression)", 2)
    if bool(targets) == bool(match):
        fail("give seqs or ids, or --match REGEX", 2)
    with memory() as mem:
        if match:
            with progress_bar("match", mem.log.head()) as advance:
                found = redacting.search(mem, match, layer, progress=advance)
        else:
            found = redacting.resolve(mem, targets)
        report = redacting.redact(mem, found.events, reason, apply=not match or yes,
                                  apart=unsent(mem, found.events))
        listed = [event_line(e, texts=False) for e in found.events]
    for note in found.kept_notes() if match else found.notes():
        typer.echo(f"{'warning' if match else 'note'}: {note}", err=True)
    if report.left_on_disk:
        typer.echo(f"warning: {LEFT_ON_DISK}", err=True)
    if report.views_behind:
        typer.echo(f"warning: {VIEWS_HOLD}", err=True)
    if kept_by_hand(report):
        typer.echo(f"warning: {kept_by_hand(report)}", err=True)
    for note in report.stubs:
        typer.echo(f"note: {note}", err=True)
    if json:
        return emit_json(report)
    for line in listed:
        typer.echo(line)
    typer.echo(redacted_line(report, "add --yes to do it"))


@hub_app.command("redact")
def hub_redact(ids: list[str] = typer.Argument(..., help="Event ids."), reason: str = ReasonOpt, db: str = DbOpt,
               ui_dir: Optional[Path] = typer.Option(
                   None, "--ui-dir", help="The mirror of the hub's web pages, as `mem serve --ui-dir` was given it "
                                         "(default: next to a SQLite hub)."),
               json: bool = JsonOpt):
    """Redact events on the hub as its administrator; consumers remove the bodies on their next pull, and the mirror of
    the hub's web pages at once."""
    for id in ids:
        if id.isdigit():
            fail(f"{id} is a number, not an event id: the hub redacts by id (an agent's `mem log --json` shows "
                 "it, as the hub's pages do)", 2)
    if ui_dir is not None and not (ui_dir / ".mem").is_dir():
        fail(f"--ui-dir {ui_dir}: there is no mirror of the hub's pages there")
    hub = storage(db)
    try:
        results = hub.admin_redact(ids, reason)
        _scrub_mirror(hub, ui_dir or (None if "://" in db else mirror_dir(db)))
    finally:
        hub.close()
    if json:
        return emit_json(results)
    for result in results:
        typer.echo(f"redaction at hub position {result.position}")


def _scrub_mirror(hub, root: Path | None) -> None:
    """Brings the mirror of the hub's pages (when there is one) up to date with the redaction, so that it no longer
    holds the text either (`HubMirror.scrub`), whether or not `mem serve` runs or a page is ever opened."""
    from sync.mirror import HubMirror

    if root is None or not (root / ".mem").is_dir():
        return
    try:
        mirror = HubMirror(hub, root)
        try:
            mirror.scrub()
        finally:
            mirror.close()
    except (MemError, OSError, sqlite3.Error) as exc:  # the redaction is done: what is left is said, not raised
        typer.echo(f"warning: the mirror of the hub's pages at {root} could not copy the redaction ({exc}): it still "
                   "holds the text until `mem serve` shows a page", err=True)
