"""`mem serve`, `mem hub ...`, `mem remote add`, `push`, `pull`, `sync`, `entry`, `conflicts`, `resolve`."""

import sys
from pathlib import Path
from typing import Optional

import typer

from eventstore.instants import format_instant, format_local, past_instant
from eventstore.kinds import EntryAppend

from .app import AtOpt, JsonOpt, SeqOpt, app, as_of, fail, memory, read_input, read_page, state
from .output import (AT_HELP, AllowSecretOpt, emit_json, event_count, held_lines, http_url, listing, progress_bar,
                     one_line, summary, taken_back_line)

hub_app = typer.Typer(help="Administer a hub: agents and their tokens, contracts, what agents received.",
                      no_args_is_help=True)
agent_app = typer.Typer(help="Agents allowed on the hub.", no_args_is_help=True)
contract_app = typer.Typer(help="The producer/consumer contract.", no_args_is_help=True)
remote_app = typer.Typer(help="Hubs this workspace syncs with.", no_args_is_help=True)
entry_app = typer.Typer(help="Typed entries in `entries` layers: the hub's shared ones and this agent's local ones "
                        "(`mem layer add`).", no_args_is_help=True)
app.add_typer(hub_app, name="hub")
hub_app.add_typer(agent_app, name="agent")
hub_app.add_typer(contract_app, name="contract")
app.add_typer(remote_app, name="remote")
app.add_typer(entry_app, name="entry")

DbOpt = typer.Option("hub.db", "--db", envvar="MEM_HUB_DB", help="SQLite file or postgresql:// URL.")


def storage(db: str, create: bool = False):
    """The hub's storage; a missing hub is an error unless `create` (`mem hub init`, `mem serve`)."""
    from sync.storage import hub_exists, open_storage, pg_log_tables, sqlite_tables

    from eventstore.errors import storage_exceptions, storage_failure
    from eventstore.workspace import absolute

    if "://" not in db:
        db = str(absolute(db))  # a deleted cwd is named here, not met as ENOENT deep in SQLite
        if not Path(db).parent.is_dir():  # SQLite says "unable to open database file" (nc21a)
            fail(f"cannot open the hub database {db}: the directory {Path(db).parent} does not exist")
        if Path(db).is_dir():  # `mem hub init` was advised, and said SQLITE_CANTOPEN (nc22a)
            fail(f"{db} is a directory: a hub database is a file, such as {Path(db) / 'hub.db'}")
    exists = hub_exists(db)
    others = None if exists else pg_log_tables(db) if "://" in db else sqlite_tables(db)
    if others:  # a workspace's log, say: never made a hub
        fail(f"{_where(db)} is not a hub database (it holds {', '.join(sorted(others))}); a hub needs a "
             f"{'database' if '://' in db else 'file'} of its own")
    if not create and not exists:
        fail(_no_hub(db))
    if "://" not in db:
        state["hub"] = Path(db)  # a SQLite hub found damaged later is named (app.damaged_file)
    try:
        return open_storage(db)
    except storage_exceptions() as exc:
        fail(f"cannot open the hub database {_where(db)}: {storage_failure(exc)}")


def _no_hub(db: str) -> str:
    """Why an admin command finds no hub: no file there, or a database (or an empty file) where no hub was set up
    (an empty PostgreSQL database was called "no hub database")."""
    from eventstore.backends import shown

    if "://" not in db and not Path(db).is_file():
        return f"no hub database at {_where(db)}; create one with `mem hub init --db {db}` or pass --db (or MEM_HUB_DB)"
    there = "database" if "://" in db else "file"
    masked = shown(db)
    return (f"no hub was set up in {_where(db)} (the {there} is there, without a hub); set one up with "
            f"`mem hub init --db {masked}`{' (the password put back)' if masked != db else ''} or pass another --db "
            "(or MEM_HUB_DB)")


def _where(db: str) -> str:
    from eventstore.backends import place
    from eventstore.workspace import absolute

    return place(db) if "://" in db else str(absolute(db))


def _known_agent(hub, name: str) -> None:
    names = {a.name.split("#revoked-")[0] for a in hub.agents()}
    if name not in names:
        fail(f"no agent {name!r} on this hub (agents: {', '.join(sorted(names)) or 'none'})")


@app.command()
def serve(db: str = DbOpt, host: str = typer.Option("127.0.0.1", "--host", help="Listen on this address."),
          port: int = typer.Option(8765, "--port", help="Listen on this port."),
          group_commit: bool = typer.Option(True, "--group-commit/--no-group-commit",
                                            help="Commit concurrent pushes together (off: one transaction each)."),
          admin_token_file: Optional[Path] = typer.Option(
              None, "--admin-token-file", help="The web pages' admin token (sees every layer); made when missing."),
          ui_dir: Optional[Path] = typer.Option(
              None, "--ui-dir", help="Where the web pages keep the hub's mirror (default: next to a SQLite hub; a "
                                    "PostgreSQL hub's in a temporary directory removed when it stops)."),
          read_timeout: Optional[float] = typer.Option(
              None, "--read-timeout", min=0.1,
              help="Seconds a request may take to arrive (its head whole, then between parts of its body); a "
                   "later one is answered 408 and its connection closed. Default: 20.")):
    """Run a hub (SQLite by default; PostgreSQL with --db postgresql://...); creates it when missing.

    The hub's shared layers are browsable at /ui (open /ui/?token=TOKEN once: an agent's token shows
    the layers it consumes, the admin token every layer)."""
    import shutil
    import signal
    import tempfile

    from eventstore.backends import shown
    from sync.hub import create_app
    from sync.server import READ_TIMEOUT, bare_host, listen, serve as serve_app
    from sync.storage import hub_exists

    _refuse_unmade_dirs(admin_token_file, ui_dir)
    host = bare_host(host)  # `[::1]`, as the URL it prints writes it
    sock = listen(host, port)
    existed = hub_exists(db)
    hub = storage(db, create=True)
    if not existed:
        typer.echo(f"created a new hub database at {_where(db)}", err=True)
    app = create_app(hub, group_commit=group_commit)
    temporary = ui_dir is None and "://" in db  # a PostgreSQL hub's mirror, by default, lives as long as this
    if temporary:
        ui_dir = Path(tempfile.mkdtemp(prefix="mindlog-hub-ui-"))
        # uvicorn raises the SIGTERM it stopped on again once it has stopped: end as an exit, through `finally`
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        app.mount("/ui", _hub_ui(app.state.hub, db, ui_dir, admin_token_file))
        app.add_route("/", _to_the_pages, methods=["GET"])
        url = http_url(host, port)
        typer.echo(f"mindlog hub on {url} ({shown(db)}); pages at {url}/ui/")
        serve_app(app, sock, read_timeout or READ_TIMEOUT)
    finally:
        if temporary:
            shutil.rmtree(ui_dir, ignore_errors=True)


async def _to_the_pages(request):
    """The hub's root, which a newcomer opens from the URL `mem serve` prints, leads to its pages (it was a 404)."""
    from starlette.responses import RedirectResponse

    return RedirectResponse("/ui/")


def _refuse_unmade_dirs(admin_token_file: Path | None, ui_dir: Path | None) -> None:
    """`mem serve` makes the admin token file and the mirror's directory when missing, but never the
    directories they go in (as with --db): a mistyped path is refused before anything is made."""
    for option, path, kind in (("--admin-token-file", admin_token_file, "file"), ("--ui-dir", ui_dir, "directory")):
        if path is None:
            continue
        if not path.parent.is_dir():
            fail(f"{option} {path}: there is no directory {path.parent}")
        if path.exists() and (path.is_dir() if kind == "file" else not path.is_dir()):
            fail(f"{option} {path}: {'a directory' if kind == 'file' else 'a file'} is there, not a {kind}")


def _hub_ui(hub, db: str, ui_dir: Path | None, admin_token_file: Path | None):
    """The /ui pages over a mirror of the hub (`sync.hub.Hub`; in `ui_dir`, or `mirror_dir`), which a redaction the
    hub commits reaches at once (`HubMirror.scrub`)."""
    from sync.mirror import HubMirror

    from .tokens import token_from_file
    from .web.hub import hub_ui

    admin = token_from_file(admin_token_file, "admin token for the pages") if admin_token_file is not None else None
    return hub_ui(hub.storage, HubMirror(hub.storage, ui_dir or mirror_dir(db)), admin, warm_up=True,
                  redactions=hub.redaction_listeners)


def mirror_dir(db: str) -> Path:
    """Where `mem serve` keeps a SQLite hub's mirror for its pages, unless told (`--ui-dir`)."""
    return Path(f"{db}.ui")


@hub_app.command("init")
def hub_init(db: str = DbOpt):
    """Create a new, empty hub database."""
    from sync.storage import hub_exists

    if hub_exists(db):
        fail(f"a hub database exists already at {_where(db)}")
    storage(db, create=True).close()
    typer.echo(f"created hub database {_where(db)}")


@agent_app.command("add")
def agent_add(name: str, db: str = DbOpt, json: bool = JsonOpt,
              token_file: Optional[str] = typer.Option(None, "--token-file", help="Write the token to this new file, "
                                                       "readable by you alone (mode 600), instead of printing it.")):
    """Register an agent; prints its token once (the hub keeps only a hash)."""
    from sync.client import new_token_file

    target = new_token_file(token_file) if token_file is not None else None
    try:
        token = storage(db).add_agent(name)
    except BaseException:  # a name taken already: no empty token file left behind
        if target is not None:
            target.close()
            Path(target.name).unlink()
        raise
    if target is not None:
        with target:
            target.write(token + "\n")
        return emit_json({"agent": name, "token_file": token_file}) if json else typer.echo(
            f"agent {name}: token written to {token_file} (mode 600)")
    if json:
        return emit_json({"agent": name, "token": token})
    typer.echo(token)


@agent_app.command("revoke")
def agent_revoke(name: str, db: str = DbOpt):
    """Revoke an agent's token at once."""
    from eventstore.errors import NotFound

    hub = storage(db)
    try:
        hub.revoke_agent(name)
    except NotFound:
        revoked = [a.revoked_at for a in hub.agents() if a.name == name and a.revoked_at]
        if revoked:
            fail(f"agent {name!r} was revoked already ({format_instant(max(revoked))}); nothing to revoke")
        _known_agent(hub, name)
        raise
    typer.echo(f"revoked {name}")


@agent_app.command("list")
def agent_list(db: str = DbOpt, json: bool = JsonOpt):
    """The agents, with when they were added and revoked."""
    agents = storage(db).agents()
    listing(agents, json, lambda a: f"{a.name:<16} added {format_instant(a.created_at)}"
            + (f"  revoked {format_instant(a.revoked_at)}" if a.revoked_at else ""),
            "no agents: `mem hub agent add NAME` adds one")


@contract_app.command("apply")
def contract_apply(file: Path, db: str = DbOpt):
    """Apply a contract file (TOML); the change is an event on the hub."""
    from sync.contracts import parse_contract

    try:
        text = read_input(str(file)).decode("utf-8")
    except UnicodeDecodeError:
        fail(f"{file} is not a contract: it is not UTF-8 text")
    contract = parse_contract(text)
    if not contract.layers:  # an empty or mistaken file would stop every layer being shared
        fail(f"{file} names no layers (a [layers.NAME] table each); the hub's contract stays as it is")
    hub = storage(db)
    current, at = hub.contract()
    if current == contract:  # another change event would only blur `contract show --at`'s history
        return typer.echo(f"contract unchanged: the hub's, since hub position {at}, is this one")
    position = hub.apply_contract(contract)
    typer.echo(f"contract applied at hub position {position}: {', '.join(sorted(contract.layers))}")
    for warning in contract_warnings(hub, current, contract):
        typer.echo(f"warning: {warning}", err=True)


def contract_warnings(hub, before, after) -> list[str]:
    """What a contract change did that a typo does as well: a layer holding events dropped (its consumers' files of
    it go at their next pull), an agent named that the hub does not know (in another letter case, say)."""
    said = [f"layer {name} was dropped: the hub keeps its events, but no agent receives it any more and its consumers' "
            "file of it goes at their next pull (a contract naming it again brings it back)"
            for name in sorted(set(before.layers) - set(after.layers)) if hub.latest_position(name)]
    agents = hub.agents()
    known = {agent.name for agent in agents if not agent.revoked_at}
    revoked = {agent.name: agent.revoked_at for agent in agents if agent.revoked_at and agent.name not in known}
    named = sorted({agent for spec in after.layers.values() for agent in (*spec.producers, *spec.consumers)} - {"*"})
    for agent in named:
        if agent in revoked:  # not "no agent yet": its token was revoked (nc26b)
            said.append(f"{agent!r} was revoked at {format_instant(revoked[agent])}: it cannot sync until `mem hub "
                        f"agent add {agent}` gives it a new token")
        elif agent not in known:
            like = next((name for name in sorted(known) if name.casefold() == agent.casefold()), None)
            said.append(f"{agent!r} is no agent of this hub" + (f" ({like!r} is: names are compared as written)" if like
                                                               else f" yet (`mem hub agent add {agent}`)"))
    return said


@contract_app.command("show")
def contract_show(db: str = DbOpt, at: Optional[str] = typer.Option(None, "--at", help=AT_HELP), json: bool = JsonOpt):
    """The contract in force now, or at a moment."""
    from sync.contracts import to_toml

    at_ms, contract, position = _contract_as_of(storage(db), at)
    if at_ms is not None:
        typer.echo(f"as of {format_local(at_ms)} (hub position {position})", err=True)
    if json:
        return emit_json({"position": position, "contract": contract})
    if not position:  # it printed "# hub position 0" alone (nc22a)
        typer.echo("no contract yet: `mem hub contract apply FILE` applies one", err=True)
    sys.stdout.write(f"# hub position {position}\n" + to_toml(contract))


def _contract_as_of(hub, at: str | None):
    """(the instant, the contract in force then, its hub position); a moment before the hub's first
    contract is refused, as a workspace refuses one before its first event."""
    at_ms = past_instant(at) if at else None
    contract, position = hub.contract(at_ms)
    if at_ms is not None and not position:
        fail(f"{at!r} ({format_local(at_ms)}) is before this hub had a contract")
    return at_ms, contract, position


@hub_app.command("believed")
def hub_believed(agent: str, db: str = DbOpt, at: Optional[str] = typer.Option(None, "--at", help=AT_HELP),
                 json: bool = JsonOpt):
    """The shared events AGENT had received by a moment (from its pull progress)."""
    import msgspec

    from eventstore.layers import produced_only
    from sync.contracts import consumed_layers
    from sync.storage import decode_stored

    hub = storage(db)
    _known_agent(hub, agent)
    at_ms, contract, _ = _contract_as_of(hub, at)
    cursor = hub.received_by(agent, at_ms)
    if at_ms is not None:
        typer.echo(f"as of {format_local(at_ms)} (hub position {cursor} for {agent})", err=True)
    head = hub.head()
    if cursor > head:
        unknown = (f"{agent}'s pull cursor recorded by this hub (hub position {cursor}) is past its last position "
                   f"({head}): the hub lost events (restored from a backup?), so what {agent} received is unknown "
                   f"until {agent} pulls again")
        if json:
            return emit_json({"agent": agent, "cursor": None, "events": [], "not_received": [], "unknown": unknown})
        return typer.echo(unknown)
    layers = consumed_layers(contract, agent)
    unreceived = {u.layer: u for u in _unreceived(hub, agent, layers, at_ms)}
    events, missed = [], {}
    for e in hub.pull(0, layers, 1 << 30):
        if e.seq > cursor:
            break
        if e.layer in unreceived and unreceived[e.layer].missed(e.seq):
            missed[e.layer] = missed.get(e.layer, 0) + 1
        else:
            events.append(e)
    if only_produced := produced_only(contract, agent):  # its pulls bring their redactions (sync.hub.Hub.page_rows)
        events = sorted(events + [decode_stored(data, position, recorded) for position, recorded, data
                                  in hub.redaction_rows(0, cursor, only_produced)], key=lambda e: e.seq)
    if json:
        return emit_json({"agent": agent, "cursor": cursor, "events": events,
                          "not_received": [{**msgspec.structs.asdict(unreceived[layer]), "events": n}
                                           for layer, n in missed.items()]})
    typer.echo(f"{agent} had received hub events up to position {cursor}: {len(events)} shared events")
    for layer, n in missed.items():
        typer.echo(f"not received: {event_count(n)} of {layer} from before {agent} became its consumer (the contract at "
                   f"hub position {unreceived[layer].since}); {agent}'s next pull fetches them")
    for e in events:
        typer.echo(f"{e.seq:>6}  {e.agent:<10} {e.layer:<10} {e.kind:<13} {_summary(e)}")


def _unreceived(hub, agent: str, layers: list[str], at_ms: int | None) -> list:
    """For each of `layers` that `agent` was made a consumer of after the hub's first contract, the past it had not
    received by then (sync.contracts.Unreceived), from the contracts' history and the agent's pull records."""
    from eventstore.layers import CONTRACT_LAYER
    from sync.contracts import Unreceived, backfill_agent, became_consumer
    from sync.storage import contract_of

    contracts = [(e, contract_of(e)) for e in hub.pull(0, [CONTRACT_LAYER], 1 << 30)
                 if at_ms is None or e.recorded_at <= at_ms]
    found = []
    for layer in layers:
        since = became_consumer(contracts, agent, layer)
        if since is not None:
            found.append(Unreceived(layer=layer, since=since.seq, upto=hub.received_by(agent, since.recorded_at),
                                    backfilled=hub.received_by(backfill_agent(agent, layer), at_ms)))
    return found


def _summary(event) -> str:
    """An entry with its type and date; any other event as `mem log` shows it (a redacted one: what it was, why)."""
    body = event.body
    if isinstance(body, EntryAppend):
        return f"[{body.type}] {body.date}: {body.content}"[:70]
    return summary(event)


@remote_app.command("add")
def remote_add(name: str, url: str,
               token_file: str = typer.Option(..., "--token-file", help="A file holding this agent's hub token."),
               force: bool = typer.Option(False, "--force", help="Accept a token of another agent."),
               json: bool = JsonOpt):
    """Add a hub to sync with: checks the token's agent and fetches the contract; the token stays in its file."""
    from sync.client import add_remote

    with memory(refresh=False) as mem:
        added = add_remote(mem, name, url, token_file, force=force)
    if json:
        return emit_json(added)
    if added.replaced is not None and added.replaced.url != added.remote.url:
        typer.echo(f"replaced remote {name} (was {added.replaced.url}; its cursors start over)")
    elif added.replaced is not None:
        typer.echo(f"replaced remote {name}'s token (the same hub: its cursors are kept)")
    typer.echo(f"remote {added.remote.name} -> {added.remote.url} (agent {added.agent})")
    for warning in added.warnings:
        typer.echo(warning, err=True)


@remote_app.command("remove")
def remote_remove(name: str):
    """Forget a remote and its sync positions."""
    from sync.client import load_remotes, remove_remote, unpushed

    with memory(refresh=False) as mem:
        remote = load_remotes(mem).get(name)
        waiting = unpushed(mem, remote) if remote is not None else 0
        removed = remove_remote(mem, name)
    typer.echo(f"removed remote {removed.name} ({removed.url})")
    if waiting:
        typer.echo(f"warning: {removed.name} never acknowledged {event_count(waiting)} of this agent, as far as this "
                   "workspace knows (its push cursor); the next remote added sends them, and a hub that holds them "
                   "says so", err=True)


@remote_app.command("list")
def remote_list(json: bool = JsonOpt):
    """The remotes of this workspace."""
    from sync.client import load_remotes

    with memory(refresh=False) as mem:
        remotes = list(load_remotes(mem).values())
    listing(remotes, json, lambda r: f"{r.name:<12} {r.url}", "no remotes: `mem remote add NAME URL` adds one")


def _say(line: str) -> None:
    """What a push or pull says as it goes (warnings): on stderr."""
    typer.echo(line, err=True)


def _held_lines(report) -> bool:
    """Says what stays behind (stderr), and what was taken back instead; True when something stays behind."""
    if report.taken_back:
        typer.echo(f"note: {taken_back_line(report)}", err=True)
    for line in held_lines(report):
        typer.echo(f"error: {line}", err=True)
    return bool(report.held)


def _pull_line(report) -> str:
    again = _came_again(report, "and {} of this agent's own came back")
    return f"pulled {event_count(report.pulled)} from {report.remote}" + (f" ({', '.join(again)})" if again else "")


def _came_again(counts, own: str) -> list[str]:
    """What a pull brought that the log held already: other agents' events ("already here"), then this
    agent's own coming back (`own`, a format taking their number)."""
    again = [f"{counts.already_held} already here"] if counts.already_held else []
    return (again + [own.format(counts.returned)]) if counts.returned else again


def _skipped_lines(report) -> None:
    """The files a pull left as edited by hand, but those the command's opening refresh warned of already."""
    from projections.memory import FOLDER_GONE

    for path in sorted(set(report.skipped) - state["refused"]):
        if path in report.not_adoptable and report.not_adoptable[path].startswith(FOLDER_GONE):
            typer.echo(f"not written: {path}: {report.not_adoptable[path]}", err=True)
        elif path in report.not_adoptable:
            typer.echo(f"not written: {path} was edited by hand, but {report.not_adoptable[path]}", err=True)
        else:
            typer.echo(f"not written: {path} was edited by hand; `mem adopt` keeps the edit, "
                       "`mem status` lists it", err=True)


@app.command()
def push(remote: Optional[str] = typer.Argument(None), json: bool = JsonOpt):
    """Send this agent's events in the shared layers it produces; exits 1 when some must stay behind."""
    from sync.client import get_remote, push as pushing

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("push", mem.head()) as advance:
            report = pushing(mem, target, progress=advance, say=_say)
    if json:
        emit_json(report)
    else:
        typer.echo(f"pushed {event_count(report.pushed)} to {report.remote}"
                   + (f" ({report.duplicates} already there)" if report.duplicates else ""))
    raise typer.Exit(1 if _held_lines(report) else 0)


@app.command()
def pull(remote: Optional[str] = typer.Argument(None),
         follow: bool = typer.Option(False, "--follow", help="Keep pulling (long-poll) until interrupted (with --json: a JSON line per batch)."),
         json: bool = JsonOpt):
    """Fetch the shared events this agent consumes."""
    from sync.client import get_remote, pull as pulling

    def batch_line(batch):
        if json:  # a follower never ends on its own: one JSON object per batch, as it lands
            import msgspec

            return typer.echo(msgspec.json.encode(batch).decode())
        again = _came_again(batch, "{} own came back")
        typer.echo(f"pulled {event_count(batch.pulled)} up to hub position {batch.position}"
                   + (f" ({', '.join(again)})" if again else ""))
        _conflict_lines(batch, _settled_by(mem, batch.conflicts))

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("pull", None) as advance:
            try:
                report = pulling(mem, target, follow=follow, progress=advance,
                                 say=_say,
                                 on_batch=batch_line if follow else None)
            except KeyboardInterrupt:
                if not follow:
                    raise
                raise typer.Exit(0) from None
        settled = _settled_by(mem, report.conflicts)
    if json:
        return emit_json(report)
    typer.echo(_pull_line(report))
    _skipped_lines(report)
    _conflict_lines(report, settled)


@app.command("sync")
def sync_(remote: Optional[str] = typer.Argument(None), json: bool = JsonOpt):
    """Push, then pull; exits 1 when some events must stay behind."""
    from sync.client import get_remote, pull as pulling, push as pushing

    with memory() as mem:
        target = get_remote(mem, remote)
        with progress_bar("push", mem.head()) as advance:
            pushed = pushing(mem, target, progress=advance, say=_say)
        with progress_bar("pull", None) as advance:
            pulled = pulling(mem, target, progress=advance, say=_say)
        settled = _settled_by(mem, pulled.conflicts)
    if json:
        emit_json({"push": pushed, "pull": pulled})
    else:
        again = _came_again(pulled, "{} of this agent's own came back")
        there = f" ({pushed.duplicates} already there)" if pushed.duplicates else ""  # as `mem push` says (nc26a)
        typer.echo(f"pushed {pushed.pushed}{there}, pulled {pulled.pulled} ({target.name})"
                   + (f"; {', '.join(again)}" if again else ""))
        _skipped_lines(pulled)
        _conflict_lines(pulled, settled)
    raise typer.Exit(1 if _held_lines(pushed) else 0)


def _settled_by(mem, pages: list[str]) -> dict[str, str]:
    """How each page a pull left in a new conflict is settled, in words: a resolve by a producer of its layer, after
    a release when its head is held (`governance: hold`), which a resolve refuses to release (nc21a)."""
    from eventstore.governance import is_held

    settled = {}
    for page in pages:
        layer, slug = page.split("/", 1)
        shown = mem.views.shared_document(layer, slug)
        held = shown is not None and is_held(shown[0])
        if not mem.produces(layer):
            settled[page] = f"a producer of the layer {'releases and ' if held else ''}resolves it"
        elif held:
            settled[page] = (f"its head is held: `mem page release {slug} --layer {layer} --note \"why\"`, then "
                             f"`mem resolve {page} --file F`")
        else:
            settled[page] = f"`mem resolve {page} --file F`"
    return settled


def _conflict_lines(report, settled: dict[str, str]) -> None:
    """Warns of each page a pull left in a new conflict, with how it is settled (`_settled_by`)."""
    for page in report.conflicts:
        typer.echo(f"warning: {page} is now in conflict: its file shows the version every replica shows, the others "
                   f"are kept (`mem conflicts --show`; {settled[page]})", err=True)


@entry_app.command("add")
def entry_add(layer: str, text: str, reverses: Optional[str] = typer.Option(None, "--reverses",
                                                                              help="The id of the entry reversed (or its start, as the layer's file shows it)."),
              allow_secret: bool = AllowSecretOpt):
    """Append a typed entry: "[DECISION] text" (dated today) or "[FACT] 2026-11-29: text"."""
    with memory() as mem:
        event = mem.entry_add(layer, text, reverses, allow_secret=allow_secret)
    typer.echo(f"{event.id} [{event.body.type}] {event.body.date}: {event.body.content}")


@entry_app.command("list")
def entry_list(layer: str, json: bool = JsonOpt, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt):
    """The entries of a layer, with their ids, in the rendered order, now or as of a moment."""
    with memory() as mem:
        entries = mem.entries(layer, as_of(mem, at, seq) if at is not None or seq is not None else None)
        why = mem.not_consumed(layer)
    listing(entries, json, lambda e: f"{e.id}  {e.agent:<10} [{e.type}] {e.date}: {e.content}"
            + (f"  (reversed by {e.reversed_by})" if e.reversed_by else ""), f"no entries in layer {layer}", why)


@app.command()
def conflicts(json: bool = JsonOpt, show: bool = typer.Option(False, "--show", help="Print every head's text.")):
    """Shared pages with more than one head (every replica shows the same winner); exits 1 if any."""
    from projections.conflicts import conflicts_shown

    with memory() as mem:
        found = conflicts_shown(mem) if show else mem.conflicts()
    if json:
        emit_json(found)
    elif not found:
        typer.echo("no conflicts")
    for c in [] if json else found:
        if not show:
            heads = ", ".join(f"{h.id[:18]} ({h.agent}{', deleted' if h.deleted else ''})" for h in c.heads)
            typer.echo(f"{c.layer}/{c.slug}: winner {c.winner[:18]}; heads {heads}")
            continue
        typer.echo(f"== {c.layer}/{c.slug}: {len(c.heads)} heads; `mem resolve {c.layer}/{c.slug} --file F` "
                   "writes one version that supersedes them all")
        for h in c.heads:
            typer.echo(f"-- {h.id} by {h.agent} at {h.at}{' (the winner)' if h.id == c.winner else ''}"
                       + (": deleted" if h.deleted else ""))
            if h.text is not None:
                typer.echo(h.text.rstrip("\n"))
    raise typer.Exit(1 if found else 0)


def shared_page_delete(layer: str, slug: str, note: str, allow_secret: bool) -> None:
    with memory() as mem:
        event = mem.shared_page_delete(layer, slug, note, allow_secret=allow_secret)
        path = mem.page_file(layer, event.body.slug)
    typer.echo(f"delete {path} (seq {event.seq})")


def shared_page_rename(layer: str, old: str, new: str, note: str, allow_secret: bool) -> None:
    with memory() as mem:
        event = mem.shared_page_rename(layer, old, new, note, allow_secret=allow_secret)
        paths = [mem.page_file(layer, slug) for slug in (old, new)]
    typer.echo(f"rename {paths[0]} -> {paths[1]} (seq {event.seq})")


def shared_page_list(layer: str, json: bool, at: str | None = None, seq: int | None = None) -> None:
    from .app import as_of

    with memory() as mem:
        moment = as_of(mem, at, seq) if at is not None or seq is not None else None
        pages, why = mem.shared_pages(layer, moment), mem.not_consumed(layer)
    listing(pages, json, lambda p: f"{p.slug:<28} {p.title:<30} {p.agent}"
            + (f"  ({p.heads} heads: a conflict)" if p.heads > 1 else ""), f"no pages in layer {layer}", why)


def _not_written_note(report, path: str) -> str:
    if path in report.not_adoptable:
        return f"  (edited by hand, but {report.not_adoptable[path]})"
    return "  (a newer version waits; `mem adopt` keeps the edit)"


STATUS_LINES = 20
"""The paths `mem status` prints of each kind (edited by hand, missing...); --json holds them all."""


def show_status(json: bool, fetch: bool) -> None:
    from eventstore.workspace import log_cut_short
    from sync.status import sync_status

    with memory(refresh=False) as mem:
        report = sync_status(mem, fetch=fetch)
    short = str(log_cut_short(report.checkpoint, report.head)) if report.behind < 0 else None
    if json:
        emit_json(report)
        return fail(short) if short else None
    typer.echo(f"workspace  {report.workspace}\nagent      {report.agent}\nlog head   {report.head}\n"
               f"views at   {report.checkpoint}" + (f"  ({report.behind} behind the log)" if report.behind > 0 else ""))
    edited = [p for p in report.hand_edited if p not in report.skipped]
    for label, paths in (("edited by hand", edited), ("not written", report.skipped),
                         ("not yet written", report.pending), ("missing", report.missing),
                         ("untracked", report.untracked)):
        for path in paths[:STATUS_LINES]:
            typer.echo(f"{label + ':':<17}{one_line(path)}"  # a name with a line break: one line (nc30a)
                       + (_not_written_note(report, path) if label == "not written" else ""))
        if len(paths) > STATUS_LINES:  # ten thousand pages deleted by hand printed ten thousand lines (nc24b)
            typer.echo(f"{label + ':':<17}... and {len(paths) - STATUS_LINES:,} more "
                       "(`mem status --json` lists them all)")
        if label == "missing" and paths:
            typer.echo(f"{'':<17}(deleted by hand: `mem adopt` records a page's deletion; `mem show PATH > PATH` "
                       "puts a file back, `mem replay` every one)")
    for why in report.in_the_way:
        typer.echo(f"{'in the way:':<17}{one_line(why)}")
    for folder, files in report.folders_gone.items():
        typer.echo(f"{'folder gone:':<17}{one_line(folder)} ({files} file(s) mindlog writes there; moved aside? put it "
                   "back, or `mem replay` writes it again from the log; `mem adopt` takes none as deleted)")
    if report.leftovers:
        them = "it" if len(report.leftovers) == 1 else "them"
        typer.echo(f"{'left over:':<17}{', '.join(report.leftovers)} (a replay or check cut off left {them}; the next "
                   f"command that writes removes {them})")
    if report.redaction_cut_off:
        typer.echo("warning: a redaction was cut off before it rewrote the files: those not yet written may still hold "
                   "what it removed; the next command that writes files (`mem adopt`, `mem show`) rewrites them")
    if report.temporary:
        shown = ", ".join(report.temporary[:3]) + (f" and {len(report.temporary) - 3} more" if len(report.temporary) > 3
                                                   else "")
        typer.echo(f"{'left over:':<17}{shown} (temporary files of a command stopped mid-write; the next command that "
                   "writes files removes them)")
    for c in report.conflicts:
        typer.echo(f"{'conflict:':<17}{c.layer}/{c.slug} ({len(c.heads)} heads; `mem conflicts --show`)")
    for layer, path in report.not_received.items():
        typer.echo(f"{'not received:':<17}{layer} (the hub's contract no longer makes this agent a consumer: {path} "
                   "shows what it had, and no longer changes)")
    for layer, path in report.produced_only.items():
        typer.echo(f"{'produced only:':<17}{layer} (this agent produces it, the hub's contract does not make it a "
                   f"consumer: {path} changes with its own writes and the layer's redactions only)")
    for why in report.not_taken.values():
        typer.echo(f"{'not taken:':<17}{why}")
    for why in report.blocked.values():
        typer.echo(f"{'own file:':<17}{why}")
    if report.unplaced:
        typer.echo(f"{'not placed:':<17}the log holds events of layer{'s' * (len(report.unplaced) > 1)} "
                   f"{', '.join(report.unplaced)}, but no hub contract "
                   "is known here to place their files: `mem pull` fetches it (`mem remote add` first, if none is "
                   "set), or `mem layer add NAME PATH` declares one of them a local layer again")
    for r in report.remotes:
        typer.echo(f"remote {r.name} ({r.url}): {r.unpushed} to push; behind the hub: {r.behind_text()}; "
                   f"last pull {r.last_pull or 'never'}" + (f" (to hub position {r.pulled_to})" if r.pulled_to else ""))
        for held in r.held:
            typer.echo(f"  held back: {held.count} in {held.layer}: {held.why}")
        for path in r.taken_back:
            typer.echo(f"  taken back: {one_line(path)} shows this agent's version it took back before it went out "
                       f"(redacted); the others show the version before it, until a producer writes the page anew")
    if report.clean:
        typer.echo("clean: every file is what the log says")
    if short:
        fail(short)


@app.command()
def resolve(target: str, file: str = typer.Option(..., "--file", help="The resolved page (- for stdin)."),
            allow_secret: bool = AllowSecretOpt):
    """Write LAYER/SLUG as an update whose parents are all its heads."""
    layer, _, slug = target.partition("/")
    if not slug:
        fail("name the page as LAYER/SLUG", 2)
    with memory() as mem:
        event = mem.resolve(layer, slug, read_page(file), allow_secret=allow_secret)
    typer.echo(f"resolved {layer}/{event.body.slug} (seq {event.seq})")
