"""Serving a hub with uvicorn: in the foreground (`mem serve`), or on 127.0.0.1 in a background thread
(for `mem demo` and the tests)."""

import gc
import socket
import sys
import threading
import time

import uvicorn

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


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT, before anything says the server is up: a bad port or a busy
    address is a refusal naming it, not uvicorn's log line (or a hang) after a false "listening"."""
    if not 1 <= port <= 65535:
        raise InvalidInput(f"port {port} is out of range: give a port from 1 to 65535", field="port")
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


def run_on(app, sock: socket.socket, **options) -> None:
    """Serves an ASGI app on a socket from `listen` until interrupted."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **options))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def http_protocol():
    """uvicorn's httptools protocol, each response's head and first body chunk sent in one write (uvicorn
    writes them apart). Measured under bench/bench_hub_load.py: the two loopback sends of every answer
    were the hub's largest single cost (a send wakes the client, a second send wakes it again). "auto"
    when httptools is missing."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
    except ImportError:
        return "auto"

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
            transport.write(b"".join(collected.parts))
            if collected.closing:
                transport.close()

    class OneWriteProtocol(HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            if type(self.cycle) is RequestResponseCycle:  # its task has not started yet
                self.cycle.__class__ = OneWriteCycle

    return OneWriteProtocol


def serve(app, sock: socket.socket) -> None:
    """Serves an ASGI app (the hub's, perhaps with more mounted) until interrupted: no access log."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    gc.freeze()  # everything loaded so far lives as long as the process: no collection scans it again
    gc.set_threshold(*GC_THRESHOLD)
    run_on(app, sock, http=http_protocol(), proxy_headers=False, access_log=False, server_header=False,
           timeout_graceful_shutdown=2)


class BackgroundHub:
    def __init__(self, db: str, port: int | None = None, **app_options):
        self.db = db
        self.port = port or free_port()
        self.app_options = app_options
        self.storage = None
        self.server = None
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "BackgroundHub":
        self.storage = open_storage(self.db)
        config = uvicorn.Config(create_app(self.storage, **self.app_options), host="127.0.0.1", port=self.port,
                                http=http_protocol(), log_level="error", lifespan="off", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
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
