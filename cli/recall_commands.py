"""`mem search`, `believed`, `lint`, `layer`: reading memory with the trust fields applied, now or then."""

from typing import Optional

import typer

from eventstore.ids import now_ms
from projections import search as searching
from projections import trust

from .app import AtOpt, JsonOpt, SeqOpt, app, fail, memory, resolve_at, said_on_stderr
from .output import emit_json, listing, one_line


def moment(mem, at: Optional[str], seq: Optional[int], say=said_on_stderr) -> tuple[int | None, str]:
    """(as_of seq or None for now, the day staleness is judged on): the moment's own day, else today.
    `say` is told which instant a typed moment was understood as."""
    if at is not None and seq is not None:
        fail("give --at or --seq, not both", 2)
    if at is not None:
        point, at_ms = resolve_at(mem, at, say)
        return point, trust.day_of(at_ms)
    if seq is not None:
        point = mem.seq_at(seq=seq)
        event = mem.event(point) if point else None
        return point, trust.day_of(event.ts if event else 0)
    return None, trust.day_of(now_ms())


@app.command()
def search(query: str,
           layer: Optional[list[str]] = typer.Option(None, "--layer", help="Only this layer: mind, loop, agent (files), "
                                                     "or a shared layer (repeatable)."),
           type_: Optional[list[str]] = typer.Option(None, "--type", help="Only this page or entry type, "
                                                     "or loop role (repeatable)."),
           kind: Optional[list[str]] = typer.Option(None, "--kind", help=f"{', '.join(searching.KINDS)}."),
           agent: Optional[str] = typer.Option(None, "--agent", help="Only what this agent wrote."),
           status: Optional[str] = typer.Option(None, "--status", help="Only pages whose status starts with this "
                                                "(free-form, as the ADF guide has it: current, draft, superseded-by: x, "
                                                "...), withheld ones too. A status no page ever had is refused."),
           all_: bool = typer.Option(False, "--all", help="Include superseded, deprecated and archived material."),
           at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt,
           n: int = typer.Option(10, "-n", help="How many hits."), json: bool = JsonOpt):
    """Full-text search (BM25) over pages, shared layers, entries, the loop, files and Always lines, as of any moment.
    Every word must appear ("quoted phrases" too); OR, NOT, -word and prefix* are words like the others, not
    operators. A query that starts with - follows --: `mem search -- -word`."""
    for k in kind or ():
        if k not in searching.KINDS:
            fail(f"--kind must be one of {', '.join(searching.KINDS)}, not {k!r}", 2)
    with memory() as mem:
        as_of, day = moment(mem, at, seq)
        hits = mem.search(query, as_of=as_of, day=day, kinds=kind or (), layers=layer or (), types=type_ or (),
                          agent=agent, status=status, include_all=all_, limit=n)
    if json:
        return emit_json(hits)
    for number, hit in enumerate(hits, 1):
        status_text = f" · status: {hit.status}" if hit.status else ""
        flags = f" · FLAGGED: {', '.join(hit.flags)}" if hit.flags else ""
        title = f"{hit.citation} {hit.title}" if hit.kind == "loop" else hit.title
        typer.echo(f"{number:>2}. {title} — {hit.path} ({hit.kind}{status_text}){flags}\n"
                   f"    cite {hit.citation}\n    {hit.snippet}")
    if not hits:
        hint = searching.operators_hint(query)
        typer.echo(f"no matches ({hint})" if hint else "no matches")


@app.command()
def believed(at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt,
             last: int = typer.Option(10, "--last", help="How many loop messages."),
             all_: bool = typer.Option(False, "--all", help="Include superseded, deprecated and archived pages."),
             json: bool = JsonOpt):
    """What the agent had in front of it at a moment: mind.md, its pages, the loop's last messages."""
    with memory() as mem:
        as_of, day = moment(mem, at, seq)
        result = mem.believed(mem.seq_at() if as_of is None else as_of, last, include_all=all_, day=day)
        local = {layer["path"] for layer in mem.layers() if layer["local"]}
    if json:
        return emit_json(result)
    typer.echo(f"as of seq {result.seq}\n\n{result.mind}")
    pages = [p["slug"] + (f" ({p['flags']})" if p["flags"] else "") for p in result.pages]
    typer.echo(f"pages: {', '.join(pages) or '(none)'}")
    if result.kept_aside:
        typer.echo(f"kept aside by an import, not loaded (`mem show PATH` reads one): {', '.join(result.kept_aside)}")
    typer.echo(f"\nloop (last {last}):" + ("" if result.loop else " (none)"))
    loops = len({row.loop for row in result.loop}) > 1
    for row in result.loop:
        typer.echo(f"[S{row.seq}] {f'{row.loop} ' if loops else ''}{row.role}: {row.text()}")
    for path, text in result.shared.items():
        typer.echo(f"\n{'local' if path in local else 'shared'} {path}:\n{text.rstrip()}")


@app.command()
def lint(check: Optional[list[str]] = typer.Option(None, "--check", help="Run only this check (repeatable): "
                                                   "contradictions, stale, sources, one-off-types, dead-links, "
                                                   "citations, orphans, budget."),
         citations: bool = typer.Option(False, "--citations", help="Same as --check citations --check dead-links."),
         judge: Optional[str] = typer.Option(None, "--judge", help="A command that rules on candidate pairs "
                                             "(JSON on stdin; a first line starting `contradiction` is a finding)."),
         judge_timeout: int = typer.Option(120, "--judge-timeout", help="Seconds the judge may take over one pair."),
         judge_pairs: int = typer.Option(50, "--judge-pairs", help="How many candidate pairs the judge rules on "
                                         "(those sharing the most terms first)."),
         record: bool = typer.Option(False, "--record", help="Append one lint entry to mind/log.md."),
         at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """The maintenance checklist: every check by default; exit 1 when anything this agent can change is found."""
    from projections import lint as linting

    names = list(check or []) + (["citations", "dead-links"] if citations else [])
    if record and (at is not None or seq is not None):
        fail("--record appends today's lint to mind/log.md: a lint as of another moment is not recorded as today's "
             "(drop --at/--seq, or --record)", 2)
    with memory() as mem:
        as_of, day = moment(mem, at, seq)
        report = linting.lint(mem, names or None, mem.seq_at() if as_of is None else as_of, day, judge,
                              judge_timeout, judge_pairs)
        if record:
            linting.record(mem, report)
    if json:
        emit_json(report)
    else:
        for line in report.lines():
            typer.echo(one_line(line))  # a file named with a line break stays on its finding's line (nc30a)
        typer.echo(report.summary())
        if report.recorded is not None:
            typer.echo(f"recorded in mind/log.md (seq {report.recorded})")
    raise typer.Exit(1 if report.to_mend() else 0)


layer_app = typer.Typer(help="Local layers: typed-entry files (or page folders) of this agent alone, no hub needed.",
                        no_args_is_help=True)
app.add_typer(layer_app, name="layer")


@layer_app.command("add")
def layer_add(name: str, path: str,
              format: str = typer.Option("entries", "--format", help="entries (one file) or pages (a folder/).")):
    """Declare a local layer (a config event): `mem layer add decisions memory/decisions.md`."""
    with memory() as mem:
        event = mem.declare_layer(name, path, format)
    typer.echo(f"layer {name} -> {path} ({format}, seq {event.seq})")


@layer_app.command("list")
def layer_list(json: bool = JsonOpt):
    """Every layer this workspace renders: the hub's (as last pulled) and its own."""
    with memory() as mem:
        rows = mem.layers()
    listing(rows, json, lambda row: f"{row['layer']:<20} {row['path']:<36} {row['format']:<8} {_role(row)}",
            "no layers: a hub's layers come with `mem pull`, and `mem layer add` makes a local one")


def _role(row: dict) -> str:
    """Whose a listed layer is and what this agent does with it: a hub's layer it neither produces nor consumes is
    listed like the others, and its listings hold nothing of the hub's (nc22a)."""
    if row["local"]:
        return "local"
    if row.get("not_taken"):
        return "hub, not taken here (`mem status` says why)"
    does = [verb for verb, done in (("consumes", row["consumes"]), ("produces", row["produces"])) if done]
    if does:
        return f"hub, this agent {' and '.join(does)}"
    return "hub, not this agent's (it neither produces nor consumes it)"
