"""`mem ui`: serves this workspace's pages (as of any moment) read-only on 127.0.0.1."""

from typing import Optional

import typer

from .app import app, memory
from .output import http_url, warn_if_exposed


@app.command()
def ui(port: Optional[int] = typer.Option(None, "--port", help="The port (default: a free one)."),
       host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on.")):
    """Browse memory over time: as of any moment, page history, timeline, conflicts, search."""
    from sync.server import free_port, listen, run_on

    from .web.app import create_app

    with memory() as mem:
        root = mem.root
    port = free_port() if port is None else port
    sock = listen(host, port)
    typer.echo(f"mindlog ui: {http_url(host, port)}/asof")
    warn_if_exposed(host, "this read-only view of the workspace")
    run_on(create_app(root), sock)
