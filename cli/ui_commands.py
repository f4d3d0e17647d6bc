"""`mem ui`: serves this workspace's pages (as of any moment) read-only, on 127.0.0.1 unless told."""

from pathlib import Path
from typing import Optional

import typer

from .app import app, memory
from .output import http_url
from .tokens import HostGate, TokenFileOpt, TokenGate, server_token


@app.command()
def ui(port: Optional[int] = typer.Option(None, "--port", help="The port (default: a free one)."),
       host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on (any but a loopback one "
                                "requires a token)."),
       token_file: Optional[Path] = TokenFileOpt):
    """Browse memory over time: as of any moment, page history, timeline, conflicts, search."""
    from sync.server import bare_host, free_port, listen, run_on

    from .web.app import create_app

    host = bare_host(host)  # `[::1]`, as the URL it prints writes it

    with memory() as mem:
        root = mem.root
    token, made = server_token(host, token_file)
    port = free_port() if port is None else port
    sock = listen(host, port)
    typer.echo(f"mindlog ui: {http_url(host, port)}/asof" + (f"?token={token}" if made else ""))
    site = create_app(root)
    run_on(HostGate(TokenGate(site, token, browser=True) if token else site, host, port), sock)
