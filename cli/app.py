"""The `mem` command. Each command parses its options and calls the library in a line or three."""

import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup
from typer.models import TyperInfo

from eventstore.errors import TRY_LATER, MemError, TooLarge, storage_exceptions, storage_failure, unavailable
from eventstore.instants import format_local
from eventstore.layers import MIND

from .output import (AT_HELP, TOO_LARGE, AllowSecretOpt, TerminalSafe, emit_json, event_count, event_line, fail,
                     listing, one_line, plain, progress_bar, strip_escapes_in_pipes, with_cwd_note)
from .typer_tuning import tune_typer

# The commands defined outside this module, by the module that registers them. A command's module is
# imported only when that command runs (or help lists it): start-up pays for one command, not for all.
COMMAND_MODULES = {
    **dict.fromkeys(("loop", "file", "message", "config", "audit", "export", "import", "cite"), "adf_commands"),
    **dict.fromkeys(("search", "believed", "lint", "layer"), "recall_commands"),
    **dict.fromkeys(("redact",), "redact_commands"),
    **dict.fromkeys(("serve", "push", "pull", "sync", "conflicts", "resolve", "hub", "remote", "entry"),
                    "sync_commands"),
    **dict.fromkeys(("ui",), "ui_commands"),
}
# Modules that add commands to another module's group (`mem hub redact`).
GROUP_EXTRAS = {"hub": ("redact_commands",)}


class Interrupted(Exception):
    """Ctrl-C under a command (one that waits until interrupted, like `mem watch`, ends quietly itself); its argument,
    when it has one, what is said of it instead of INTERRUPTED."""


INTERRUPTED = "what was recorded stays recorded, and the views and files catch up at the next command"


class LazyGroup(TyperGroup):
    """The root group: knows every command's name, and imports a command's module and builds the command
    only when asked for it (to run it, or to list it in help)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # typer would exit 130 without a word
            raise Interrupted() from None

    def list_commands(self, ctx) -> list[str]:
        return list(dict.fromkeys([*self.commands, *registered(), *COMMAND_MODULES]))

    def get_command(self, ctx, name: str):
        if name not in self.commands:
            self.load(name)
        return self.commands.get(name)

    def load(self, name: str) -> None:
        """Builds `name` from its registration, importing its modules first; a name nobody registered
        imports every module and builds every command, so that typo suggestions see them all."""
        import importlib
        from typer.main import get_command_from_info, get_group_from_info

        known = name in COMMAND_MODULES or name in registered()
        modules = [COMMAND_MODULES[name], *GROUP_EXTRAS.get(name, ())] if name in COMMAND_MODULES else \
            [] if known else sorted(set(COMMAND_MODULES.values()))
        for module in modules:
            importlib.import_module(f".{module}", __package__)
        style = {"pretty_exceptions_short": app.pretty_exceptions_short, "rich_markup_mode": app.rich_markup_mode}
        for command_name, info in registered().items():
            if command_name not in self.commands and (command_name == name or not known):
                self.commands[command_name] = (
                    get_group_from_info(info, suggest_commands=app.suggest_commands, **style)
                    if isinstance(info, TyperInfo) else get_command_from_info(info, **style))


def registered() -> dict:
    """The commands and groups registered on `app` so far, by name, in the order they were."""
    return {**{info.name or info.callback.__name__.lower().replace("_", "-"): info for info in app.registered_commands},
            **{info.name: info for info in app.registered_groups}}


def root_command() -> LazyGroup:
    """`mem` as a click group holding no command yet: each is built when it runs (see LazyGroup)."""
    from typer.main import get_command

    commands, groups = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = [], []
    try:
        return get_command(app)
    finally:
        app.registered_commands, app.registered_groups = commands, groups


app = typer.Typer(help="mindlog: an event-sourced memory store for AI agents.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False, cls=LazyGroup,
                  context_settings={"help_option_names": ["-h", "--help"]})  # every command's, as its context's parent
page_app = typer.Typer(help="Pages of the mind wiki (mind/<slug>.md).", no_args_is_help=True)
always_app = typer.Typer(help="The `## Always` section of mind.md.", no_args_is_help=True)
app.add_typer(page_app, name="page")
app.add_typer(always_app, name="always")

state = {"workspace": None, "refused": set()}

JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")
ForceOpt = typer.Option(False, "--force", help="Overwrite files that were edited by hand.")


def print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"mem {version('mindlog')}")
        raise typer.Exit()


@app.callback()
def main_options(workspace: Optional[Path] = typer.Option(
        None, "--workspace", "-w", envvar="MEM_WORKSPACE", help="The workspace (default: the one around the cwd)."),
        version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                     help="Print mem's version and exit.")):
    state["workspace"] = workspace


def unwritten_warnings(report) -> list[str]:
    """What a refresh left unwritten, said: files edited by hand, and files due in a page folder moved aside (nc33a:
    they were called edited by hand)."""
    said = [f"not overwriting hand-edited {', '.join(report.refused)} (see `mem status`)"] if report.refused else []
    if report.gone:
        said.append(f"not writing {', '.join(report.gone)}: its folder is gone (moved aside?); put it back, or `mem "
                    "replay` writes it again from the log (see `mem status`)")
    return said


@contextlib.contextmanager
def memory(refresh: bool = True, rebuild_damaged: bool = False):
    """The workspace's Memory for one command, caught up first unless `refresh` is False. Says at the end
    when an append was recorded but the views could not follow it."""
    from projections.memory import Memory

    with Memory.open(state["workspace"], rebuild_damaged=rebuild_damaged) as mem:
        if refresh:
            report = caught_up(mem)
            state["refused"] = set(report.unwritten)  # said here once: a pull's report names them again
            for warning in unwritten_warnings(report):
                typer.echo(f"warning: {warning}", err=True)
        head = mem.log.head()
        try:
            yield mem
        finally:
            if mem.behind:
                typer.echo(f"warning: {mem.behind}", err=True)
            if clock := mem.clock_behind(head):
                typer.echo(f"warning: {clock}", err=True)


def caught_up(mem):
    """`mem.refresh()`, but files that cannot be written (a folder not writable, a read-only mount of mind/) leave the
    views caught up and the command going, said in a warning: a read needs the views, not the files (nc17a)."""
    from eventstore.errors import storage_failure
    from projections.materialize import FileReport

    try:
        return mem.refresh()
    except OSError as exc:
        mem.refresh(files=False)
        mem.behind = (f"the files could not be brought up to date ({storage_failure(exc)}); the views are, and the "
                      "files are written at the next command that can")  # said once at the end: a write may say more
        return FileReport()


def read_input(file: str, limit: int | None = None, what: str = "the input") -> bytes:
    """The bytes of `file` (- for stdin), refused past `limit` bytes, by default past an event's most. Every
    `--file` is read here."""
    if limit is None:
        from eventstore.envelope import EVENT_LIMIT, MAX_BODY_BYTES

        return _read_at_most(file, MAX_BODY_BYTES, f"{what} is more than {MAX_BODY_BYTES // 2**20} MiB; {EVENT_LIMIT}")
    return _read_at_most(file, limit, f"{what} is more than {limit} bytes; the limit is {limit}")


def _read_at_most(file: str, limit: int, refusal: str) -> bytes:
    """At most limit + 1 bytes are read, so a stream that does not end (stdin from a runaway tool, /dev/zero, a
    FIFO) costs no more than a file at the limit."""
    try:
        if file == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(file, "rb") as stream:
                raw = stream.read(limit + 1)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")
    if len(raw) > limit:
        raise TooLarge(refusal)
    return raw


def read_page(file: str) -> bytes:
    from eventstore.validate import MAX_PAGE_BYTES

    return read_input(file, MAX_PAGE_BYTES, "the page")


AtOpt = typer.Option(None, "--at", help=AT_HELP)
SeqOpt = typer.Option(None, "--seq", help="A log position.")


def as_of(mem, at: Optional[str], seq: Optional[int]) -> int:
    if at is not None and seq is not None:
        fail("give --at or --seq, not both", 2)
    if at is None:
        return mem.seq_at(seq=seq)
    return resolve_at(mem, at)[0]


def said_on_stderr(line: str) -> None:
    typer.echo(line, err=True)


def resolve_at(mem, at: str, say=said_on_stderr) -> tuple[int, int]:
    """(seq, instant) for a typed moment; `say` (stderr) is told which instant it was understood as."""
    moment = mem.moment(at)
    say(str(moment))
    return moment.seq, moment.at_ms


def point(mem, text: str, say=said_on_stderr) -> int:
    """A moment given as `seq:N` or as --at takes it."""
    if text.startswith("seq:"):  # `seq:-1` was "not a time"; `seq:²` (a digit to isdigit) a ValueError
        from eventstore.errors import InvalidInput

        if not text[4:].lstrip("-").isascii() or not text[4:].lstrip("-").isdigit() or text.count("-") > 1:
            raise InvalidInput(f"{text!r:.120} is not a seq: seq:N takes a whole number N (seqs start at 1)")
        return mem.seq_at(seq=int(text[4:]))
    return resolve_at(mem, text, say)[0]


# --- workspace ----------------------------------------------------------------------------------

@app.command()
def init(agent: Optional[str] = typer.Option(None, "--agent", help="This agent's name (default: agent)."),
         log: Optional[str] = typer.Option(None, "--log", help="Keep the event log in PostgreSQL: a "
                                           "postgresql:// URL (default: .mem/log.db, SQLite).")):
    """Create a workspace: mind.md, mind/, and .mem/ (the log and the views)."""
    from eventstore.backends import shown
    from eventstore.workspace import Workspace, absolute, current_directory
    from projections.memory import Memory

    root = state["workspace"] or current_directory()
    existed = Workspace(root).exists
    outer = None if existed else Workspace.around(absolute(root).parent)
    wiki = not existed and any((Path(root) / name).exists() for name in ("mind.md", "mind"))
    with Memory.init(root, agent, log) as mem:
        where = f"; log in {shown(mem.config.log)}" if mem.config.log else ""
        if existed:
            typer.echo(f"{mem.root} is already a workspace (agent {mem.config.agent}{where}): nothing changed")
        else:
            typer.echo(f"initialised {mem.root} for agent {mem.config.agent}{where}")
        if wiki:  # the files are left as they are, for adopt to record (nc24b)
            typer.echo("it holds a wiki already (mind.md, mind/): `mem adopt` records its pages, `## Always` lines "
                       "and change log as the log's first events")
        if outer is not None:
            typer.echo(f"note: {mem.root} is inside the workspace {outer.root} (agent {outer.config().agent}): "
                       "commands run in it or below it use the new one, and the outer one keeps none of its files",
                       err=True)


@app.command()
def status(json: bool = JsonOpt, fetch: bool = typer.Option(False, "--fetch", help="Ask each hub how far behind "
                                                            "this workspace is (otherwise only a quick try).")):
    """Views against the log, files edited by hand, conflicts, and per remote what waits to go out or in."""
    from .sync_commands import show_status

    show_status(json, fetch)


# --- pages and Always ---------------------------------------------------------------------------

LayerOpt = typer.Option(None, "--layer", help="A shared pages layer instead of the wiki.")


@page_app.command("write")
def page_write(slug: str,
               file: str = typer.Option(..., "--file", "-f", help="The page: frontmatter + markdown (- for stdin)."),
               note: str = typer.Option("", "--note", help="Why: the log entry's text (cite [S<seq>])."),
               layer: Optional[str] = LayerOpt, force: bool = ForceOpt, allow_secret: bool = AllowSecretOpt,
               if_version: Optional[str] = typer.Option(
                   None, "--if-version", help="Write only if the page's current version is still this one (its seq, "
                   "as `mem history` and this command print it, or its id): the version the file was made from; 0: "
                   "only if the page has none. Otherwise refused, nothing written. Without it the last writer wins.")):
    """Ingest a page when new, update it otherwise (a page that holds this already: nothing recorded)."""
    from projections.memory import Unchanged

    if layer is not None and layer != MIND and if_version is not None:
        fail("--if-version is for wiki pages: a shared page written from its file names the version the file "
             "showed as its parent, so a version written meanwhile stays a conflict", 2)
    with memory() as mem:
        if layer is not None and layer != MIND:
            event = mem.shared_page_write(layer, slug, read_page(file), note, allow_secret=allow_secret)
        else:
            _named_layer(mem, slug, "write", "--file FILE")
            event = mem.write_page(slug, read_page(file), note, force=force, allow_secret=allow_secret,
                                   if_version=if_version)
            if isinstance(event, Unchanged):
                return typer.echo(f"unchanged {event.path}: it is version {event.version.seq} already; nothing "
                                  "recorded (--force records it again)")
        path = mem.page_file(layer or MIND, event.body.slug)
    typer.echo(f"{event.kind.split('.')[1]} {path} (seq {event.seq})")


NoteOpt = typer.Option("", "--note", help="Why: the log entry's text (cite [S<seq>]).")


def _named_layer(mem, slug: str, command: str, rest: str = "") -> None:
    """Refuses a wiki page's slug that is a shared page's LAYER/SLUG, as `mem show` and `mem history` name it,
    saying how the command writes that page (nc33b: "a slug is one name" did not say)."""
    layer, _, page = slug.partition("/")
    spec = mem.views.contract.layers.get(layer) if mem.views.contract is not None and page else None
    if spec is not None and spec.format == "pages" and "/" not in page:
        fail(f"{slug} names page {page} of layer {layer}: `mem page {command} {page}{' ' + rest if rest else ''} "
             f"--layer {layer}` {'writes' if command == 'write' else command + 's'} it", 2)


@page_app.command("delete")
def page_delete(slug: str, note: str = NoteOpt, force: bool = ForceOpt,
                layer: Optional[str] = LayerOpt, allow_secret: bool = AllowSecretOpt):
    """Delete a page; the delete is an event and a log entry."""
    if layer is not None and layer != MIND:
        from .sync_commands import shared_page_delete

        return shared_page_delete(layer, slug, note, allow_secret)
    with memory() as mem:
        _named_layer(mem, slug, "delete")
        event = mem.delete_page(slug, note, force=force, allow_secret=allow_secret)
    typer.echo(f"delete mind/{event.body.slug}.md (seq {event.seq})")


@page_app.command("rename")
def page_rename(old: str, new: str, note: str = NoteOpt, force: bool = ForceOpt,
                layer: Optional[str] = LayerOpt, allow_secret: bool = AllowSecretOpt):
    """Rename a page (its history stays under both names)."""
    if layer is not None and layer != MIND:
        from .sync_commands import shared_page_rename

        return shared_page_rename(layer, old, new, note, allow_secret)
    with memory() as mem:
        _named_layer(mem, old, "rename", new.rpartition("/")[2])
        event = mem.rename_page(old, new, note, force=force, allow_secret=allow_secret)
    typer.echo(f"rename mind/{event.body.old}.md -> mind/{event.body.new}.md (seq {event.seq})")


@page_app.command("release")
def page_release(slug: str, note: str = typer.Option(..., "--note", help="Why the held page may change now."),
                 layer: Optional[str] = LayerOpt):
    """Lift a page's `governance: hold` so that it can be updated, renamed or deleted (logged)."""
    with memory() as mem:
        typer.echo(release(mem, slug, note, layer))


def release(mem, slug: str, note: str, layer: str | None) -> str:
    """Releases a held wiki page, or a page of a shared layer; the line that says so (the CLI's and MCP's)."""
    if layer is not None and layer != MIND:
        event = mem.release_shared_page(layer, slug, note)
    else:
        event = mem.release_page(slug, note)
    return f"release {mem.page_file(layer or MIND, event.body.slug)} (seq {event.seq})"


@page_app.command("list")
def page_list(json: bool = JsonOpt, layer: Optional[str] = LayerOpt, at: Optional[str] = AtOpt,
              seq: Optional[int] = SeqOpt):
    """The pages in the catalog, with their hooks, now or as of a moment (or a shared layer's pages, with
    their heads)."""
    if layer is not None and layer != MIND:
        from .sync_commands import shared_page_list

        return shared_page_list(layer, json, at, seq)
    with memory() as mem:
        pages = mem.catalog(as_of(mem, at, seq) if at is not None or seq is not None else None)
    listing(pages, json, lambda page: f"{page.slug:<28} {page.title}" + (f" — {page.hook}" if page.hook else ""),
            "no pages")


@always_app.command("add")
def always_add(line: str, at: Optional[int] = typer.Option(None, "--at", help="Put it at line N (as `mem always list` "
                                                            "numbers them); default: at the end."),
               force: bool = ForceOpt, allow_secret: bool = AllowSecretOpt):
    """Add a line to `## Always`."""
    with memory() as mem:
        event = mem.always_add(line, position=at, force=force, allow_secret=allow_secret)
    typer.echo(f"always + {event.body.line} (seq {event.seq})")


@always_app.command("remove")
def always_remove(number: int, force: bool = ForceOpt,
                  if_line: Optional[str] = typer.Option(None, "--if-line", help="Remove it only if line N still reads "
                                                        "this (as `mem always list` showed it): nothing is removed "
                                                        "when another write moved the lines since.")):
    """Remove line N (as numbered by `mem always list`)."""
    with memory() as mem:
        event = mem.always_remove(number, force=force, if_line=if_line)
    typer.echo(f"always - {event.body.line} (seq {event.seq})")


@always_app.command("list")
def always_list(json: bool = JsonOpt, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt):
    """The `## Always` lines, numbered, now or as of a moment."""
    with memory() as mem:
        lines = mem.always(as_of(mem, at, seq) if at is not None or seq is not None else None)
    if json:
        return emit_json(lines)
    if not lines:
        typer.echo("no Always lines", err=True)
    for number, line in enumerate(lines, 1):
        typer.echo(f"{number:>3}  {line}")


# --- point in time ------------------------------------------------------------------------------


def why_absent(mem, path: str, moment: int, asked: bool, tools: bool = False) -> str:
    """Why `path` shows nothing as of `moment` (`asked`: a moment was given), with the way to what it was: the
    page deleted, renamed, moved by the contract, or under its older name then (nc24b: a rename read as a delete).
    `tools`: the way named as the MCP `show` tool takes it (nc33a: it said a dropped layer's page did not exist)."""
    from projections.history import by_contract, history, moved
    from projections.views import page_path, slug_of

    def shows(name: str, seq: int | None) -> str:
        if tools:
            return f"the show tool with path {name!r}" + (f" and seq {seq}" if seq is not None else "")
        return f"`mem show {shlex.quote(name)}" + (f" --seq {seq}`" if seq is not None else "`")

    versions = [version for version in history(mem, path) if version.seq <= moment]
    last = versions[-1] if versions else None
    if last is not None and last.deleted:  # the way back to it, where "does not exist" was all it said
        rename = mem.event(last.seq).body if last.kind == "page.rename" else None
        if by_contract(last):  # not deleted (nc21a)
            gone = f"{path}: {moved(mem, last)} at seq {last.seq}"
        elif rename is not None and hasattr(rename, "new"):
            new, at_seq = page_path(rename.new), last.seq
            while True:  # renamed again since: the name it has by the moment (nc25a: it named the one between)
                later = [v for v in history(mem, new, moment) if v.seq > at_seq]
                if not (later and later[-1].deleted and later[-1].kind == "page.rename"):
                    break
                at_seq = later[-1].seq
                new = page_path(getattr(mem.event(at_seq).body, "new", slug_of(new)))
            then = moment if asked else None
            deleted = later[-1].seq if later and later[-1].deleted else None  # nc34a: named a show that failed too
            after = "" if deleted is None else f", deleted at seq {deleted}"
            shown = shows(new, then if deleted is None else deleted - 1)
            gone = f"{path} was renamed to {new} at seq {last.seq}{after} ({shown})" if at_seq == last.seq else \
                f"{path} was renamed at seq {last.seq}, and is {new} by then{after} ({shown})"
        else:
            gone = f"{path} was deleted at seq {last.seq}"
        return f"{gone}; {shows(path, last.seq - 1)} shows it as it was"
    if last is not None and last.path != path:  # the page had its older name then
        return f"{path} did not exist then: the page was {last.path} ({shows(last.path, moment)})"
    return f"{path} did not exist then" if asked else f"{path} does not exist"


def citation_gone(mem, result, moment: int, asked: bool, tools: bool = False) -> str | None:
    """Why a file citation that resolves to nothing names no file then, when its file was there once (moved by the
    contract, renamed, deleted: `why_absent`), with the way to it; None when it never was (nc36b: `cite` said "no such
    file" where `show` names the move)."""
    if result.kind != "file" or result.resolved or not result.path:
        return None
    said = why_absent(mem, result.path, moment, asked, tools=tools)
    return None if said.endswith(("does not exist", "did not exist then")) else said


@app.command()
def show(path: str, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt):
    """Print mind.md, mind/log.md or mind/<slug>.md (or a page by its slug) as of any moment."""
    with memory() as mem:
        moment = as_of(mem, at, seq)
        path = mem.named_file(path, moment)
        text = mem.show(path, moment)
        binary = mem.binary_file(path, moment) if text is not None and text.startswith("<") else None
        absent = why_absent(mem, path, moment, at is not None or seq is not None) if text is None else None
    if text is None:
        fail(absent)
    if binary is not None and not sys.stdout.isatty():
        sys.stdout.flush()
        sys.stdout.buffer.write(binary)
        return
    sys.stdout.write(text if binary is None else text + "\n")
    if binary is not None:
        said_on_stderr(f"{path} is not text: `mem show {shlex.quote(path)} > FILE` writes its {len(binary):,} bytes")


@app.command()
def checkout(directory: Path, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt,
             force: bool = typer.Option(False, "--force", help="Write into a non-empty directory (never a workspace).")):
    """Write the workspace's files as they were into DIRECTORY (a new or empty directory outside any workspace);
    `mem export adf --at` writes the whole memory, loop and audit too."""
    with memory() as mem:
        point_seq = as_of(mem, at, seq)
        done = mem.checkout(directory, point_seq, force=force)
    typer.echo(f"wrote {len(done.written)} files as of seq {point_seq} to {directory}")
    if done.left:
        count = f"{len(done.left):,}{' or more' if done.more_left else ''}"
        more = f" and {len(done.left) - 5:,} more" if len(done.left) > 5 else ""
        typer.echo(f"left {count} {'file' if len(done.left) == 1 else 'files'} there that seq {point_seq} "
                   f"does not hold (a checkout deletes nothing): {', '.join(done.left[:5])}{more}")


@app.command()
def diff(path: str, from_: str = typer.Option(..., "--from", help="A moment (as --at takes it) or seq:N."),
         to: str = typer.Option(None, "--to", help="A moment (as --at takes it) or seq:N (default: now).")):
    """A unified diff of one file between two moments."""
    from projections.history import diff as diff_of

    with memory() as mem:
        a, b = point(mem, from_), (point(mem, to) if to else mem.seq_at())
        path = mem.named_file(path, a, b)
        sys.stdout.write(diff_of(mem, path, a, b))


@app.command()
def history(path: str, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """Every version of a file (or a page by its slug), following renames, now or as of a moment."""
    from projections.history import described, history as history_of

    with memory() as mem:
        moment = as_of(mem, at, seq) if at is not None or seq is not None else None
        path = mem.named_file(path, mem.seq_at() if moment is None else moment)
        versions = described(mem, history_of(mem, path, moment))
        as_made = not versions and mem.show(path, mem.seq_at() if moment is None else moment) is not None
    if as_made and not json:
        typer.echo(f"{path} is as the workspace began: no event has changed it{' by then' if moment else ''}")
    elif not versions and not as_made:
        fail(f"{path} never existed" if at is None and seq is None else f"{path} had not existed by then")
    if json:
        return emit_json(versions)
    for v in versions:
        typer.echo(f"{v.seq:>6}  {v.recorded_at}  {v.agent:<10} {v.kind:<14} {v.path}"
                   + (f"  ({v.change})" if v.change else "")
                   + ("" if v.shown else "  (not shown: the other side of a conflict)")
                   + (f" — {v.note}" if v.note else ""))  # the web history's notes, here too (nc23b)


# --- the log ------------------------------------------------------------------------------------

@app.command("log")
def log_(kind: Optional[list[str]] = typer.Option(None, "--kind", help="Only these kinds (repeatable)."),
         layer: Optional[list[str]] = typer.Option(None, "--layer", help="Only these layers (repeatable)."),
         since: Optional[str] = typer.Option(None, "--since", help="Recorded at or after this time."),
         n: Optional[int] = typer.Option(None, "-n", help="The newest N only."),
         json: bool = JsonOpt):
    """The events themselves, oldest first."""
    with memory(refresh=False) as mem:
        since_ms = mem.past_instant(since) if since else None
        if since_ms is not None:
            typer.echo(f"since {format_local(since_ms)}", err=True)
        events = mem.events(kinds=kind, layers=layer, since_ms=since_ms, limit=n)
    listing(events, json, event_line, "no events: -n 0 asks for none" if n == 0 else "no events match" if kind or layer
            or since else "no events")


UNVERIFIED = ("the views were rebuilt from the log as stored, its digests unchecked: `mem verify` checks them and "
              "names an event changed outside mindlog")
"""Said after every replay. Checking each event's digest as the replay reads it made a replay of 200,000 events
take a third more CPU (4.0 s against 3.0, bench_replay.py side by side), for a change that only a hand on the log
file makes; `mem verify` does it on demand."""


def _terminated(_signum, _frame) -> None:
    """SIGTERM (`kill`, `timeout`, a service manager) ends a replay as Ctrl-C does: its clean-up runs (a `--check`
    removes its rebuilt copy of the memory). Servers keep SIGTERM as uvicorn handles it."""
    raise KeyboardInterrupt


@app.command()
def replay(to: Optional[int] = typer.Option(None, "--to", help="Rebuild as of this seq (1 to the log head)."),
           check: bool = typer.Option(False, "--check", help="Rebuild elsewhere, as far as the views have come, "
                                      "and report differences only (not with --to: the views hold only their "
                                      "latest state, so an earlier rebuild would always differ)."),
           force: bool = ForceOpt,
           log_as_is: bool = typer.Option(False, "--log-as-is", help="Rebuild even from a log the views say lost "
                                          "events at its end, or is not theirs (what it lost leaves the views)."),
           json: bool = JsonOpt):
    """Delete every view and rebuild it from the log."""
    from projections import replay as replaying

    signal.signal(signal.SIGTERM, _terminated)

    if check and to is not None:
        fail("--check compares the views as they are with a rebuild; it takes no --to", 2)
    with memory(refresh=False, rebuild_damaged=not check) as mem:
        total = to if to is not None else mem.head()
        with progress_bar("replay", total) as advance:
            if check:
                try:
                    report = replaying.check(mem, progress=advance)
                except KeyboardInterrupt:
                    raise Interrupted("a check changes nothing (its rebuilt copy is removed)") from None
            else:
                report = replaying.replay(mem, to, force=force, progress=advance, log_as_is=log_as_is)
    if json:
        emit_json(report)
        if not check:
            typer.echo(f"note: {UNVERIFIED}", err=True)
        raise typer.Exit(1 if check and not report.same else 0)
    if check:
        if report.caught_up_from is not None:
            typer.echo(f"the views were at seq {report.caught_up_from}, behind the log (a `replay --to`, or a command cut off): "
                       "caught them up first")
        pending = len(report.not_yet_written)  # not a difference: said as such, not under "no differences" (nc24b)
        typer.echo(f"rebuilt to seq {report.checkpoint}: " + ("no differences" if report.same else "DIFFERENT")
                   + (f" (and {pending:,} file{'s' * (pending > 1)} not yet written, which the next command writes)"
                      if pending else ""))
        lines = [*report.differences,
                 *(f"file {path} not yet written (the next command writes it)" for path in report.not_yet_written)]
        for line in lines[:CHECK_LINES]:
            typer.echo(f"  {line}")
        if len(lines) > CHECK_LINES:
            typer.echo(f"  ... and {len(lines) - CHECK_LINES:,} more (`mem replay --check --json` lists them all)")
        raise typer.Exit(0 if report.same else 1)
    typer.echo(f"replayed {event_count(report.events)}; views at seq {report.checkpoint}; "
               f"{len(report.files.written)} files written, {len(report.files.removed)} removed")
    typer.echo(f"note: {UNVERIFIED}", err=True)


CHECK_LINES = 20
"""The most differences `mem replay --check` prints (a workspace whose files were all deleted has thousands)."""


@app.command()
def verify(json: bool = JsonOpt):
    """Check every event's digest and the chain, and that the log reaches as far as the views and the
    sync cursors say it must; report each bad seq (the first 21; --json says how many more)."""
    from sync.client import push_cursors

    with memory(refresh=False) as mem:
        with progress_bar("verify", mem.head()) as advance:
            report = mem.verify(progress=lambda _n: advance(1), cursors=push_cursors(mem))
    if json:
        emit_json(report)
    elif report.ok:
        redacted = f" ({report.redacted} redacted)" if report.redacted else ""
        typer.echo(f"ok: {event_count(report.checked)}{redacted}, digests and chain intact")
    else:
        typer.echo(f"BAD at seq {report.first_bad_seq}: {report.problem}")
        for seq, problem in report.later:
            typer.echo(f"BAD at seq {seq}: {problem}")
        if report.more:
            typer.echo(f"and {report.more:,} more (--json lists the first {len(report.later) + 1})")
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def adopt(json: bool = JsonOpt, allow_secret: bool = AllowSecretOpt):
    """Turn direct edits of the wiki files (pages, `## Always` lines in mind.md) into events."""
    from projections.adopt import adopt as adopting

    with memory(refresh=False) as mem, progress_bar("adopt", None) as advance:
        report = adopting(mem, allow_secret=allow_secret, progress=advance)
    if json:
        emit_json(report)
        raise typer.Exit(1 if report.refused else 0)
    for line in adopted_lines(report):
        typer.echo(line)
    for path, why in report.refused.items():
        typer.echo(f"left {one_line(path)}: {why}")
    if not report.adopted and not report.refused and not report.renamed:
        typer.echo("nothing edited by hand")
    raise typer.Exit(1 if report.refused else 0)


def adopted_lines(report) -> list[str]:
    from projections.views import MIND_PATH

    return ([f"adopted {one_line(path)}" + (" (deleted)" if path in report.deleted else "") for path in report.adopted]
            + [f"adopted {one_line(old)} -> {one_line(new)} (a rename)" for old, new in report.renamed.items()]
            + [f"kept {path} as it was, from before mindlog, as {kept} (`mem show {kept}`): " + (
                "all but its `## Always` lines is made from the pages now" if path == MIND_PATH else
                "its entries are in the log, written as mindlog writes them") for path, kept in report.kept.items()])


DAY_MS = 86_400_000


@app.command()
def watch(debounce_ms: int = typer.Option(300, "--debounce-ms", help="Adopt once the files have been quiet this "
                                          "long after an edit (at most ten times as long while edits go on).")):
    """Adopt direct edits as they happen, until interrupted."""
    if not 0 <= debounce_ms <= DAY_MS:
        fail(f"--debounce-ms must be between 0 and {DAY_MS} (a day), not {debounce_ms}", 2)
    from projections.adopt import adopt as adopting, quiet_after_edits
    from projections.materialize import file_hash

    with memory() as mem:
        typer.echo(f"watching {mem.root} for direct edits (Ctrl-C to stop)", err=True)
        told: dict[str, str] = {}  # a refusal is said once, until the file or the reason changes
        began = None  # the log head when the adoption under way began

        def adopt_and_say() -> None:
            nonlocal began
            try:
                began = mem.log.head()
                report = adopting(mem)
            except (MemError, *storage_exceptions()) as exc:  # the files in a state no adoption can take (`mind`
                # a file), a log whose database does not answer (nc35a: it ended the watch): said, watched on
                if not isinstance(exc, MemError) and not unavailable(exc):
                    raise
                began = None
                said = exc.told("cli") if isinstance(exc, MemError) else f"the event log does not answer ({exc})"
                if unavailable(exc):
                    said = f"{said.removesuffix(TRY_LATER)}; an edit once it answers adopts this one too"
                if told.get("") != said:
                    told[""] = said
                    typer.echo(f"error: {one_line(said)} (watching on)", err=True)
                return
            began = None
            told.pop("", None)
            for path in (*report.adopted, *report.renamed.values()):
                told.pop(path, None)
            for line in adopted_lines(report):
                typer.echo(line)
            for path, why in report.refused.items():
                target = mem.root / path  # a directory made under mind/ is refused too: it has no hash
                said = f"{why}\0{file_hash(target) if target.is_file() else 'not a file'}"
                if told.get(path) != said:
                    told[path] = said
                    typer.echo(f"left {one_line(path)}: {why}")

        try:
            for _quiet in quiet_after_edits(mem.root, debounce_ms):  # first: what was edited before, as `mem adopt`
                adopt_and_say()
        except KeyboardInterrupt:
            try:
                head = mem.log.head() if began is not None else None
            except (MemError, *storage_exceptions()):  # stopped while its log's database does not answer
                head = None
            if head is not None and head > began:  # stopped in the middle: what it adopted is recorded, not yet said
                typer.echo(f"stopped while adopting: {event_count(head - began)} recorded (up to seq {head}); "
                           "the files catch up at the next command", err=True)


@app.command()
def mcp(http: Optional[str] = typer.Option(None, "--http", help="Serve streamable HTTP on HOST:PORT (host "
                                           "127.0.0.1 unless given; any other requires a token) instead of stdio."),
        token_file: Optional[Path] = typer.Option(None, "--token-file", help="With --http: require this bearer "
                                                  "token (read from FILE, made there when missing), even on loopback. "
                                                  "Off loopback a token is always required: without this option a "
                                                  "new one is printed at each start.")):
    """Serve this workspace to MCP clients: Claude's memory-tool commands and mindlog's own tools."""
    from .mcp_server import serve

    if token_file is not None and http is None:
        fail("--token-file guards --http; over stdio the client that starts `mem mcp` is the only one", 2)
    with memory() as mem:
        serve(mem, http, token_file)


@app.command()
def demo(keep: Optional[Path] = typer.Option(None, "--keep", help="Run in this directory and keep it.")):
    """Run one agent through its memory's life, then a team of three through a hub, in a temporary directory, and
    show each step."""
    from .demo import run_demo

    run_demo(keep)


def hoist_workspace(argv: list[str]) -> list[str]:
    """Lets `--workspace DIR` (or `-w DIR`) come after the command too: `mem init --workspace DIR`."""
    for i, arg in enumerate(argv[1:], 1):
        if arg in ("--workspace", "-w") and i + 1 < len(argv):
            return [arg, argv[i + 1], *argv[:i], *argv[i + 2:]]
        if arg.startswith("--workspace="):
            return [arg, *argv[:i], *argv[i + 1:]]
    return argv


def register_commands() -> None:
    """Imports every module that registers commands on `app` (`main` imports only the one a command needs)."""
    import importlib

    for module in sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f".{module}", __package__)


def damaged_file(exc: BaseException):
    """The command's hub database (`state["hub"]`, a SQLite file the command opened) or workspace file a
    "damaged" SQLite error came from, as one named error (or None)."""
    from eventstore.errors import Damaged, is_damaged
    from eventstore.workspace import Workspace, sqlite_damage

    hub = state.get("hub")
    if hub is not None:
        if not is_damaged(exc):
            return None
        detail = sqlite_damage(hub) or " ".join(str(exc).split())
        return Damaged(f"the hub database {hub} is damaged: {detail}")
    try:
        return Workspace.find(state["workspace"]).damage(exc)
    except MemError:
        return None


def _a_value_taken_for_an_option(exc) -> bool:
    """A usage error for an "option" that is a value starting with '-' (an Always line `- [x] done`, a number -1)."""
    name = getattr(exc, "option_name", None)
    return (type(exc).__name__ == "NoSuchOption" and isinstance(name, str)
            and (name == "-" or name[1:2].isdigit() or " " in name))


PIPED_COLUMNS = 120
"""The width of help written to a pipe or a file (a terminal's own width otherwise; COLUMNS overrides both)."""


def main() -> None:
    """Runs `mem`; every error, a usage error too, ends as one `error: ...` line when `plain()`."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort

    tune_typer()
    strip_escapes_in_pipes()
    if not sys.stdout.isatty():  # help in a pipe was 80 columns wide, its longer option names cut (nc27b)
        os.environ.setdefault("COLUMNS", str(PIPED_COLUMNS))
    if sys.stdout.isatty():
        sys.stdout = TerminalSafe(sys.stdout)
    for arg in sys.argv[1:]:
        try:
            arg.encode()
        except UnicodeEncodeError:  # bytes that are not UTF-8, as Python hands them over (surrogate-escaped)
            typer.echo(f"error: the argument {arg.encode(errors='surrogateescape')!r} is not valid UTF-8", err=True)
            sys.exit(2)
    try:
        code = root_command()(args=hoist_workspace(sys.argv[1:]), standalone_mode=False)
    except MemError as exc:
        typer.echo(f"error: {with_cwd_note(exc.told('cli'))}", err=True)
        sys.exit(1)
    except storage_exceptions() as exc:  # the disk, SQLite or PostgreSQL failed under the command
        typer.echo(f"error: {with_cwd_note(damaged_file(exc) or storage_failure(exc))}", err=True)
        sys.exit(1)
    except OverflowError:  # a number in a text argument (`[S<seq>]`, a seq to redact) past what the log holds
        typer.echo(f"error: {TOO_LARGE}", err=True)
        sys.exit(1)
    except ClickException as exc:
        if isinstance(exc, NoArgsIsHelpError):  # a group given no command: its help is printed already (nc26b)
            sys.exit(exc.exit_code)
        if _a_value_taken_for_an_option(exc):
            exc.message = (exc.message.rstrip() + ": a value that starts with '-' goes after `--` (`mem always add -- "
                           "'- [x] done'`, `mem config set lint.mind_max_lines -- -1`)")
        if plain():
            typer.echo(f"error: {exc.format_message()}", err=True)
        else:
            from typer import rich_utils

            rich_utils.rich_format_error(exc)
        sys.exit(exc.exit_code)
    except Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except (Interrupted, KeyboardInterrupt) as exc:
        typer.echo(f"error: interrupted; {exc.args[0] if isinstance(exc, Interrupted) and exc.args else INTERRUPTED}",
                   err=True)
        sys.exit(130)
    finally:  # the command has ended and said so: a Ctrl-C now would only kill the interpreter's shutdown by the signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
