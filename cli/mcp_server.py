"""`mem mcp`: one workspace served to MCP clients (stdio, or streamable HTTP), on the official SDK.

The tools are thin: Claude's memory-tool commands call `projections.memory_tool`, mindlog's own tools
call `Memory` and the projections. A refusal is a tool error carrying the message the CLI prints
(after its `error: `), in the tools' words where that message names a CLI flag or command (the error
carries both: `MemError.told`), and leaves the log untouched. Tools are coroutines that call the library directly, so calls are applied one
at a time on the server's event loop, in the order they arrive.
"""

import asyncio
import functools
import re
import sys
from typing import Literal

import msgspec
from mcp_types import INVALID_PARAMS, CallToolResult, Resource, TextContent
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import StrictBool, StrictInt, StrictStr, ValidationError

from eventstore import secrets
from eventstore.errors import InvalidInput, MemError, storage_exceptions, storage_failure
from eventstore.instants import format_local
from projections import search as searching
from projections.history import described, diff as diff_of, history as history_of
from projections.adopt import adopt as adopting
from projections import redact as redacting
from projections.memory import Memory, below_zero
from projections.memory_tool import ROOT, MemoryTool
from projections.views import page_path

from .app import citation_gone, point, release, resolve_at, unwritten_warnings, why_absent
from .output import (LEFT_ON_DISK, TOO_LARGE, VIEWS_HOLD, cleared_line, compacted_line, event_line, held_lines,
                     kept_by_hand, redacted_line, taken_back_line, unresolved_line)

DEFAULT_HOST = "127.0.0.1"
INSTRUCTIONS = (
    "mindlog memory for agent {agent}. Claude's memory-tool commands (view, create, str_replace, insert, "
    "delete, rename) work over /memories: /memories/mind.md is the index (edit only its `## Always` lines), "
    "/memories/mind/<slug>.md are wiki pages (YAML frontmatter with a `type`, then markdown), other paths are "
    "files. Every change is an event in an append-only log: history, diff, show (as of a time or seq), "
    "search (with `at`), believed, cite and log read it back. The loop (transcript): loop_append, loop_show, "
    "loop_compact, loop_clear; what they removed: audit, and cite adf-audit://seq/N. redact forgets events for good. "
    "Files edited on disk by hand are recorded by adopt. A shared page two agents changed at once is in conflict "
    "(sync says so): conflicts shows each version, resolve writes one version over them all.")


def json_text(value) -> str:
    return msgspec.json.encode(value).decode()


LOG_TEXT_CHARS = 2_000
"""Characters of each text the `log` tool shows of an event: the last 50 events whole, a long page and a long
message among them, made one tool result of three million characters, past most agents' context."""


def clipped(value, seq: int):
    """`value` (builtins: an event's body, a loop message's content) with every text longer than LOG_TEXT_CHARS cut
    there, saying how to read it whole: the event at `seq`."""
    if isinstance(value, str) and len(value) > LOG_TEXT_CHARS:
        return (f"{value[:LOG_TEXT_CHARS]}… [{len(value) - LOG_TEXT_CHARS:,} more characters: call log with "
                f"seq={seq} for the whole event]")
    if isinstance(value, list):
        return [clipped(item, seq) for item in value]
    if isinstance(value, dict):
        return {key: clipped(item, seq) for key, item in value.items()}
    return value


def misfit(tool: str, exc: ValidationError) -> str:
    """A call whose arguments do not fit the tool's schema, in one sentence an agent can act on (pydantic says it in
    four lines a mistake, naming its internal model and linking to its docs)."""
    missing = [".".join(map(str, error["loc"])) for error in exc.errors() if error["type"] == "missing"]
    wrong = [f"{'.'.join(map(str, error['loc']))}: {error['msg'][0].lower()}{error['msg'][1:]} (got "
             f"{shown_value(error['input'])})" for error in exc.errors() if error["type"] != "missing"]
    if not wrong:
        return f"{tool} needs {', '.join(missing)}"
    return f"{tool}: " + "; ".join(wrong + ([f"{', '.join(missing)} missing"] if missing else []))


def shown_value(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


ECHO_CHARS = 120
"""Characters a tool error shows of what the call gave it (a loop name, a citation, a layer, a path), as path messages
are cut: an agent's 100,000-character argument came back whole into its context."""


def texts(values):
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from texts(value)


OWN_WORDS = {"view_range", "insert_line"}
"""The memory tool's numbers, which it refuses in Claude's memory tool's words, however large."""


def whole_numbers(values):
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from whole_numbers(value)


def cut(text: str) -> str:
    return f"{text[:ECHO_CHARS]}… ({len(text):,} characters)" if len(text) > ECHO_CHARS else text


class JsonToolError(ToolError):
    """A tool error whose text is JSON with every long text cut already (a cut of the whole text would break it)."""


LONG_RUN = re.compile(r"\S{%d,}" % (2 * ECHO_CHARS))


def echoes_cut(message: str, arguments) -> str:
    """A tool error with every long text of the call's `arguments` it repeats cut at ECHO_CHARS, quoted or not, as
    given or as a workspace path; then any run of 240 characters without a space whose middle comes from one of them
    (an argument repeated in another form)."""
    long = sorted({text for text in texts(arguments) if len(text) > ECHO_CHARS}, key=len, reverse=True)
    for text in long:
        if repr(text) in message:
            message = message.replace(repr(text), f"{text[:ECHO_CHARS]!r}… ({len(text):,} characters)")
        for form in dict.fromkeys([text, text.strip(), workspace_path(text)]):
            if len(form) > ECHO_CHARS and form in message:
                message = message.replace(form, cut(form))

    def echoed(run: re.Match) -> str:
        middle = run.group()[len(run.group()) // 2 - ECHO_CHARS // 2:][:ECHO_CHARS]
        return cut(run.group()) if any(middle in text for text in long) else run.group()

    return LONG_RUN.sub(echoed, message) if long else message


def refusal(message: str) -> CallToolResult:
    """A tool error whose text is exactly the message (the SDK would prefix its own words to a raised one)."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def adopt_refusal(exc) -> str:
    """Why the adopt tool left a file, in a tool's words; a secret in it is no write of the agent's to leave out and
    call again (the file was written by hand): a person takes it out, or adopts it as it is."""
    if isinstance(exc, secrets.SecretFound):
        return (f"{exc.refused} (the file was written by hand: a person must take the secret out of it, or keep it with "
                "`mem adopt --allow-secret` in a shell)")
    return exc.told("tools")


def workspace_path(path: str) -> str:
    """A path as the CLI names it: /memories/mind.md and mind.md are the same file."""
    return path[len(ROOT):].strip("/") if path == ROOT or path.startswith(ROOT + "/") else path


def moment(mem: Memory, at: str | None, seq: int | None, say) -> int:
    """The seq a tool's `at` or `seq` names; `say` is told which instant `at` was understood as."""
    if at is not None and seq is not None:
        raise ToolError("give at or seq, not both")
    return resolve_at(mem, at, say)[0] if at is not None else mem.seq_at(seq=seq)


def trusted_moment(mem: Memory, at: str | None, seq: int | None, say) -> tuple[int | None, str]:
    """(as_of, the day staleness is judged on), as `mem search` and `mem believed` take them."""
    from .recall_commands import moment as recall_moment

    if at is not None and seq is not None:
        raise ToolError("give at or seq, not both")
    return recall_moment(mem, at, seq, say)


class FileFlush:
    """Writes the workspace's files once the calls pause, off the calls' own path.

    A call answers once its event is in the log and the views (every tool reads the views), so its
    latency does not include rewriting mind.md, mind/log.md and the page. The files are written
    QUIET seconds after the last call that changed the views, so a burst of calls rewrites them once
    and no call waits behind a rewrite; during a long burst they are written at least every MAX_LAG
    seconds, and always when the server stops."""

    QUIET = 0.05
    MAX_LAG = 1.0
    # A rewrite that fails (mind/ not writable) is one line on stderr, and the server goes on.

    def __init__(self, mem: Memory):
        self.mem = mem
        self.pending = None
        self.first = None  # when the oldest change not yet on disk was made (loop time)

    def schedule(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.pending is not None:
            self.pending.cancel()
        self.first = now if self.first is None else self.first
        self.pending = loop.call_at(min(now + self.QUIET, self.first + self.MAX_LAG), self.run)

    def run(self) -> None:
        self.pending = self.first = None
        try:
            report = self.mem.refresh()
        except (MemError, *storage_exceptions()) as exc:  # a bare callback: asyncio would log a whole traceback
            cause = exc.told("tools") if isinstance(exc, MemError) else self.mem.ws.damage(exc) or storage_failure(exc)
            print(f"warning: the workspace's files were not rewritten: {cause} (the log holds every change; the files "
                  "are written again after the next change, and when the server stops)", file=sys.stderr)
            return
        for warning in unwritten_warnings(report):
            print(f"warning: {warning}", file=sys.stderr)


class MindlogServer(MCPServer):
    """An MCPServer whose resource list names mind.md, every page and every shared layer's file as they are now, and
    which reads any `adf-file://` citation `cite` resolves (nc34b: a shared page's, which search hands out, was an
    unknown resource)."""

    def __init__(self, mem: Memory, **options):
        super().__init__(**options)
        self.mem = mem
        self.cited = lambda uri: None  # the text of a citation (build_server's, caught up first), or None
        self.running: str | None = None  # the tool whose call is in progress (the calls run one at a time)

    async def call_tool(self, name, arguments, context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None and arguments:
            taken = tool.parameters.get("properties", {})
            unknown = sorted(set(arguments) - set(taken))
            if unknown:  # the SDK would drop them unsaid: an agent would believe they did something
                return refusal(f"{name} takes no {', '.join(map(cut, unknown))} (it takes {', '.join(taken) or 'nothing'}); "
                               "nothing was done")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return refusal(misfit(name, exc.__cause__))
            raise

    async def get_prompt(self, name, arguments=None, context=None):
        """An unknown prompt is invalid params (-32602, as an unknown resource is), not the SDK's error code 0 with a
        traceback on stderr."""
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {cut(name)}")
        return await super().get_prompt(name, arguments, context)

    async def list_resources(self):
        resources = await super().list_resources()
        for page in self.mem.catalog():
            resources.append(Resource(uri=f"adf-file://{page_path(page.slug)}", name=page.slug, title=page.title,
                                      description=page.hook or None, mime_type="text/markdown"))
        for path in self.mem.views.shared_paths():
            resources.append(Resource(uri=f"adf-file://{path}", name=path, mime_type="text/markdown"))
        return resources

    async def read_resource(self, uri, context=None):
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError:
            text = self.cited(str(uri)) if str(uri).startswith("adf-file://") else None
            if text is None:
                raise
        return [ReadResourceContents(content=text, mime_type="text/markdown")]


def build_server(mem: Memory) -> MCPServer:
    tool = MemoryTool(mem)
    from importlib.metadata import version

    server = MindlogServer(mem, name="mindlog", version=version("mindlog"),
                           instructions=INSTRUCTIONS.format(agent=mem.config.agent), log_level="WARNING")

    mem.defer_files = True
    mem.told = "tools"
    flush = FileFlush(mem)

    def current() -> None:
        """Catches up with events appended, and a contract taken, by other processes (the CLI, a pull) since the last
        call."""
        if mem.head() != mem.checkpoint() or mem.moved_elsewhere():
            mem.refresh(files=False)
            flush.schedule()

    def register(fn=None, **options):
        def wrap(fn):
            @functools.wraps(fn)
            async def call(*args, **kwargs):
                numbers = whole_numbers(value for name, value in kwargs.items() if name not in OWN_WORDS)
                if any(not -2**63 <= number < 2**63 for number in numbers):
                    return refusal(TOO_LARGE)  # as the CLI refuses such an option (loop_clear's start said 2**64)
                server.running = fn.__name__
                try:
                    current()
                    head = mem.checkpoint()
                    result = fn(*args, **kwargs)
                    if mem.checkpoint() != head:
                        flush.schedule()
                    return result
                except MemError as exc:
                    message = exc.told("tools")
                except JsonToolError as exc:  # its long texts cut field by field: the JSON stays whole
                    return refusal(str(exc))
                except ToolError as exc:
                    message = str(exc)
                except storage_exceptions() as exc:  # as `mem` says it: a damaged file named, else the cause
                    message = str(mem.ws.damage(exc) or storage_failure(exc))
                except OverflowError:  # a number past what the log holds (a seq, `[S<seq>]`)
                    message = TOO_LARGE
                finally:
                    server.running = None
                return refusal(echoes_cut(message, kwargs.values()))

            server.add_tool(call, structured_output=False, **options)
            return fn
        return wrap(fn) if fn else wrap

    # --- Claude's memory-tool commands ----------------------------------------------------------

    @register
    def view(path: str, view_range: list[StrictInt] | None = None) -> str:
        """View a directory of /memories (up to 2 levels deep) or a file with line numbers; view_range [start, end]
        shows lines start..end (1-based, end -1 for the last line)."""
        return tool.view(path, view_range)

    @register
    def create(path: str, file_text: str) -> str:
        """Create a file. Under /memories/mind/ it is a wiki page: YAML frontmatter with a `type`, then markdown."""
        return tool.create(path, file_text)

    @register
    def str_replace(path: str, old_str: str, new_str: str) -> str:
        """Replace old_str, which must appear exactly once in the file, by new_str."""
        return tool.str_replace(path, old_str, new_str)

    @register
    def insert(path: str, insert_line: StrictInt, insert_text: str) -> str:
        """Insert insert_text after line insert_line (0 inserts at the top)."""
        return tool.insert(path, insert_line, insert_text)

    @register
    def delete(path: str) -> str:
        """Delete a file or page (the log keeps every version)."""
        return tool.delete(path)

    @register
    def rename(old_path: str, new_path: str) -> str:
        """Rename a file, or a page to another page (its history stays under both names)."""
        return tool.rename(old_path, new_path)

    @register(name="memory")
    def memory_command(command: Literal["view", "create", "str_replace", "insert", "delete", "rename"],
                       path: str | None = None, view_range: list[StrictInt] | None = None,
                       file_text: str | None = None, old_str: str | None = None, new_str: str | None = None,
                       insert_line: StrictInt | None = None,
                       insert_text: str | None = None, old_path: str | None = None,
                       new_path: str | None = None) -> str:
        """Claude's memory tool as one tool: `command` and that command's parameters."""
        given = {"path": path, "view_range": view_range, "file_text": file_text, "old_str": old_str,
                 "new_str": new_str, "insert_line": insert_line, "insert_text": insert_text, "old_path": old_path,
                 "new_path": new_path}
        needs = {"view": ["path"], "create": ["path", "file_text"], "str_replace": ["path", "old_str", "new_str"],
                 "insert": ["path", "insert_line", "insert_text"], "delete": ["path"],
                 "rename": ["old_path", "new_path"]}[command]
        missing = [name for name in needs if given[name] is None]
        if missing:
            raise ToolError(f"{command} needs {', '.join(missing)}")
        takes = needs + (["view_range"] if command == "view" else [])
        unused = [name for name, value in given.items() if value is not None and name not in takes]
        if unused:  # dropped unsaid, `delete` with a `new_path` would delete what the agent meant to rename
            raise ToolError(f"{command} takes no {', '.join(unused)} (it takes {', '.join(takes)}); nothing was done")
        if command == "view":
            return tool.view(path, view_range)
        return getattr(tool, command)(*(given[name] for name in needs))

    # --- mindlog's own tools ----------------------------------------------------------------------

    @register
    def show(path: str, at: str | None = None, seq: StrictInt | None = None) -> list[str]:
        """A file's text as it was at a moment (`at`: ISO 8601, `14:00`, `yesterday 14:00`, `2h ago`; local time
        unless an offset is given) or a log `seq`. With `at`, a second text says which instant it read."""
        said: list[str] = []
        as_of = moment(mem, at, seq, said.append)
        rel = mem.named_file(workspace_path(path), as_of)
        text = mem.show(rel, as_of)
        if text is None:
            text = mem.file_text(rel, as_of)
        if text is None:
            raise ToolError(why_absent(mem, rel, as_of, at is not None or seq is not None, tools=True))
        return [text, *said]

    @register
    def history(path: str, at: str | None = None, seq: StrictInt | None = None) -> list[str]:
        """Every version of a file: the seq and time of each event that changed it (JSON), now or as of a moment
        (`at` ISO 8601, or `seq`), as `mem history --at/--seq`."""
        said: list[str] = []
        asked = at is not None or seq is not None
        as_of = moment(mem, at, seq, said.append) if asked else None
        point = mem.seq_at() if as_of is None else as_of
        versions = described(mem, history_of(mem, rel := mem.named_file(workspace_path(path), point), as_of))
        if not versions and mem.show(rel, point) is None:  # [] for one as the workspace began (mind.md)
            raise ToolError(f"{rel} had not existed by then" if asked else f"{rel} never existed")
        return [json_text(versions), *said]

    @register
    def diff(path: str, old: str, new: str | None = None) -> list[str]:
        """A unified diff of a file between two moments, each `seq:N` or a time as `show` takes it (new: now);
        then which instant each time was understood as."""
        said: list[str] = []
        a, b = point(mem, old, said.append), (point(mem, new, said.append) if new else mem.seq_at())
        rel = mem.named_file(workspace_path(path), a, b)
        return [diff_of(mem, rel, a, b) or "(no differences)", *said]

    @register
    def believed(at: str | None = None, seq: StrictInt | None = None, last: StrictInt = 10,
                 include_all: StrictBool = False
                 ) -> list[str]:
        """What the agent had in front of it at a moment: mind.md, its pages (superseded, deprecated and archived
        ones only with include_all), the loop's last messages (JSON); with `at`, then the instant it read."""
        said: list[str] = []
        as_of, day = trusted_moment(mem, at, seq, said.append)
        return [json_text(mem.believed(mem.seq_at() if as_of is None else as_of, last, include_all=include_all,
                                       day=day)), *said]

    @register
    def search(query: str, at: str | None = None, seq: StrictInt | None = None, layers: list[str] | None = None,
               types: list[str] | None = None, kinds: list[str] | None = None, agent: str | None = None,
               status: str | None = None, include_all: StrictBool = False, n: StrictInt = 10) -> list[str]:
        """Full-text search (BM25) over pages, shared layers, entries, the loop, files and mind.md's Always lines,
        now or as of a moment (`at` ISO 8601, or `seq`); each hit (JSON) carries the citation to quote. kinds: page,
        shared-page, local-page (a page of a layer of this agent's own), entry, loop, file, always. Superseded,
        deprecated and archived material only with include_all. With `at`, a second text
        says which instant it searched. Every word must appear ("quoted phrases" too): OR, NOT, -word and prefix* are
        words like the others, not operators."""
        for kind in kinds or ():
            if kind not in searching.KINDS:
                raise ToolError(f"kind must be one of {', '.join(searching.KINDS)}, not {kind!r}")
        said: list[str] = []
        as_of, day = trusted_moment(mem, at, seq, said.append)
        hits = mem.search(query, as_of=as_of, day=day, kinds=kinds or (), layers=layers or (), types=types or (),
                          agent=agent, status=status, include_all=include_all, limit=n)
        hint = None if hits else searching.operators_hint(query)
        return [json_text(searching.in_tools_words(hits)), *said, *([f"no matches: {hint}"] if hint else [])]

    @register
    def cite(citation: str, at: str | None = None, seq: StrictInt | None = None) -> list[str]:
        """Resolve [S412], adf-audit://seq/412[?loop=NAME], adf-file://PATH or an entry's id (JSON), now or as of
        a moment; one that resolves to nothing is an error, its JSON saying what was looked at."""
        said: list[str] = []
        as_of = moment(mem, at, seq, said.append)
        result = mem.cite(citation, as_of)
        if not result.resolved:  # an error, as `mem cite` exits 1: the JSON still says what was looked at, after why
            told = msgspec.structs.replace(result, citation=cut(result.citation),
                                           path=None if result.path is None else cut(result.path))
            why = (citation_gone(mem, result, as_of, at is not None or seq is not None, tools=True)
                   or unresolved_line(told, tools=True))
            raise JsonToolError(json_text({"error": why, **msgspec.to_builtins(told)}))
        return [json_text(result), *said]

    @register
    def log(kind: list[str] | None = None, layer: list[str] | None = None, since: str | None = None,
            n: StrictInt = 50, seq: StrictInt | None = None) -> list[str]:
        """The newest n events (oldest first), optionally only these kinds or layers, or since a time (JSON; then
        the instant `since` was understood as). A text longer than 2,000 characters is clipped, saying so; `seq`
        alone gives that one event whole."""
        if seq is not None:
            event = mem.event(seq)
            if event is None:
                raise ToolError(f"there is no event at seq {seq} (the log's head is {mem.head()})")
            return [json_text(event)]
        since_ms = mem.past_instant(since) if since else None
        said = [f"since {format_local(since_ms)}"] if since_ms is not None else []
        events = msgspec.to_builtins(mem.events(kinds=kind, layers=layer, since_ms=since_ms, limit=n))
        return [json_text([{**event, "body": clipped(event["body"], event["seq"])} for event in events]), *said]

    @register
    def entry_add(layer: str, text: str, reverses: str | None = None) -> str:
        """Append a typed entry to an `entries` layer (a shared one, or a local one the workspace declared):
        "[DECISION] text" or "[FACT] 2026-11-29: text"."""
        event = mem.entry_add(layer, text, reverses)
        return f"{event.id} [{event.body.type}] {event.body.date}: {event.body.content} (seq {event.seq})"

    @register
    def adopt() -> str:
        """Record as events the pages, shared pages and `## Always` lines of mind.md edited, created or deleted on
        disk by hand (as `mem adopt` does); a file that cannot be adopted (it breaks the page contract, holds a
        secret) is left on disk; a page moved by hand, its bytes unchanged, is a rename. JSON: {"adopted": [paths],
        "refused": {path: why}, "renamed": {old path: new path}, "kept": {file from before mindlog that it renders
        otherwise: the file that keeps its text}, "deleted": [those of adopted deleted by hand]}."""
        return json_text(adopting(mem, explain=adopt_refusal))

    @register
    def page_release(slug: str, note: str, layer: str | None = None) -> str:
        """Lift a page's `governance: hold` so that it can change (logged, with the note saying why): a wiki page,
        or with `layer` a page of a shared `pages` layer (a new version without the hold)."""
        return release(mem, slug, note, layer)

    @register
    def loop_append(role: str, text: str, loop: str = "main",
                    model: str | None = None) -> str:
        """Append a message (role user or assistant) to a loop (the transcript); its seq is the [S<seq>] that
        cites it."""
        seq = mem.loop_append(role, [{"type": "text", "text": text}], loop, model).seq
        return f"[S{seq}] {role} appended to loop {loop}"

    @register
    def loop_show(loop: str = "main", at: str | None = None, seq: StrictInt | None = None,
                  last: StrictInt = 50) -> list[str]:
        """The live loop (what compactions and clears left of the transcript), its last `last` messages in display
        order (JSON), now or as of a moment; a text longer than 2,000 characters is clipped, saying so. With `at`,
        a second text says which instant it read."""
        if last < 0:
            raise below_zero("last", last)
        said: list[str] = []
        rows = msgspec.to_builtins(mem.loop(loop, moment(mem, at, seq, said.append)))
        shown = rows[-last:] if last else []
        return [json_text([{**row, "content": clipped(row["content"], row["seq"])} for row in shown]), *said]

    @register
    def loop_compact(summary: str, preserve: StrictInt = 0, loop: str = "main") -> str:
        """Replace all but the last `preserve` messages of a loop by `summary` (cite what it keeps as [S<seq>]); the
        messages removed go to the audit when audit.loop is on, and the log keeps every one."""
        return compacted_line(mem.loop_compact(summary.strip(), preserve, loop), loop)

    @register
    def loop_clear(start: StrictInt | None = None, end: StrictInt | None = None, loop: str = "main") -> str:
        """Remove rows[start:end] of a loop (a Python slice over the display order: -1 is the last message; neither
        given: all); archived in the audit when audit.loop is on, and the log keeps every one."""
        return cleared_line(mem.loop_clear(start, end, loop), loop, start, end)

    @register
    def audit(source: str | None = None, at: str | None = None, seq: StrictInt | None = None) -> list[str]:
        """The audit's rows (JSON): what compactions, clears and deletes archived (source loop, loop:NAME, file,
        inbox_message...), now or as of a moment. Read an archived message with cite adf-audit://seq/N."""
        said: list[str] = []
        return [json_text(mem.audit_rows(source, moment(mem, at, seq, said.append))), *said]

    @register
    def redact(reason: str, targets: list[StrictInt | StrictStr] | None = None, match: str | None = None,
               layer: str | None = None, confirm: StrictBool = False) -> str:
        """Forget: remove events' bodies from the log (their place in the chain stays, reading `[redacted: reason]`)
        and rebuild every view and file without them. `targets`: seqs or event ids, redacted at once; or `match`, a
        regular expression over the events' texts (with `layer`, that layer only), which lists what it would redact
        until called again with confirm=true. Only this agent's own events, or those of a shared layer it produces."""
        if bool(targets) == bool(match):
            raise ToolError("give targets (seqs or event ids) or match (a regular expression), not both or neither")
        if layer is not None and not match:
            raise ToolError("layer goes with match")
        from sync.client import unsent

        found = redacting.search(mem, match, layer) if match else redacting.resolve(mem, list(map(str, targets)))
        apart = unsent(mem, found.events)
        report = redacting.redact(mem, found.events, reason, apply=not match or confirm, apart=apart)
        listed = [event_line(event, texts=False) for event in found.events] if match and not confirm else []
        warned = [*(found.kept_notes() if match else found.notes()), *([LEFT_ON_DISK] if report.left_on_disk else [])]
        warned += [kept_by_hand(report)] if report.hand_edited else []
        warned += [VIEWS_HOLD] if report.views_behind else []
        if report.done:
            warned += redacting.shown_stubs(mem, found.events, reason, apart, tools=True)
        return "\n".join([*listed, redacted_line(report, "call redact again with confirm=true to do it"), *warned])

    @register
    def sync(direction: Literal["push", "pull", "both"] = "both", remote: str | None = None) -> str:
        """Push this agent's shared-layer events to its hub and/or pull what it consumes (a remote must be set)."""
        from sync.client import NOT_PRODUCED, get_remote, pull, push

        target = get_remote(mem, remote)
        report, warnings = {}, []
        if direction in ("push", "both"):
            report["push"] = push(mem, target, say=warnings.append)
        if direction in ("pull", "both"):
            report["pull"] = pull(mem, target, say=warnings.append)
        warnings += [f"error: {line}" for line in held_lines(report.get("push"))]  # `mem sync` exits 1 on them
        for held in getattr(report.get("push"), "held", ()):  # nc36b: no way forward; nc37a: exactly those
            if held.why.startswith(NOT_PRODUCED):
                warnings.append(f"note: the writes to layer {held.layer} this agent no longer produces wait until it "
                                f"does; if it will not, the redact tool with targets {held.seqs} takes them back")
        if report.get("push") and report["push"].taken_back:
            warnings.append(f"note: {taken_back_line(report['push'])}")
        if mem.behind:
            warnings.append(f"warning: {mem.behind}")
            mem.behind = None
        if warnings:
            report["warnings"] = warnings
        found = mem.conflicts()
        if found:  # an agent that edited one of these pages was not told that another version is shown (nc17b)
            report["conflicts"] = [f"{c.layer}/{c.slug}: {len(c.heads)} versions at once, the file shows the "
                                   f"winner {c.winner} (call conflicts to read them"
                                   + (", resolve to write one over them)" if mem.produces(c.layer) else
                                      "; this agent does not produce the layer, so a producer resolves it)")
                                   for c in found]
        return json_text(report)

    @register
    def conflicts() -> str:
        """The shared pages in conflict (changed by two agents at once): each head's text, author and time, and
        which one every replica shows (`winner`); resolve writes one version over them all. JSON."""
        from projections.conflicts import conflicts_shown

        return json_text(conflicts_shown(mem))

    @register
    def resolve(page: str, content: str) -> str:
        """Resolve a shared page's conflict: `page` as LAYER/SLUG (as conflicts names it), `content` the whole page
        (frontmatter and markdown) written as one version whose parents are all its heads."""
        layer, _, slug = page.partition("/")
        if not slug:
            raise InvalidInput(f"name the page as LAYER/SLUG (as conflicts names it), not {page!r}", field="page")
        event = mem.resolve(layer, slug, content.encode())
        return f"resolved {layer}/{event.body.slug} (seq {event.seq})"

    # --- resources --------------------------------------------------------------------------------

    def cited(uri: str) -> str | None:
        current()
        try:
            found = mem.cite(uri, mem.seq_at())
        except MemError:
            return None
        return found.text if found.resolved and found.kind == "file" else None

    server.cited = cited

    @server.resource("adf-file://mind.md", name="mind.md", mime_type="text/markdown",
                     description="The always-loaded index: `## Always` and the page catalog.")
    def mind() -> str:
        current()
        return mem.show("mind.md", mem.seq_at())

    @server.resource("adf-file://mind/{slug}.md", name="page", mime_type="text/markdown",
                     description="A wiki page: frontmatter and markdown.")
    def page(slug: str) -> str:
        current()
        text = mem.show(page_path(slug), mem.seq_at())
        if text is None:
            raise ResourceNotFoundError(f"there is no page {slug!r:.120}")
        return text

    return server


def parse_http(address: str) -> tuple[str, int]:
    """HOST:PORT, :PORT or PORT; the host defaults to loopback; an IPv6 host as URLs write it (`[::1]:8000`) or bare
    (`::1:8000`)."""
    from sync.server import bare_host

    host, _, port = address.rpartition(":")
    if not (port.isascii() and port.isdigit()):  # int() reads "４" and fails on "²" (nc33a)
        raise MemError(f"--http takes HOST:PORT or PORT, not {address!r:.120}")
    return bare_host(host) or DEFAULT_HOST, int(port)


def serve(mem: Memory, http: str | None = None, token_file=None) -> None:
    """Serves over stdio, or over streamable HTTP at `http` (behind a bearer token off loopback: cli.tokens)."""
    address = parse_http(http) if http is not None else None
    server = build_server(mem)
    try:
        if address is None:
            import anyio

            from .mcp_stdio import run_stdio

            anyio.run(run_stdio, server, mem.refresh, lambda: server.running)
        else:
            from sync.server import listen, run_on

            from .mcp_http import UnusableIdGate
            from .output import http_url
            from .tokens import HostGate, TokenGate, rebinding_guard, server_token

            host, port = address
            token, made = server_token(host, token_file)
            sock = listen(host, port)
            app = server.streamable_http_app(host=host, transport_security=rebinding_guard(host, port))
            app = HostGate(UnusableIdGate(app), host, port)  # a foreign Host or Origin is refused before anything
            # stdout: with --http, not the protocol's
            print(f"mindlog mcp: {http_url(host, port)}/mcp" + (f"\nbearer token: {token}" if made else ""), flush=True)
            run_on(TokenGate(app, token) if token else app, sock)
    finally:
        mem.refresh()
