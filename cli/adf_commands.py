"""`mem loop`, `file`, `message`, `config`, `audit`, `cite`, `believed`, `lint`, `export`, `import`."""

import json as jsonlib
import sys
from pathlib import Path
from typing import Optional

import typer

from eventstore.errors import InvalidInput
from eventstore.instants import LAST_MS, format_instant
from eventstore.validate import MAX_FILE_BYTES

from .app import AtOpt, JsonOpt, SeqOpt, app, as_of, citation_gone, fail, memory, read_input, state
from .output import (AllowSecretOpt, cleared_line, compacted_line, emit_json, event_count, hit_line, listing,
                     progress_bar, summary_text, unresolved_line)

loop_app = typer.Typer(help="The loop (transcript): append, show, compact, clear.", no_args_is_help=True)
file_app = typer.Typer(help="Files in adf_files.", no_args_is_help=True)
message_app = typer.Typer(help="Inbox and outbox messages.", no_args_is_help=True)
config_app = typer.Typer(help="The agent config (audit switches).", no_args_is_help=True)
audit_app = typer.Typer(help="The audit table: what compaction, clears and deletes archived.", no_args_is_help=True)
export_app = typer.Typer(help="Export to other formats.", no_args_is_help=True)
import_app = typer.Typer(help="Import from other formats.", no_args_is_help=True)
for sub, name in ((loop_app, "loop"), (file_app, "file"), (message_app, "message"), (config_app, "config"),
                  (audit_app, "audit"), (export_app, "export"), (import_app, "import")):
    app.add_typer(sub, name=name)

LoopOpt = typer.Option("main", "--loop", help="The loop's name.")


def parse_json(text: str, what: str):
    try:
        return jsonlib.loads(text)
    except jsonlib.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None


@loop_app.command("append")
def loop_append(role: str = typer.Option(..., "--role", help="user or assistant"),
                text: Optional[str] = typer.Option(None, "--text", help="The message text."),
                file: Optional[str] = typer.Option(None, "--file", help="A text file (- for stdin)."),
                blocks: Optional[str] = typer.Option(None, "--content-json", help="The content as a JSON array of "
                                                     "blocks, as adf_loop's content_json holds it."),
                loop: str = LoopOpt,
                model: Optional[str] = typer.Option(None, "--model", help="The model that produced it."),
                tokens: Optional[str] = typer.Option(None, "--tokens", help="Token counts as a JSON object."),
                allow_secret: bool = AllowSecretOpt):
    """Append a message to a loop; its seq is the [S<seq>] that cites it."""
    given = [v for v in (text, file, blocks) if v is not None]
    if len(given) != 1:
        fail("give exactly one of --text, --file, --content-json", 2)
    if blocks is not None:
        content = parse_json(blocks, "--content-json")
    else:
        raw = text.encode() if text is not None else read_input(file)
        try:
            content = [{"type": "text", "text": raw.decode("utf-8")}]
        except UnicodeDecodeError:
            raise InvalidInput("the message is not valid UTF-8") from None
    with memory() as mem:
        event = mem.loop_append(role, content, loop, model, parse_json(tokens, "--tokens") if tokens else None,
                                allow_secret=allow_secret)
    typer.echo(f"[S{event.seq}] {role} appended to loop {event.body.loop}")


@loop_app.command("show")
def loop_show(loop: str = LoopOpt, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """The live loop in display order, with [S<seq>] markers."""
    with memory() as mem:
        rows = mem.loop(loop, as_of(mem, at, seq))
    listing(rows, json, lambda row: f"[S{row.seq}] {row.role}: {row.text()}", f"no rows in loop {loop}")


@loop_app.command("compact")
def loop_compact(summary_file: str = typer.Option(..., "--summary-file", help="The summary (- for stdin)."),
                 preserve: int = typer.Option(0, "--preserve", help="Keep the last N rows."), loop: str = LoopOpt,
                 allow_secret: bool = AllowSecretOpt):
    """Replace all but the last N rows with a summary; the removed rows go to the audit."""
    try:
        summary = read_input(summary_file).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidInput("the summary is not valid UTF-8") from None
    with memory() as mem:
        done = mem.loop_compact(summary, preserve, loop, allow_secret=allow_secret)
    typer.echo(compacted_line(done, loop))


@loop_app.command("clear", context_settings={"ignore_unknown_options": True})
def loop_clear(start: Optional[int] = typer.Argument(None, help="The first row removed (0 the oldest, -1 the last)."),
               end: Optional[int] = typer.Argument(None, help="The row after the last one removed (none: to the end)."),
               loop: str = LoopOpt):
    """Remove rows[START:END], a Python slice over the display order (-1 is the last row).

    Archived in the audit when audit.loop is on; the log keeps every row."""
    with memory() as mem:
        done = mem.loop_clear(start, end, loop)
    typer.echo(cleared_line(done, loop, start, end))


@file_app.command("write")
def file_write(path: str, file: str = typer.Option(..., "--file", help="The content (- for stdin)."),
               mime: Optional[str] = typer.Option(None, "--mime", help="Its media type."),
               protection: str = typer.Option("none", "--protection", help="none, read_only or no_delete"),
               allow_secret: bool = AllowSecretOpt):
    """Write a file into adf_files."""
    with memory() as mem:
        content = read_input(file, MAX_FILE_BYTES, "the file")
        event = mem.file_write(path, content, mime, protection, allow_secret=allow_secret)
    typer.echo(f"wrote {event.body.path} (seq {event.seq})")


@file_app.command("delete")
def file_delete(path: str):
    """Delete a file (snapshotted into the audit when audit.files is on)."""
    with memory() as mem:
        event = mem.file_delete(path)
    typer.echo(f"deleted {event.body.path} (seq {event.seq})")


@file_app.command("list")
def file_list(at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """Every file, the wiki's included, as adf_files shows them."""
    with memory() as mem:
        rows = mem.files(as_of(mem, at, seq))
    files = [{"path": r[0], "mime_type": r[2], "size": r[3], "protection": r[4], "updated_at": _updated_at(r[7])}
             for r in sorted(rows)]
    listing(files, json, lambda row: f"{row['path']:<36} {row['size']:>8}  {row['protection']:<9} "
            f"{_when(row['updated_at'])}", "no files")


def _updated_at(stored: str) -> str | None:
    """A file's time as listed: mind.md and mind/log.md as `mem init` made them, before any event, have none (ADF's
    row says the epoch, which read as 1970: nc22a; `--json` said so still)."""
    from projections.adf import EPOCH_ISO

    return None if stored == EPOCH_ISO else stored


def _when(updated_at: str | None) -> str:
    return "before any event" if updated_at is None else updated_at


def _message(box: str, file: str, allow_secret: bool):
    message = parse_json(read_input(file).decode("utf-8"), "the message")
    with memory() as mem:
        event = mem.message(box, message, allow_secret=allow_secret)
    typer.echo(f"{'received' if box == 'inbox' else 'sent'} message (seq {event.seq})")


MessageOpt = typer.Option(..., "--file", help="The message: a JSON object in a file (- for stdin).")


@message_app.command("receive")
def message_receive(file: str = MessageOpt, allow_secret: bool = AllowSecretOpt):
    """Record an inbound message in adf_inbox."""
    _message("inbox", file, allow_secret)


@message_app.command("send")
def message_send(file: str = MessageOpt, allow_secret: bool = AllowSecretOpt):
    """Record an outbound message in adf_outbox."""
    _message("outbox", file, allow_secret)


@message_app.command("list")
def message_list(box: str = typer.Argument("inbox", help="inbox or outbox."), at: Optional[str] = AtOpt,
                 seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """The messages received (inbox) or sent (outbox), oldest first, as now or as of a moment."""
    with memory() as mem:
        messages = mem.messages(box, as_of(mem, at, seq))
    listing(messages, json, _message_line, f"no messages in the {box}")


def _message_line(m: dict) -> str:
    when = m.get("received_at") or m.get("sent_at") or m.get("created_at")
    between = f"{_shown(m['from'])} -> {_shown(m['to'])}" if m["to"] else _shown(m["from"])
    at = format_instant(when) if type(when) is int and 0 <= when <= LAST_MS else _shown(when)
    return f"{at}  {between}  {summary_text(_shown(m['content']))}"


def _shown(value) -> str:
    """A message's column as a listing shows it: an imported ADF file may hold bytes, or a number, where text goes."""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return "?" if value is None else str(value)


@config_app.command("set")
def config_set(key: str, value: str):
    """Set a config key; the value is JSON (true, 3, "text") or else a plain string."""
    try:
        parsed = jsonlib.loads(value)
    except jsonlib.JSONDecodeError:
        parsed = value
    with memory() as mem:
        event = mem.config_set(key, parsed)
    typer.echo(f"{key} = {jsonlib.dumps(parsed)} (seq {event.seq})")


@config_app.command("show")
def config_show(at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """The agent config (adf_config), with ADF's audit defaults."""
    from projections.redact import config_redactions

    with memory() as mem:
        seen = as_of(mem, at, seq)
        config, redacted = mem.agent_config(seen), config_redactions(mem, seen)
    if json:
        return emit_json(config)
    for key, value in config.items():
        typer.echo(f"{key} = {jsonlib.dumps(value, ensure_ascii=False)}")
    for event_seq, key, reason in redacted:
        typer.echo(f"(redacted: {key or 'the whole config'}, set at seq {event_seq}: {reason})")


@audit_app.command("list")
def audit_list(source: Optional[str] = typer.Option(None, "--source", help="loop, loop:NAME, file, inbox_message..."),
               at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """The rows of adf_audit."""
    with memory() as mem:
        rows = mem.audit_rows(source, as_of(mem, at, seq))
    listing(rows, json, _audit_line, "no audit rows" + (f" from {source}" if source else ""))


def _audit_line(r) -> str:
    span = f"seq {r.start_seq}..{r.end_seq}" if r.start_seq is not None else (r.ref or "")
    entries = "entry" if r.entry_count == 1 else "entries"
    return f"{r.id:>4}  {r.source:<16} {span:<24} {r.entry_count:>6} {entries:<7}  {r.size_bytes:>8} bytes"


@audit_app.command("read")
def audit_read(seq: int, loop: Optional[str] = typer.Option(None, "--loop",
                                                             help="Only this loop (its live rows and audit blobs)."),
               json: bool = JsonOpt):
    """Resolve a seq: the live loop, then every audit blob that covers it, then the log; or missing."""
    with memory() as mem:
        hit = mem.audit_read(seq, loop)
    if json:
        emit_json(hit)
    else:
        _print_hit(hit)
    raise typer.Exit(1 if hit.source == "missing" else 0)


def _print_hit(hit) -> None:
    typer.echo(hit_line(hit))
    if hit.entry:
        typer.echo(jsonlib.dumps(hit.entry, ensure_ascii=False))


@app.command()
def cite(citation: str, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """Resolve [S412], adf-audit://seq/412[?loop=NAME], adf-file://PATH or an entry's id (or its first 18 characters)."""
    with memory() as mem:
        moment = as_of(mem, at, seq)
        result = mem.cite(citation, moment)
        gone = citation_gone(mem, result, moment, at is not None or seq is not None)
    if json:
        emit_json(result)
    elif result.kind == "seq":
        _print_hit(result.hit)
    elif result.resolved and result.kind == "entry":
        _print_entry(result)
    elif result.resolved:
        sys.stdout.write(result.text)
    else:
        fail(gone or unresolved_line(result))
    raise typer.Exit(0 if result.resolved else 1)


def _print_entry(result) -> None:
    entry = result.entry
    typer.echo(f"{entry.id} in {result.path} (layer {result.layer}, seq {result.seq}, by {entry.agent})")
    typer.echo(result.text)


@export_app.command("adf")
def export_adf_command(out: Path, at: Optional[str] = AtOpt, seq: Optional[int] = SeqOpt, json: bool = JsonOpt):
    """Write a real ADF file (format 0.2, schema 28) of the memory as of now or a moment."""
    from projections.adf_file import export_adf

    with memory() as mem:
        report = export_adf(mem, out, as_of(mem, at, seq))
    if json:
        return emit_json(report)
    typer.echo(f"exported seq {report.seq} to {out}: " + ", ".join(f"{n} {t}" for t, n in report.rows.items()))


@import_app.command("adf")
def import_adf_command(source: Path, json: bool = JsonOpt, allow_secret: bool = AllowSecretOpt):
    """Turn an ADF file into events (into a new workspace; the same file again appends nothing)."""
    from projections.adf_file import import_adf

    if not source.exists():
        fail(f"{source} does not exist")
    with memory() as mem, progress_bar("import", None) as advance:
        report = import_adf(mem, source, progress=advance, allow_secret=allow_secret)
    if json:
        return emit_json(report)
    if report.already and not report.events:
        return typer.echo(f"{source} was imported here already: all {report.already} of its events are in the log; "
                          "nothing appended")
    rows = ", ".join(f"{k} {n}" for k, n in report.rows.items() if n)
    typer.echo(f"imported {source} (schema {report.schema_version}) as {event_count(report.events)} ({rows})" if rows
               else f"imported {source} (schema {report.schema_version}): it holds nothing mindlog keeps; nothing "
                    "appended")  # it said "as 0 events ()" (nc24a)
    for path in report.kept_aside:
        typer.echo(f"kept as a file: {path}")
    if report.shared:
        typer.echo(f"left out {len(report.shared)} file{'s' if len(report.shared) > 1 else ''} of the hub's shared "
                   f"layers ({', '.join(report.shared)}): the team's, not this agent's own; `mem remote add` and "
                   "`mem pull` bring them back")
    if report.not_read:
        tables = ", ".join(f"{table} ({'some rows' if rows < 0 else f'{rows} row' + ('s' if rows != 1 else '')})"
                           for table, rows in report.not_read.items())
        typer.echo(f"left out the rows of {tables}: mindlog keeps an agent's memory (loop, audit, files, pages, "
                   "messages, config), not these; an export does not write them")


__all__ = ["state"]
