"""`mem serve`, `mem hub ...`, `mem remote add`, `push`, `pull`, `sync`, `entry`, `conflicts`, `resolve`."""

import sys
from pathlib import Path
from typing import Optional

import typer

from eventstore.instants import format_instant, parse_instant

from .app import JsonOpt, app, fail, memory, read_input
from .output import AllowSecretOpt, emit_json, progress_bar

hub_app = typer.Typer(help="Administer a hub: agents and their tokens, contracts, what agents received.",
                      no_args_is_help=True)
agent_app = typer.Typer(help="Agents allowed on the hub.", no_args_is_help=True)
contract_app = typer.Typer(help="The producer/consumer contract.", no_args_is_help=True)
remote_app = typer.Typer(help="Hubs this workspace syncs with.", no_args_is_help=True)
entry_app = typer.Typer(help="Typed entries in shared `entries` layers.", no_args_is_help=True)
app.add_typer(hub_app, name="hub")
hub_app.add_typer(agent_app, name="agent")
hub_app.add_typer(contract_app, name="contract")
app.add_typer(remote_app, name="remote")
app.add_typer(entry_app, name="entry")

DbOpt = typer.Option("hub.db", "--db", envvar="MEM_HUB_DB", help="SQLite file or postgresql:// URL.")


def storage(db: str):
    from sync.storage import open_storage

    return open_storage(db)


@app.command()
def serve(db: str = DbOpt, host: str = typer.Option("127.0.0.1", "--host"),
          port: int = typer.Option(8765, "--port"),
          group_commit: bool = typer.Option(True, "--group-commit/--no-group-commit",
                                            help="Commit concurrent pushes together (off: one transaction each).")):
    """Run a hub (SQLite by default; PostgreSQL with --db postgresql://...)."""
    import uvicorn

    from sync.hub import create_app

    typer.echo(f"mindlog hub on http://{host}:{port} ({db})", err=True)
    uvicorn.run(create_app(storage(db), group_commit=group_commit), host=host, port=port, log_level="warning",
                timeout_graceful_shutdown=2)


@agent_app.command("add")
def agent_add(name: str, db: str = DbOpt, json: bool = JsonOpt):
    """Register an agent; prints its token once (the hub keeps only a hash)."""
    token = storage(db).add_agent(name)
    if json:
        return emit_json({"agent": name, "token": token})
    typer.echo(token)


@agent_app.command("revoke")
def agent_revoke(name: str, db: str = DbOpt):
    """Revoke an agent's token at once."""
    storage(db).revoke_agent(name)
    typer.echo(f"revoked {name}")


@agent_app.command("list")
def agent_list(db: str = DbOpt, json: bool = JsonOpt):
    """The agents, with when they were added and revoked."""
    agents = storage(db).agents()
    if json:
        return emit_json(agents)
    for a in agents:
        typer.echo(f"{a.name:<16} added {format_instant(a.created_at)}"
                   + (f"  revoked {format_instant(a.revoked_at)}" if a.revoked_at else ""))


@contract_app.command("apply")
def contract_apply(file: Path, db: str = DbOpt):
    """Apply a contract file (TOML); the change is an event on the hub."""
    from sync.contracts import parse_contract

    contract = parse_contract(read_input(str(file)).decode("utf-8"))
    position = storage(db).apply_contract(contract)
    typer.echo(f"contract applied at hub position {position}: {', '.join(sorted(contract.layers))}")


@contract_app.command("show")
def contract_show(db: str = DbOpt, at: Optional[str] = typer.Option(None, "--at"), json: bool = JsonOpt):
    """The contract in force now, or at a moment."""
    from sync.contracts import to_toml

    contract, position = storage(db).contract(parse_instant(at) if at else None)
    if json:
        return emit_json({"position": position, "contract": contract})
    sys.stdout.write(f"# hub position {position}\n" + to_toml(contract))


@hub_app.command("believed")
def hub_believed(agent: str, db: str = DbOpt, at: Optional[str] = typer.Option(None, "--at"), json: bool = JsonOpt):
    """The shared events AGENT had received by a moment (from its pull progress)."""
    from sync.contracts import consumed_layers

    hub = storage(db)
    at_ms = parse_instant(at) if at else None
    cursor = hub.received_by(agent, at_ms)
    contract, _ = hub.contract(at_ms)
    events = hub.pull(0, consumed_layers(contract, agent), 1 << 30)
    events = [e for e in events if e.seq <= cursor]
    if json:
        return emit_json({"agent": agent, "cursor": cursor, "events": events})
    typer.echo(f"{agent} had received hub events up to position {cursor}: {len(events)} shared events")
    for e in events:
        typer.echo(f"{e.seq:>6}  {e.agent:<10} {e.layer:<10} {e.kind:<13} {_summary(e)}")


def _summary(event) -> str:
    body = event.body
    if body.__struct_config__.tag == "entry.append":
        return f"[{body.type}] {body.date}: {body.content}"[:70]
    return getattr(body, "slug", "")


@remote_app.command("add")
def remote_add(name: str, url: str, token_file: str = typer.Option(..., "--token-file")):
    """Add a hub to sync with; the token stays in its file."""
    from sync.client import add_remote

    with memory(refresh=False) as mem:
        remote = add_remote(mem, name, url, token_file)
    typer.echo(f"remote {remote.name} -> {remote.url}")


@remote_app.command("list")
def remote_list(json: bool = JsonOpt):
    """The remotes of this workspace."""
    from sync.client import load_remotes

    with memory(refresh=False) as mem:
        remotes = list(load_remotes(mem).values())
    if json:
        return emit_json(remotes)
    for r in remotes:
        typer.echo(f"{r.name:<12} {r.url}")


@app.command()
def push(remote: Optional[str] = typer.Argument(None), json: bool = JsonOpt):
    """Send this agent's events in the shared layers it produces."""
    from sync.client import get_remote, push as pushing

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("push", mem.log.head()) as advance:
            report = pushing(mem, target, progress=advance)
    if json:
        return emit_json(report)
    typer.echo(f"pushed {report.pushed} events to {report.remote}"
               + (f" ({report.duplicates} already there)" if report.duplicates else ""))


@app.command()
def pull(remote: Optional[str] = typer.Argument(None),
         follow: bool = typer.Option(False, "--follow", help="Keep pulling (long-poll) until interrupted."),
         json: bool = JsonOpt):
    """Fetch the shared events this agent consumes."""
    from sync.client import get_remote, pull as pulling

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("pull", None) as advance:
            try:
                report = pulling(mem, target, follow=follow, progress=advance,
                                 say=lambda line: typer.echo(line, err=True))
            except KeyboardInterrupt:
                raise typer.Exit(0) from None
    if json:
        return emit_json(report)
    typer.echo(f"pulled {report.pulled} events from {report.remote}")


@app.command("sync")
def sync_(remote: Optional[str] = typer.Argument(None), json: bool = JsonOpt):
    """Push, then pull."""
    from sync.client import get_remote, pull as pulling, push as pushing

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("push", mem.log.head()) as advance:
            pushed = pushing(mem, target, progress=advance)
        with progress_bar("pull", None) as advance:
            pulled = pulling(mem, target, progress=advance)
    if json:
        return emit_json({"push": pushed, "pull": pulled})
    typer.echo(f"pushed {pushed.pushed}, pulled {pulled.pulled} ({target.name})")


@entry_app.command("add")
def entry_add(layer: str, text: str, reverses: Optional[str] = typer.Option(None, "--reverses",
                                                                              help="The id of the entry reversed."),
              allow_secret: bool = AllowSecretOpt):
    """Append a typed entry: "[DECISION] text" (dated today) or "[FACT] 2026-11-29: text"."""
    with memory() as mem:
        seq = mem.entry_add(layer, text, reverses, allow_secret=allow_secret)
        event = mem.log.get_by_seq(seq)
    typer.echo(f"{event.id} [{event.body.type}] {event.body.date}: {event.body.content}")


@entry_app.command("list")
def entry_list(layer: str, json: bool = JsonOpt):
    """The entries of a layer, with their ids, in the rendered order."""
    with memory() as mem:
        entries = mem.views.shared.entries(layer, mem.views.checkpoint())
    if json:
        return emit_json(entries)
    for e in entries:
        typer.echo(f"{e.id}  {e.agent:<10} [{e.type}] {e.date}: {e.content}"
                   + (f"  (reversed by {e.reversed_by})" if e.reversed_by else ""))


@app.command()
def conflicts(json: bool = JsonOpt):
    """Shared pages with more than one head: every replica shows the same winner."""
    with memory() as mem:
        found = mem.views.shared.conflicts(mem.views.checkpoint())
    if json:
        return emit_json(found)
    for c in found:
        heads = ", ".join(f"{h.id[:18]} ({h.agent}{', deleted' if h.deleted else ''})" for h in c.heads)
        typer.echo(f"{c.layer}/{c.slug}: winner {c.winner[:18]}; heads {heads}")
    if not found:
        typer.echo("no conflicts")


@app.command()
def resolve(target: str, file: str = typer.Option(..., "--file", help="The resolved page (- for stdin)."),
            allow_secret: bool = AllowSecretOpt):
    """Write LAYER/SLUG as an update whose parents are all its heads."""
    layer, _, slug = target.partition("/")
    if not slug:
        fail("name the page as LAYER/SLUG", 2)
    with memory() as mem:
        seq = mem.resolve(layer, slug, read_input(file), allow_secret=allow_secret)
    typer.echo(f"resolved {layer}/{slug} (seq {seq})")
