"""A real hub served by uvicorn on 127.0.0.1: in a thread (HubServer), or as a `mem serve` process."""

import os
import subprocess
import time
from contextlib import contextmanager

import httpx

from conftest import mem_command
from sync.server import BackgroundHub as HubServer
from sync.server import free_port

__all__ = ["HubServer", "free_port", "mem_serve"]


def wait_until_answering(url: str, seconds: float = 10.0) -> None:
    """Returns once `url` answers anything, or after `seconds` (the caller's request then says why)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)


@contextmanager
def mem_serve(hub_db, log=None, env=None, args=()):
    """Runs `mem serve --db HUB_DB` on a free port until the block ends; yields the hub's URL once it answers.
    With `log` (a path), what the hub writes to stderr goes there; `env`: variables set for it; `args`: more options."""
    port = free_port()
    errors = open(log, "wb") if log else subprocess.DEVNULL
    server = subprocess.Popen([*mem_command(), "serve", "--db", hub_db, "--port", str(port), *map(str, args)],
                              stdout=subprocess.DEVNULL, stderr=errors, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(url + "/health")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        if log:
            errors.close()


def raw_answer(port: int, request: bytes) -> bytes:
    """Sends raw bytes on a connection of their own and reads until the server closes it."""
    import contextlib
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        with contextlib.suppress(OSError):  # the server may close before it has read all of a huge head
            sock.sendall(request)
        got = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                got += chunk
        return got


def assert_heads_too_large_and_unreadable_requests_are_refused(port: int) -> None:
    """A request line and headers over MAX_HEAD_BYTES are answered 431, a request no parser reads 400 (two
    Content-Lengths too), each a problem document, the connection closed; a large head within the limit is read."""
    import json

    from sync.server import MAX_HEAD_BYTES

    big = f"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: {'y' * (MAX_HEAD_BYTES + 10)}\r\n\r\n".encode()
    many = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n" + b"a:\r\n" * 17_000 + b"\r\n"  # 68 KB of short headers
    for request, status in ((big, 431), (many, 431), (b"NOT HTTP AT ALL\r\n\r\n", 400),
                            (b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                             400)):
        head, _, body = raw_answer(port, request).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d" % status) and b"application/problem+json" in head, head
        assert json.loads(body)["status"] == status
