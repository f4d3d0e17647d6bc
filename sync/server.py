"""Serving a hub with uvicorn: in the foreground (`mem serve`), or on 127.0.0.1 in a background thread
(for `mem demo` and the tests)."""

import asyncio
import contextlib
import gc
import json
import socket
import sys
import threading
import time
from collections.abc import Callable

import uvicorn

from eventstore import validate
from eventstore.errors import InvalidInput

from .hub import create_app
from .storage import open_storage


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the GIL while another waits for it (Python's default: 0.005). The group
committer runs in a thread of its own (and PostgreSQL reads in worker threads); under load the event
loop's thread is always busy, so each of their returns from SQLite or a socket would otherwise wait
up to the full default."""


GC_THRESHOLD = (50_000, 20, 100)
"""The cyclic collector's thresholds while serving (Python's default: 700, 10, 10). With the default,
a loaded hub ran a full collection every second or so, each pausing every request for up to 100 ms;
requests make little cyclic garbage, so rarer young collections reclaim the same."""


def bare_host(host: str) -> str:
    """An address as a socket takes it: an IPv6 one given in brackets, as URLs write it (`[::1]`), without them."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT, before anything says the server is up: a bad port or a busy
    address is a refusal naming it, not uvicorn's log line (or a hang) after a false "listening"."""
    validate.port(port)
    host = bare_host(host)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise InvalidInput(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)  # connections wait in the backlog until uvicorn takes over
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class StoppingServer(uvicorn.Server):
    """uvicorn's server, calling `stopping` as its shutdown begins: before it waits for the requests in flight."""

    def __init__(self, config: uvicorn.Config, stopping: Callable[[], None] | None = None):
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets=None) -> None:
        if self.stopping is not None:
            self.stopping()
        await super().shutdown(sockets)


def run_on(app, sock: socket.socket, stopping: Callable[[], None] | None = None, **options) -> None:
    """Serves an ASGI app on a socket from `listen` until interrupted (`stopping`: see StoppingServer); with the
    hub's limits on what a client may hold (`http_protocol`: late requests, heads too large, answers not read)
    unless `http` says otherwise."""
    options.setdefault("http", http_protocol(one_write=False))
    server = StoppingServer(uvicorn.Config(app, log_level="warning", **options), stopping)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


READ_TIMEOUT = 20.0
"""Seconds a request may take to arrive (`http_protocol`): its head whole from its first byte (or from the
connection's opening, for the first), and no longer than this between two parts of its body. A client that sends a
request a byte at a time, or opens connections and sends nothing, no longer holds a descriptor for good: at the
process's limit of open files every other request was refused."""
READ_SWEEP = 1.0
"""Seconds between two looks at the connections for one whose request is late (one timer for all of them)."""
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/problem+json\r\nconnection: close\r\n"
             b"content-length: %d\r\n\r\n%s")
"""The answer to a request that did not arrive in time (its connection closed after it)."""

MAX_HEAD_BYTES = 64 * 1024
"""The most a request's line and headers may take (uvicorn's httptools protocol sets no limit: a 64 MiB header
was read whole into memory): more is answered 431 and the connection closed."""
REQUEST_LINE_BYTES, HEADER_LINE_BYTES = 15, 4
"""What a request line takes besides its target (`GET `, ` HTTP/1.1`, CRLF) and a header line besides its name and
value (`: `, CRLF), at the least: a head of 30,000 empty headers counts what it sends."""
TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/problem+json\r\n"
             b"connection: close\r\ncontent-length: %d\r\n\r\n%s")

DIRECT_BODY_BYTES = 64 * 1024
"""The largest body a request answered from the parser's callbacks may declare (uvicorn's own high-water
mark, past which it pauses reading until the app takes the body): a larger one goes the ASGI way."""


def unsent(transport) -> int:
    """Bytes of the answers written to a connection that its client has not taken yet: those in the transport's
    buffer and (on Linux) those in the socket's send queue, which drains as the client reads, where the transport's
    buffer moves only once a third of a large send queue is free."""
    size = transport.get_write_buffer_size()
    try:
        import fcntl
        import termios

        queued = fcntl.ioctl(transport.get_extra_info("socket").fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        size += int.from_bytes(queued, sys.byteorder)
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    return size


def problem(status: int, title: str, detail: str) -> bytes:
    """A problem document (RFC 9457) for an answer the server makes before any app sees the request."""
    return json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail}).encode()


def http_protocol(app=None, read_timeout: float = READ_TIMEOUT, one_write: bool = True):
    """uvicorn's httptools protocol, each response's head and first body chunk sent in one write (uvicorn
    writes them apart). Measured under bench/bench_hub_load.py: the two loopback sends of every answer
    were the hub's largest single cost (a send wakes the client, a second send wakes it again). "auto"
    when httptools is missing.

    With the hub's app (`sync.hub.HubApp`, perhaps with more mounted), a request it answers directly
    (`HubApp.direct`: a push, a pull) is answered from the parser's callbacks: its headers and body collected
    as uvicorn collects them, handed to the hub's handler, its answer written in one write, with no ASGI scope,
    cycle or task. Anything unusual goes the ASGI way, as before: HTTP/1.0, `Expect: 100-continue`, a body
    without a Content-Length or over DIRECT_BODY_BYTES (a GET's: any body), an upgrade, a request pipelined
    behind another.

    A request that does not arrive within `read_timeout` (READ_TIMEOUT) is answered 408 and its connection closed:
    one timer per event loop looks at the open connections every READ_SWEEP seconds (`_sweep`); a request read
    whole and waiting for its answer (a long-poll) is never cut. Neither is a connection whose client reads its
    answers, however slowly; one whose client has read nothing of them for as long (what it left unread holds the
    write buffer past its high-water mark, not shrinking) is dropped with its buffer, which a client opening many
    connections and reading none held in the hub's memory. A request line and headers over MAX_HEAD_BYTES are
    answered 431, a request the parser cannot read 400, each with a problem document, and the connection closed.

    `one_write` False (a server whose answers may stream, like an MCP server's event streams): each answer's head is
    written as uvicorn writes it, not held for its first body chunk."""
    try:
        import httptools
        from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
    except ImportError:
        return "auto"
    direct = getattr(app, "direct", None)
    sweeping: dict = {}  # event loop -> its sweep's timer, while it has connections
    late = problem(408, "Request Timeout", f"the request did not arrive within {read_timeout:g} s")
    too_large = problem(431, "Request Header Fields Too Large",
                        f"the request's line and headers take more than {MAX_HEAD_BYTES} bytes")

    def _sweep(loop, connections) -> None:
        """Closes, after a 408, every connection whose request is later than `read_timeout` (`_reading_since`), and
        drops every connection whose answers have gone unread as long (`_stalled_since`)."""
        now = loop.time()
        for protocol in list(connections):
            since = getattr(protocol, "_reading_since", None)
            if since is not None and now - since > read_timeout:
                protocol.timed_out()
            stalled = getattr(protocol, "_stalled_since", None)
            if stalled is not None:
                left = unsent(protocol.transport)
                if left < protocol._stalled_size:  # the client reads, however slowly: its clock starts again
                    protocol._stalled_since, protocol._stalled_size = now, left
                elif now - stalled > read_timeout:
                    protocol._stalled_since = None
                    protocol.transport.abort()  # what it holds unwritten is dropped with it
        sweeping[loop] = loop.call_later(READ_SWEEP, _sweep, loop, connections) if connections else None

    class Collected:
        """Stands in for the transport while the head and the first chunk are written."""

        def __init__(self):
            self.parts, self.closing = [], False

        def write(self, data: bytes) -> None:
            self.parts.append(data)

        def close(self) -> None:
            self.closing = True

        def is_closing(self) -> bool:
            return False

    class OneWriteCycle(RequestResponseCycle):
        _start = None

        async def send(self, message) -> None:
            if message["type"] == "http.response.start" and not self.response_started:
                self._start = message  # held until the body (a 500 after a failed answer replaces it)
                return
            start, self._start = self._start, None
            if start is None:
                return await super().send(message)
            transport, collected = self.transport, Collected()
            self.transport = collected
            try:
                await super().send(start)
                await super().send(message)
            finally:
                self.transport = transport
            if collected.parts:  # none once the client is gone (uvicorn writes nothing then)
                transport.write(b"".join(collected.parts))
            if collected.closing:
                transport.close()

    class OneWriteProtocol(HttpToolsProtocol):
        _idle_at: float | None = None  # loop time the connection went idle (its last answer sent), None while busy
        _upgrade_body: int | None = None  # bytes still to come of the body of a request whose Upgrade is ignored
        _answering = None  # the cycle before the last request parsed (still being answered when that one was pipelined)
        _reading_since: float | None = None  # loop time the clock of the request being read started (READ_TIMEOUT)
        _stalled_since: float | None = None  # loop time the unwritten answer last shrank while above the high-water
        _stalled_size = 0  # the size of the unwritten answer then
        _head_bytes: int | None = None  # bytes of the request's line and headers parsed, None once the head is whole
        _unparsed_head = 0  # bytes of the reads wholly inside the head (the parser holds what it has not parsed)
        _began = False  # whether a request began within the read being parsed (pipelined ones before it: not its head)

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._reading_since = self.loop.time()  # its first request's head is due
            if sweeping.get(self.loop) is None:
                sweeping[self.loop] = self.loop.call_later(READ_SWEEP, _sweep, self.loop, self.connections)

        def timed_out(self) -> None:
            """The request being read is late: answered 408, the connection closed."""
            self._close_with(TIMED_OUT % (len(late), late))

        def data_received(self, data: bytes) -> None:
            """uvicorn's, but a request asking to upgrade to anything this server does not speak (`curl --http2`
            asks for h2c) is answered as the HTTP/1.1 request it also is, body included, as RFC 9110 (7.8) lets a
            server do: the parser stops at such a request's head (its body then never reached the app, which
            refused a push as truncated JSON), so its body is taken here, and a new parser reads what follows."""
            self._unset_keepalive_if_required()
            while data:
                if self._upgrade_body is not None:
                    data = self._take_upgrade_body(data)
                    continue
                try:
                    self._began = False
                    self.parser.feed_data(data)
                    if self._head_bytes is not None and not self._began:  # this data was all inside one head
                        self._unparsed_head += len(data)
                        if self._unparsed_head > MAX_HEAD_BYTES:
                            self._close_with(TOO_LARGE % (len(too_large), too_large))
                    return
                except httptools.HttpParserError:
                    if self._head_bytes is not None and self._head_bytes > MAX_HEAD_BYTES:  # on_headers_complete
                        self._close_with(TOO_LARGE % (len(too_large), too_large))
                        return
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("the request is not HTTP/1.1 this server can read")
                    return
                except httptools.HttpParserUpgrade as upgrade:
                    if self._should_upgrade():
                        self.handle_websocket_upgrade()
                        return
                    data = self._ignore_upgrade(data[upgrade.args[0]:])

        def send_400_response(self, msg: str) -> None:
            """uvicorn's, with a problem document as every other refusal has."""
            body = problem(400, "Bad Request", msg)
            self._close_with(STATUS_LINE[400] + b"content-type: application/problem+json\r\nconnection: close\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))

        def _close_with(self, answer: bytes) -> None:
            self._reading_since = self._head_bytes = None
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

        def pause_writing(self) -> None:
            self._stalled_since, self._stalled_size = self.loop.time(), unsent(self.transport)
            super().pause_writing()

        def resume_writing(self) -> None:
            self._stalled_since = None
            super().resume_writing()

        def _ignore_upgrade(self, rest: bytes) -> bytes:
            """After the head of a request whose Upgrade is ignored: its body is `rest`'s first bytes (as many
            as its Content-Length says), the rest another request's."""
            lengths = [value.strip(b" \t") for name, value in self.headers if name == b"content-length"]
            if any(name == b"transfer-encoding" for name, _ in self.headers) or len(lengths) > 1 \
                    or (lengths and not lengths[0].isdigit()):
                self.send_400_response("A request asking to upgrade must send its body with one Content-Length.")
                return b""
            self.parser = httptools.HttpRequestParser(self)
            with contextlib.suppress(AttributeError):  # as uvicorn sets it up (httptools < 0.6.3 has no leniencies)
                self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
            self._upgrade_body = int(lengths[0]) if lengths else 0
            return self._take_upgrade_body(rest)

        def _take_upgrade_body(self, data: bytes) -> bytes:
            """The part of `data` that is the ignored upgrade's body, handed on as the parser would; what is left."""
            body, data = data[:self._upgrade_body], data[self._upgrade_body:]
            if body:
                self.on_body(body)
            self._upgrade_body -= len(body)
            if not self._upgrade_body:
                self._upgrade_body = None
                self.on_message_complete()
            return data

        def _unset_keepalive_if_required(self) -> None:
            """A request comes in: the keep-alive timer, left armed, finds the connection busy when it fires
            (uvicorn cancels it here and arms a new one after every answer: a timer made and unmade per request)."""
            self._idle_at = None

        def on_response_complete(self) -> None:
            """uvicorn's, with one keep-alive timer per idle spell rather than per answer (`_kept_alive`)."""
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self.flow.resume_reading()
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                return
            self._idle_at = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._kept_alive)

        def _kept_alive(self) -> None:
            """The connection is closed once idle for `timeout_keep_alive` seconds, as uvicorn closes it."""
            self.timeout_keep_alive_task = None
            if self._idle_at is None:  # busy: its next answer arms the timer again
                return
            left = self._idle_at + self.timeout_keep_alive - self.loop.time()
            if left > 0:
                self.timeout_keep_alive_task = self.loop.call_later(left, self._kept_alive)
            else:
                self.timeout_keep_alive_handler()

        def connection_lost(self, exc) -> None:
            """uvicorn's, which tells only the last request parsed that its client left: the one being answered, when
            another was pipelined behind it, is told too (it answered into the closed connection, an error logged)."""
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
                self.timeout_keep_alive_task = None
            answering = self._answering
            if answering is not None and answering is not self.cycle and not answering.response_complete:
                answering.disconnected = True
                answering.message_event.set()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            """uvicorn's, without the ASGI scope (a dict of dicts and a copy of the app's state, per request):
            made in `on_headers_complete` for a request that goes the ASGI way, none for one answered directly."""
            self._reading_since = self.loop.time()
            self._head_bytes = self._unparsed_head = 0
            self._began = True
            self.url = b""
            self.expect_100_continue = False
            self.headers = []

        def on_url(self, url: bytes) -> None:
            self._head_bytes += len(url) + REQUEST_LINE_BYTES
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            """uvicorn's (a header's name lower-cased, its value without trailing blanks), counting the head."""
            self._head_bytes += len(name) + len(value) + HEADER_LINE_BYTES
            name, value = name.lower(), value.rstrip(b" \t")
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))

        def on_headers_complete(self) -> None:
            if self._head_bytes > MAX_HEAD_BYTES:
                raise ValueError("head too large")  # stops the parser: answered 431 in `data_received`
            self._reading_since = self.loop.time()  # now its body's parts, each within READ_TIMEOUT of the last
            self._head_bytes = None
            self._answering = self.cycle  # a request pipelined behind it parsed: the one still being answered
            if direct is not None and self._direct():
                return
            headers, url, expect_100_continue = self.headers, self.url, self.expect_100_continue
            super().on_message_begin()  # the scope, and the request's state reset: put back as parsed
            self.headers = self.scope["headers"] = headers
            self.url, self.expect_100_continue = url, expect_100_continue
            super().on_headers_complete()
            if one_write and type(self.cycle) is RequestResponseCycle:  # its task has not started yet
                self.cycle.__class__ = OneWriteCycle

        def _direct(self) -> bool:
            """Whether this request is answered directly (then its cycle is a DirectCycle)."""
            parser = self.parser
            method = parser.get_method()
            handler = direct(method, self.url)
            if (handler is None or self.expect_100_continue or parser.get_http_version() != "1.1"
                    or parser.should_upgrade() or self.pipeline or self.limit_concurrency is not None
                    or (self.cycle is not None and not self.cycle.response_complete)):
                return False
            length = None
            for name, value in self.headers:
                if name == b"content-length":
                    if length is not None or not value.isdigit():
                        return False
                    length = int(value)
                elif name == b"transfer-encoding":
                    return False
            if method == b"GET":  # its handler reads no body: it may send none
                if length:
                    return False
            elif length is None or length > DIRECT_BODY_BYTES:
                return False
            self.cycle = DirectCycle(self, handler, parser.should_keep_alive())
            return True

        def on_body(self, body: bytes) -> None:
            self._reading_since = self.loop.time()
            if type(self.cycle) is DirectCycle:
                self.cycle.body += body
            else:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self.parser.should_upgrade():  # its body, if any, is still to come (`data_received`)
                return
            self._reading_since = None
            if type(self.cycle) is DirectCycle:
                self.cycle.run()
            else:
                super().on_message_complete()

    class DirectCycle:
        """A request answered from the parser's callbacks: what uvicorn's protocol reads of a cycle
        (response_complete, disconnected, keep_alive, message_event) and the body gathered.

        A handler that answers later (a long-poll) returns what stops it: the cycle then stands among the
        server's tasks until answered, so a graceful shutdown waits for it as for an ASGI task and, past its
        timeout, cancels it, answered as uvicorn answers an ASGI task cancelled before its response (a 500)."""

        def __init__(self, protocol: OneWriteProtocol, handler, keep_alive: bool):
            self.protocol, self.handler, self.keep_alive = protocol, handler, keep_alive
            self.headers = protocol.headers
            self.body = b""
            self.response_complete = self.disconnected = False
            self.message_event = self  # set() by uvicorn on a lost connection
            self.stop = None

        def set(self) -> None:
            if self.disconnected and self.stop is not None:  # a long-poll whose client left: nobody to answer
                self.stop, stop = None, self.stop
                self.protocol.tasks.discard(self)
                stop()

        def run(self) -> None:
            stop = self.handler(self.headers, self.body, self.respond)
            if stop is not None and not self.response_complete:
                self.stop = stop
                self.protocol.tasks.add(self)

        def cancel(self, msg=None) -> None:
            """uvicorn's graceful shutdown timed out while this waited (it cancels its tasks)."""
            if self.stop is None:
                return
            self.stop, stop = None, self.stop
            stop()
            self.respond(500, SERVER_ERROR, b"Internal Server Error", asyncio.CancelledError(msg))

        def respond(self, status: int, headers: list, body: bytes, error: BaseException | None) -> None:
            protocol = self.protocol
            if self.stop is not None:
                self.stop = None
                protocol.tasks.discard(self)
            if error is not None:
                protocol.logger.error("Exception in ASGI application\n", exc_info=error)
            if self.disconnected or self.response_complete or protocol.transport.is_closing():
                return
            content = [STATUS_LINE[status]]
            for name, value in protocol.server_state.default_headers:
                content += (name, b": ", value, b"\r\n")
            for name, value in headers:
                content += (name, b": ", value, b"\r\n")
            close = error is not None or not self.keep_alive
            if not self.keep_alive and headers is not SERVER_ERROR:
                content.append(b"connection: close\r\n")
            content += (b"\r\n", body)
            protocol.transport.write(b"".join(content))
            self.response_complete = True
            if close:
                protocol.transport.close()
            protocol.on_response_complete()

    return OneWriteProtocol


SERVER_ERROR = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21"), (b"connection", b"close")]
"""The headers of uvicorn's own 500 (`RequestResponseCycle.send_500_response`)."""


def serve(app, sock: socket.socket, read_timeout: float = READ_TIMEOUT) -> None:
    """Serves an ASGI app (the hub's, perhaps with more mounted) until interrupted: no access log. `read_timeout`:
    see READ_TIMEOUT."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    gc.freeze()  # everything loaded so far lives as long as the process: no collection scans it again
    gc.set_threshold(*GC_THRESHOLD)
    more_descriptors()
    run_on(app, sock, app.state.hub.fanout.release, http=http_protocol(app, read_timeout), proxy_headers=False,
           access_log=False, server_header=False, timeout_graceful_shutdown=2)


def more_descriptors() -> None:
    """The process's limit of open files raised to the most it is allowed (a connection holds one: the soft limit,
    often 1,024, is what a few hundred agents and their long-polls meet first)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


class BackgroundHub:
    """`direct=False`: every request the ASGI way (no answers from the parser's callbacks, `http_protocol`)."""

    def __init__(self, db: str, port: int | None = None, direct: bool = True, **app_options):
        self.db = db
        self.port = port or free_port()
        self.direct = direct
        self.app_options = app_options
        self.app = None
        self.storage = None
        self.server = None
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "BackgroundHub":
        self.storage = open_storage(self.db)
        app = self.app = create_app(self.storage, **self.app_options)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, http=http_protocol(app if self.direct else None),
                                log_level="error", lifespan="off", timeout_graceful_shutdown=2)
        self.server = StoppingServer(config, app.state.hub.fanout.release)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the hub did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.storage.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
