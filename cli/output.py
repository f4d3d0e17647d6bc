"""How the CLI prints: plain lines for people, `--json` for programs, rich progress bars."""

import contextlib
import os
import re
import sys
from collections.abc import Callable

import msgspec
import typer

from eventstore.envelope import Event
from eventstore.instants import format_instant


AT_HELP = ("A moment: ISO 8601, `14:00`, `yesterday 14:00`, `2h ago`, `now` (local time unless an offset "
           "is given), or milliseconds since 1970 as --json gives them.")
AllowSecretOpt = typer.Option(False, "--allow-secret",
                              help="Write it even if the secret scanner finds something (the event records it).")


_CONTROL = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""A color code (SGR: kept), or a control character that is not tab or newline (shown as an escape)."""


def _shown(match: re.Match) -> str:
    code = match.group()
    return code if len(code) > 1 else f"\\u{ord(code):04x}"


class TerminalSafe:
    """stdout when it is a terminal: what is printed there shows every control character but tab, newline and color
    codes as an escape (`\\u001b`: `--json` output still reads as the same text). A loop message, page or file holds
    whatever its writer put in it (an imported transcript, another agent's page pulled from a hub), and its escape
    sequences, printed raw by `mem loop show`, `mem show` or `mem search`, would clear the operator's screen, retitle
    the window or write the clipboard (OSC 52). Color codes stay: mindlog's own help and styling send them, and they
    only color text. Output into a pipe or a file is left byte for byte as stored."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(_CONTROL.sub(_shown, text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colors, cursor moves, a cleared screen
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]|[\x1b\x80-\x9f]")  # ESC and one final byte (ESC c resets); a lone ESC or C1 control
"""Any escape sequence, as ECMA-48 frames them, in its 7-bit and 8-bit forms: CSI; the string ones (OSC: a window
title, the clipboard; DCS, SOS, PM, APC), up to their terminator or the end of the line (one left open ate the lines
after it, nc21b); ESC with one final byte; and any other C1 control."""


def strip_escapes_in_pipes() -> None:
    """Has echo (typer's click) leave out every escape sequence where it leaves out color codes: output into a pipe or
    a file, which the listings print stored text to. Its own pattern takes CSI ones alone, so a stored OSC (a new
    window title, `ESC ]0;pwned BEL`) reached `mem loop show | less -R` whole (nc21a)."""
    from typer._click import _compat

    _compat._ansi_re = ESCAPE_SEQUENCE


def emit_json(value) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")


def listing(rows, json: bool, line: Callable, nothing: str, note: str | None = None) -> None:
    """A listing command's output: the rows as JSON, else a line each, or `nothing` (say "no pages") on stderr when
    there are none: an empty listing printed nothing at all, as if the command had not run, and a script reading the
    lines takes none for a row (`mem page list | wc -l` says 0). A `note` on what the rows leave out goes to stderr
    too, after them or with `nothing`."""
    if json:
        return emit_json(rows)
    if not rows:
        typer.echo(f"{nothing}: {note}" if note else nothing, err=True)
    for row in rows:
        typer.echo(line(row))
    if rows and note:
        typer.echo(f"note: {note}", err=True)


def plain() -> bool:
    """Agents read stderr through a pipe: there, or with MEM_PLAIN=1, an error is one `error: ...` line."""
    return os.environ.get("MEM_PLAIN") == "1" or not sys.stderr.isatty()


TOO_LARGE = "a number given is past what the log holds: whole numbers go from -2**63 to 2**63 - 1"


def event_count(count: int) -> str:
    """`count` with the noun: "1 event", "2 events"."""
    return f"{count} event" if count == 1 else f"{count} events"


def compacted_line(done, loop: str) -> str:
    """What a loop compaction did (a `Memory.loop_compact` result), as `mem loop compact` and the MCP tool say it."""
    last = done.archived
    archived = f"; archived seqs {last.start_seq}..{last.end_seq} in audit {last.id}" if last else "; not audited"
    return f"[S{done.event.seq}] compacted loop {loop}{archived}"


def cleared_line(done, loop: str, start: int | None, end: int | None) -> str:
    """What a loop clear did (a `Memory.loop_clear` result), as `mem loop clear` and the MCP tool say it."""
    last = done.archived
    archived = f"; archived in audit {last.id}" if last else ""
    return (f"cleared loop {loop}[{'' if start is None else start}:{'' if end is None else end}] "
            f"(seq {done.event.seq}){archived}")


LEFT_ON_DISK = ("the log's WAL could not be emptied (another process is reading the log, or the disk has no room "
                "left), so the redacted text may still be in .mem/log.db and its WAL; the next write to this workspace "
                "erases it once that reader is done or there is room")
VIEWS_HOLD = ("the views and files could not follow the redaction, so they still hold what it removed until the next "
              "command catches them up")


def held_lines(report) -> list[str]:
    """What a push (a `sync.client.PushReport`, or None) leaves behind, a line per layer and cause."""
    return [f"{event_count(held.count)} in layer {held.layer} cannot be pushed: {held.why}"
            for held in (report.held if report is not None else ())]


def taken_back_line(report) -> str:
    """What a push (a `sync.client.PushReport` with `taken_back`) passed for good instead of holding it back."""
    return (f"{event_count(report.taken_back)} held back from the hub taken back before they went out (redacted "
            "here, and their redactions): never sent")


def kept_by_hand(report) -> str:
    """What a redaction left in files edited by hand (a `redact.RedactReport`), or "" when it left nothing."""
    if not report.hand_edited:
        return ""
    restore = "; ".join(f"mem show {path} > {path}" for path in report.hand_edited)
    return (f"{', '.join(report.hand_edited)} edited by hand, so not rewritten: it may still hold what was redacted; "
            f"remove it from the file, or put back mindlog's version without it (`{restore}`)")


def redacted_line(report, confirm: str) -> str:
    """What a redaction did or would do (a `redact.RedactReport`); `confirm` says how to do what it only listed."""
    if not report.targets:
        return "nothing matches that a redaction removes"
    if report.done:
        return f"redacted {event_count(len(report.targets))} (redaction seq {', '.join(map(str, report.redactions))})"
    return f"would redact {event_count(len(report.targets))}; {confirm}"


def fail(message: str, code: int = 1) -> None:
    """One `error:` line: a line break that a message quotes from what it was given (a path typed with one) is
    shown escaped, as `\\n` (nc29a: the error took two lines)."""
    typer.echo(f"error: {one_line(with_cwd_note(message))}", err=True)
    raise typer.Exit(code)


def one_line(message: str) -> str:
    return message.replace("\r", "\\r").replace("\n", "\\n").replace("\u2028", "\\u2028").replace(
        "\u2029", "\\u2029")


def with_cwd_note(message) -> str:
    """An error's message, saying too when the cwd was deleted under the shell: a relative path given (`mem checkout
    out`, `mem import adf in.adf`) named nothing, and "No such file or directory" alone did not say why (nc21b)."""
    from eventstore.workspace import CWD_GONE, cwd_gone

    message = str(message)
    return f"{message} ({CWD_GONE})" if CWD_GONE not in message and cwd_gone() else message


WRITTEN_TEXT = ("line", "content", "summary")
"""Fields of text someone wrote (an Always line, an entry, a compaction's summary), as against names (a slug, a
path, a key, a role)."""


def summary(event: Event, texts: bool = True) -> str:
    """An event's gist on one line; without `texts`, only what names it: a list of what a redaction removes showed
    the secret it was removing again, on the terminal and in whatever kept its output (nc26b)."""
    body = event.body
    if event.kind == "redacted":
        return f"was {body.original}: {body.reason}"
    if event.kind == "redaction":
        return f"{len(body.target_ids)} event(s): {body.reason}"
    if event.kind == "contract.change":
        return _cut("layers: " + ", ".join(sorted(body.layers)))
    if event.kind == "import.gap":  # (nc24b: an empty line where a log imported from an ADF file begins)
        first = (event.seq or 0) - body.skipped
        return _cut(f"stands for seqs {first} to {event.seq - 1} of {body.source}" if body.skipped
                    else f"from {body.source}")
    if event.kind == "log.restore":
        return f"{len(body.entries)} entr{'y' if len(body.entries) == 1 else 'ies'} of a mind/log.md from before"
    if event.kind == "audit.import":
        return _cut(f"{body.source}: {body.entry_count} entr{'y' if body.entry_count == 1 else 'ies'}")
    if event.kind == "config.set" and not body.key:
        return "the whole config"
    if event.kind == "loop.clear":
        return _cut(f"loop {body.loop}")
    if event.kind in ("inbox.message", "outbox.message") and isinstance(body.message.get("content"), str):
        return summary_text(body.message["content"]) if texts else ""
    for field in ("slug", "line", "path", "summary", "key", "content", "role"):
        if not texts and field in WRITTEN_TEXT:
            continue
        value = getattr(body, field, None)
        if isinstance(value, str):
            return _cut(value)
    if hasattr(body, "old"):
        return f"{body.old} -> {body.new}"
    return ""


def summary_text(text: str) -> str:
    """Text on one line of a listing: its line breaks folded, at most 60 characters."""
    return _cut(" ".join(text.split()))


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def event_line(event: Event, texts: bool = True) -> str:
    return (f"{event.seq:>6}  {format_instant(event.recorded_at)}  {event.agent:<10} {event.layer:<8} "
            f"{event.kind:<14} {summary(event, texts)}")


@contextlib.contextmanager
def progress_bar(description: str, total: int | None):
    """Yields a callback `advance(n, total=None, phase=None)` that advances a rich progress bar by n (and
    sets its total when given); silent when not on a terminal. A `total` of None draws a bar of unknown
    length until the work learns its size (a pull, from the hub's position). A `phase` names a part of
    the work with a bar of its own (a pull's building of the views, below its pages)."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    columns = (TextColumn("{task.description:<6}"), BarColumn(), MofNCompleteColumn(), _rate_column(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, transient=True, disable=not sys.stderr.isatty() or (total is not None and total < 1000),
                  console=Console(stderr=True)) as progress:
        tasks = {None: progress.add_task(description, total=total)}

        def advance(n: int, total: int | None = None, phase: str | None = None) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total)
            elif total is not None:
                progress.update(tasks[phase], total=total)
            progress.advance(tasks[phase], n)

        yield advance


def _rate_column():
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Items a second since the task began. Not rich's speed, measured between its last updates: a part of the
        work that comes in one burst (the views of a catch-up, folded while the pages came) read millions a second."""

        def render(self, task) -> Text:
            elapsed = task.finished_time if task.finished else task.elapsed
            speed = task.completed / elapsed if elapsed else None
            return Text(f"{speed:,.0f}/s" if speed else "", style="progress.data.speed")

    return RateColumn()


def http_url(host: str, port: int) -> str:
    """The URL of a server listening on host:port (an IPv6 address in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _article(word: str) -> str:
    return "an" if word and word[0] in "aeiou" else "a"


def hit_line(hit) -> str:
    """Where a cited loop message is (an `audit.AuditHit`), as `mem audit read` and `mem cite` say it."""
    where = {"live": "live in the loop", "audit": f"in audit blob {hit.audit_id}",
             "log": "not in any audit blob (loop audit was off); the event log still holds it",
             "missing": f"not a loop message: event {hit.seq} is {_article(hit.other)} {hit.other}" if hit.other
             else f"not in the loop cited: it is a message of loop {hit.in_loop}" if hit.in_loop
             else f"missing: not yet written by seq {hit.read_at}" if hit.read_at is not None
             else "missing: not live, not in any audit blob, not in the log"}[hit.source]
    return f"S{hit.seq}: {where}" + (f" (loop {hit.loop})" if hit.loop else "")


def unresolved_line(result, tools: bool = False) -> str:
    """Why a citation (a `Memory.cite` result) resolves to nothing, in one sentence (nc34b: the cite tool's error was
    its JSON alone)."""
    if result.kind == "seq":
        return hit_line(result.hit)
    if result.kind == "entry":
        listed = "view of a layer's file lists them" if tools else "`mem entry list LAYER` lists them"
        return f"there is no entry {result.citation} in any layer of this workspace ({listed})"
    return (f"{result.path}: no such file" if result.path else
            f"{result.citation!r} names no file: adf-file://PATH, like adf-file://mind/deploy.md")
