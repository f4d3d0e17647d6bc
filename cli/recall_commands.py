"""`mem search`: finding things in memory, now or as of any moment, with the trust fields applied."""

from typing import Optional

import typer

from eventstore.ids import now_ms
from eventstore.instants import parse_instant
from projections import search as searching
from projections import trust

from .app import AtOpt, JsonOpt, SeqOpt, app, fail, memory
from .output import emit_json


def moment(mem, at: Optional[str], seq: Optional[int]) -> tuple[int | None, str]:
    """(as_of seq or None for now, the day staleness is judged on): the moment's own day, else today."""
    if at is not None and seq is not None:
        fail("give --at or --seq, not both", 2)
    if at is not None:
        at_ms = parse_instant(at)
        return mem.seq_at(at_ms), trust.day_of(at_ms)
    if seq is not None:
        point = mem.seq_at(seq=seq)
        event = mem.log.get_by_seq(point) if point else None
        return point, trust.day_of(event.ts if event else 0)
    return None, trust.day_of(now_ms())


@app.command()
def search(query: str,
           layer: Optional[list[str]] = typer.Option(None, "--layer", help="Only this layer: mind, loop, file, "
                                                     "or a shared layer (repeatable)."),
           type_: Optional[list[str]] = typer.Option(None, "--type", help="Only this page or entry type, "
                                                     "or loop role (repeatable)."),
           kind: Optional[list[str]] = typer.Option(None, "--kind", help="page, shared-page, entry, loop, file."),
           agent: Optional[str] = typer.Option(None, "--agent", help="Only what this agent wrote."),
           status: Optional[str] = typer.Option(None, "--status", help="Only pages with this status (a prefix)."),
           all_: bool = typer.Option(False, "--all", help="Include superseded, deprecated and archived material."),
           at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt,
           n: int = typer.Option(10, "-n", help="How many hits."), json: bool = JsonOpt):
    """Full-text search (BM25) over pages, shared layers, entries, the loop and files, as of any moment."""
    for k in kind or ():
        if k not in searching.KINDS:
            fail(f"--kind must be one of {', '.join(searching.KINDS)}, not {k!r}", 2)
    with memory() as mem:
        as_of, day = moment(mem, at, seq)
        hits = searching.search(mem.views, query, as_of=as_of, day=day, kinds=kind or (), layers=layer or (),
                                types=type_ or (), agent=agent, self_agent=mem.config.agent, status=status,
                                include_all=all_, limit=n)
    if json:
        return emit_json(hits)
    for number, hit in enumerate(hits, 1):
        status_text = f" · status: {hit.status}" if hit.status else ""
        flags = f" · FLAGGED: {', '.join(hit.flags)}" if hit.flags else ""
        typer.echo(f"{number:>2}. {hit.title} — {hit.path} ({hit.kind}{status_text}){flags}\n"
                   f"    cite {hit.citation}\n    {hit.snippet}")
    if not hits:
        typer.echo("no matches")
