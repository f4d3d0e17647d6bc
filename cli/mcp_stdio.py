"""`mem mcp` over stdio: the SDK's transport, with every line that is no JSON-RPC message answered.

The SDK's stdio reader hands a line it cannot parse to the session as an exception, which the session
only logs: the client is never answered and waits forever. JSON-RPC 2.0 answers such a line with an
error response, as the SDK's own HTTP transport does: -32700 (parse error) for a line that is not JSON
(or holds what the SDK's parser refuses, like a lone surrogate escape or arrays nested past its depth),
-32600 (invalid request) for JSON that is no message; the id is the request's when it can be read from
the line, else null. A request whose id is neither a whole number nor a string (1.5, null, true, {})
is parsed by the SDK as a notification, which nothing answers: it gets -32600 with id null too.
The line is read for its id without recursion, so no nesting depth can stop the server.
A line past 16 MiB (as a request to the hub may be) is refused too, -32600 with the id its first 64 KiB name, and
read no further than that into memory: the rest of it is skipped up to its newline.
At the end of stdin the SDK cancels the calls still running, though their events may be in the log already: the
end is passed on only once every request read has been answered (`Answered`), so a client that closes stdin after
its last request hears every call, and does not write one again for want of an answer (nc26b).
"""

import json
import re
from collections import Counter, deque
from io import TextIOWrapper
from json.decoder import scanstring

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCNotification,
                       JSONRPCRequest, JSONRPCResponse)
from pydantic import ValidationError

NO_ID = object()
"""What `top_level_id` gives for a JSON object without an "id" member (null is an id given, and a bad one)."""
NOT_AN_OBJECT = object()
"""What `top_level_id` gives for a line that is not exactly one JSON object."""

_TOKEN = re.compile(r'[ \t\n\r]*(?:(")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)'
                    r"|(true|false|null|NaN|-?Infinity)|((?:\[[ \t\n\r]*)+|(?:\][ \t\n\r]*)+|[{}:,]))")
_SPACE = re.compile(r"[ \t\n\r]*")


def top_level_id(line: str, cut: bool = False):
    """The value of the "id" member of the JSON object `line` (the last one, as a JSON parser keeps it; a container
    read as an empty one, an integer of more digits than Python converts as NaN), NO_ID when it has none,
    NOT_AN_OBJECT when `line` is not exactly one JSON object. Read in one pass with an explicit stack, not
    recursively (a run of brackets at once): a line nested a million levels deep costs a moment, never the stack.
    `cut`: `line` is the head of a longer one; the id is the one named before the cut (a value the cut may have
    shortened, the last thing read, is not taken)."""
    stack: list[str] = []  # "{" or "[" for each open container
    expect = "value"  # value | first-value (or "]") | key | first-key (or "}") | colon | comma (or a closer)
    at, found, key, whole = 0, NO_ID, None, NO_ID
    while True:
        token = _TOKEN.match(line, at)
        if token is None:
            return whole if cut else NOT_AN_OBJECT
        whole = found
        at = token.end()
        quote, number, literal, mark = token.groups()
        if quote:
            try:
                text, at = scanstring(line, at)
            except ValueError:
                return whole if cut else NOT_AN_OBJECT
        if expect in ("key", "first-key"):
            if quote:
                key, expect = (text if len(stack) == 1 else None), "colon"
            elif mark == "}" and expect == "first-key":
                stack.pop()
                expect = "comma"
            else:
                return NOT_AN_OBJECT
        elif expect == "colon":
            if mark != ":":
                return NOT_AN_OBJECT
            expect = "value"
        elif expect in ("value", "first-value"):
            top = key == "id" and len(stack) == 1
            if mark == "{" or (mark or " ")[0] == "[" and stack:
                if top:
                    found = {} if mark == "{" else []  # a container: no usable id, whatever it holds
                if mark == "{":
                    stack.append("{")
                    expect = "first-key"
                else:
                    opened = mark.count("[")
                    stack.extend("[" * opened)
                    expect = "first-value"
            elif mark and mark[0] == "]" and expect == "first-value":
                closed = mark.count("]")
                if stack[-closed:] != ["["] * closed:
                    return NOT_AN_OBJECT
                del stack[-closed:]
                expect = "comma"
            elif mark is None and stack:
                if top:
                    try:
                        found = text if quote else json.loads(number or literal)
                    except ValueError:  # an integer of more digits than Python converts
                        found = float("nan")
                expect = "comma"
            else:  # a closer or comma where a value goes, or anything but an object at the top
                return NOT_AN_OBJECT
            key = None if expect != "first-key" else key
        else:  # comma
            if mark == "," and stack:
                expect = "key" if stack[-1] == "{" else "value"
            elif mark == "}" and stack and stack[-1] == "{":
                stack.pop()
            elif mark and mark[0] == "]":
                closed = mark.count("]")
                if stack[-closed:] != ["["] * closed:
                    return NOT_AN_OBJECT
                del stack[-closed:]
            else:
                return NOT_AN_OBJECT
        if not stack:
            break
    return found if _SPACE.match(line, at).end() == len(line) else NOT_AN_OBJECT


def usable_id(value) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def unparsed_answer(exc: Exception, what: str = "line") -> JSONRPCError:
    """The error response to a line (or an HTTP body) the SDK could not take for a JSON-RPC message."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    unparsed = [error["input"] for error in errors if error["type"] == "json_invalid"]
    if unparsed:
        line = unparsed[0]
        ident = top_level_id(line) if isinstance(line, str) else None
        code, message = PARSE_ERROR, f"Parse error: the {what} is not JSON the server can read"
    else:
        ident = next((error["input"]["id"] for error in errors
                      if isinstance(error["input"], dict) and usable_id(error["input"].get("id"))), None)
        code, message = INVALID_REQUEST, f"Invalid Request: the {what} is not a JSON-RPC 2.0 message"
    return JSONRPCError(jsonrpc="2.0", id=ident if usable_id(ident) else None, error=ErrorData(code=code,
                                                                                                message=message))


ARGUMENTS_NOT_AN_OBJECT = "Invalid params: a tool call's arguments must be a JSON object"
NAME_NOT_A_STRING = "Invalid params: a tool call's name must be a string, the name of one of the tools tools/list gives"


def bad_tool_call(message) -> str | None:
    """What is wrong with `message`, a tool call whose name is missing or no string, or whose arguments are no JSON
    object (a string holding one, say), which the SDK answers with a bare -32602 that does not say (nc28a, nc32a);
    None for any other message."""
    if not isinstance(message, JSONRPCRequest) or message.method != "tools/call":
        return None
    if not isinstance(message.params, dict) or not isinstance(message.params.get("name"), str):  # no params: nc33a
        return NAME_NOT_A_STRING
    arguments = message.params.get("arguments")
    return ARGUMENTS_NOT_AN_OBJECT if arguments is not None and not isinstance(arguments, dict) else None


BAD_ID = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
    code=INVALID_REQUEST, message="Invalid Request: the id must be a whole number or a string"))


MAX_LINE_BYTES = 16 * 1024 * 1024
"""As a request to the hub may be (`sync.wire.MAX_REQUEST_BYTES`): an event's 8 MiB body, escaped in JSON."""
ID_HEAD_CHARS = 65536


class TooLong(str):
    """What `Lines` hands the SDK's reader (which cannot parse it) in place of a line over MAX_LINE_BYTES, with the
    id its head named, so that the client's request is answered as its own."""

    ident = None

    def answer(self) -> JSONRPCError:
        return JSONRPCError(jsonrpc="2.0", id=self.ident if usable_id(self.ident) else None, error=ErrorData(
            code=INVALID_REQUEST, message=f"Invalid Request: the line is more than {MAX_LINE_BYTES} bytes"))


class Lines:
    """The stdin the SDK's reader iterates, keeping each line it hands out until `Answering` has taken the message
    the reader made of it (the reader sends one item, a message or an exception, per line). A line over
    MAX_LINE_BYTES is read in pieces of that size and handed out as a TooLong."""

    def __init__(self, inner: anyio.AsyncFile):
        self.readline = inner.wrapped.readline
        self.unclaimed: deque[str] = deque()

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        line = await anyio.to_thread.run_sync(self.readline, MAX_LINE_BYTES + 1)
        while line and not line.strip():  # a blank line is no message: skipped, not answered as a parse error (nc27b)
            line = await anyio.to_thread.run_sync(self.readline, MAX_LINE_BYTES + 1)
        if not line:
            raise StopAsyncIteration
        body = line.removesuffix("\n")
        if len(body) > MAX_LINE_BYTES // 4 and len(body.encode("utf-8")) > MAX_LINE_BYTES:
            refused = TooLong("\x00 a line past MAX_LINE_BYTES, skipped\n")
            refused.ident = top_level_id(body[:ID_HEAD_CHARS], cut=True)
            while line and not line.endswith("\n"):
                line = await anyio.to_thread.run_sync(self.readline, MAX_LINE_BYTES)
            line = refused
        self.unclaimed.append(line)
        return line

    def claim(self) -> str | None:
        return self.unclaimed.popleft() if self.unclaimed else None


ANSWER_WAIT = 600
"""Seconds the end of stdin waits at most for the calls still running (a sync with a slow hub included)."""


class Answered:
    """The transport's write stream, noting the requests answered, so that the end of stdin waits for the calls
    still running (`Answering.receive`). Counted by id: requests that share one (a client's mistake) are each
    waited for (nc27a: the first answer ended the wait, and the others were cancelled)."""

    def __init__(self, inner):
        self.inner = inner
        self.pending: Counter = Counter()
        self.settled = anyio.Event()

    def note(self, message) -> None:
        """A message read: a request waits for its answer; one the client cancels gets none (MCP's cancellation),
        whatever else a cancellation names is no request of this session (nc27a: a list as its id ended the server)."""
        if isinstance(message, JSONRPCRequest):
            self.pending[message.id] += 1
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            cancelled = (message.params or {}).get("requestId") if isinstance(message.params, dict) else None
            if isinstance(cancelled, (str, int)) and not isinstance(cancelled, bool) and cancelled in self.pending:
                self._answered(cancelled)

    def _answered(self, id) -> None:
        self.pending[id] -= 1
        if self.pending[id] <= 0:
            del self.pending[id]
        if not self.pending:
            self.settled.set()

    async def send(self, item) -> None:
        await self.inner.send(item)
        message = getattr(item, "message", None)
        if isinstance(message, (JSONRPCResponse, JSONRPCError)) and message.id in self.pending:
            self._answered(message.id)

    async def all_answered(self) -> None:
        with anyio.move_on_after(ANSWER_WAIT):
            while self.pending:
                self.settled = anyio.Event()
                await self.settled.wait()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.aclose()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Answering:
    """The transport's read stream, answering (on the write stream) each line it could not parse, and each request
    whose id is unusable, instead of passing them on; everything else goes through as it came. With `write` an
    `Answered`, the end of the stream comes once every request passed on has been answered."""

    def __init__(self, inner, write, lines: Lines | None = None, reading=None):
        self.inner = inner
        self.write = write
        self.lines = lines
        self.reading = reading  # called once the first line came: the threads that read stdin are made by then

    @property
    def last_context(self):
        return getattr(self.inner, "last_context", None)

    async def receive(self):
        while True:
            try:
                item = await self.inner.receive()
            except anyio.EndOfStream:
                if isinstance(self.write, Answered):
                    await self.write.all_answered()
                raise
            finally:
                if self.reading is not None:
                    self.reading, reading = None, self.reading
                    reading()
            line = self.lines.claim() if self.lines is not None else None
            if isinstance(line, TooLong):
                await self.write.send(SessionMessage(line.answer()))
            elif isinstance(item, Exception):
                await self.write.send(SessionMessage(unparsed_answer(item)))
            elif isinstance(getattr(item, "message", None), JSONRPCNotification) and line is not None \
                    and top_level_id(line) not in (NO_ID, NOT_AN_OBJECT):  # a request whose id the SDK could not take
                await self.write.send(SessionMessage(BAD_ID))
            elif (wrong := bad_tool_call(getattr(item, "message", None))) is not None:
                await self.write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=item.message.id,
                                                                  error=ErrorData(code=INVALID_PARAMS, message=wrong))))
            else:
                if isinstance(self.write, Answered):
                    self.write.note(getattr(item, "message", None))
                return item

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.aclose()


class _Unowned(TextIOWrapper):
    """A text layer whose close leaves the descriptor under it open (as the SDK's own)."""

    def close(self) -> None:
        try:
            self.detach()
        except ValueError:
            pass


def wire_stdin():
    """The protocol's stdin, as the SDK's transport takes it: read from a duplicate of fd 0, with fd 0 itself pointed
    at the null device while serving (so nothing else in the process, and no child, reads the wire), and the function
    that puts it back. Where descriptors cannot be moved, sys.stdin's buffer as it is."""
    import os
    import sys

    try:
        wire = os.dup(sys.stdin.fileno())
        null = os.open(os.devnull, os.O_RDONLY)
    except (OSError, ValueError, AttributeError):
        return anyio.wrap_file(_Unowned(sys.stdin.buffer, encoding="utf-8", errors="replace")), lambda: None
    os.dup2(null, 0)
    os.close(null)

    def restore() -> None:
        try:
            os.dup2(wire, 0)
        except OSError:
            pass

    # closefd=False: a worker thread may still be blocked reading it when serving ends
    return anyio.wrap_file(_Unowned(os.fdopen(wire, "rb", closefd=False), encoding="utf-8", errors="replace")), restore


async def run_stdio(server, stopping=None, running=lambda: None) -> None:
    """`MCPServer.run_stdio_async`, with the read stream answering what it cannot parse. SIGTERM (MCP's shutdown
    over stdio: close stdin, then SIGTERM) and Ctrl-C end the process (143 and 0): the loop could not end by itself
    while its reader waits on a stdin still open. Between two calls `stopping` runs first, on the event loop; during
    a call (`running` names it) the process ends at once, as a kill would, and says so."""
    lowlevel = server._lowlevel_server
    reading = _stop_on_signals(stopping, running) if stopping is not None else None
    stdin, restore = wire_stdin()
    lines = Lines(stdin)
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):
            answered = Answered(write_stream)
            await lowlevel.run(Answering(read_stream, answered, lines, reading), answered,
                               lowlevel.create_initialization_options())
    finally:
        restore()


def _stop_on_signals(stopping, running):
    """Python's own handlers, not the event loop's (`loop.add_signal_handler` runs them only when the loop is free:
    a call waiting 60 s on a silent hub held SIGTERM as long). A signal interrupts the wait of the call in progress;
    ending the process there is what a kill does, which the log is made to survive: what the call committed is kept,
    what it had not is rolled back when the log is next opened, and the next `mem` command writes the files."""
    import asyncio
    import os
    import signal
    import sys

    def stop(code: int) -> None:
        try:
            stopping()
        except Exception as exc:  # a full disk: the log holds every call; the next `mem` command writes the files
            print(f"warning: the files were not rewritten as the server stopped: {exc}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)

    def on_signal(signum, _frame) -> None:
        code = 128 + signal.SIGTERM if signum == signal.SIGTERM else 0  # as every other server `mem` runs on Ctrl-C
        call = running()
        if call is None:
            loop.call_soon_threadsafe(stop, code)
            return
        print(f"warning: stopped during a call ({call}), which may not have ended; the log holds every change made, "
              "and the next `mem` command writes the files", file=sys.stderr, flush=True)
        os._exit(code)

    try:
        loop = asyncio.get_running_loop()
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    except (RuntimeError, ValueError):  # not the main thread: as before
        return None
    # The threads that read stdin are made with the signals blocked (they inherit the mask), so that the kernel hands
    # a signal to the main thread: handed to one of those, it left the main thread blocked in a call's wait on the hub
    # for as long (the server hung on SIGTERM now and then on a loaded machine). Unblocked once the first line came.
    caught = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, caught)
    return lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
