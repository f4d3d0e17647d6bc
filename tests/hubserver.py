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
