"""Bearer tokens for the servers `mem` starts: `mem ui` and `mem mcp --http` on an address other hosts
reach, and the admin token of the hub's pages.

A server on a loopback address asks no token (only this machine reaches it). On any other address it
refuses every request without the token: `--token-file FILE` reads it from FILE, or writes a new one
there when FILE is missing (as `mem serve --admin-token-file` does), so that it stays the same across
restarts; or the environment variable MEM_SERVER_TOKEN holds the token itself (a service manager's secret, never
on a command line that `ps` shows); without either a new token is made at each start and printed once, on stdout,
with the URL. A
script (an MCP client) sends `Authorization: Bearer <token>`; a browser opens the printed URL once,
`?token=<token>`, and the answer sets an HttpOnly, SameSite=Strict cookie for that port and redirects to
the same page without the token, so the token leaves the address bar and the history.

A server on loopback also refuses a request whose Host is not one of this machine's names with its port
(421), or whose Origin is another site's (403): a web page whose name its owner rebinds to 127.0.0.1 (DNS
rebinding) would otherwise read, from the user's browser, what only this machine should (`rebinding_guard`).
"""

import hmac
import ipaddress
import os
from pathlib import Path
from urllib.parse import urlencode

import msgspec
import typer
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sync.wire import PROBLEM_BASE, Problem

from .output import fail

TOKEN_ENV = "MEM_SERVER_TOKEN"
TokenFileOpt = typer.Option(None, "--token-file", help="Require this bearer token (read from FILE, made there when "
                            f"missing), even on loopback; or set {TOKEN_ENV} to the token itself. On an address other "
                            "hosts reach a token is always required: without either a new one is printed at each start.")


def is_loopback(host: str) -> bool:
    """Whether only this machine reaches HOST (a name other than localhost may resolve to anything)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def rebinding_guard(host: str, port: int):
    """The Host and Origin headers a server listening on HOST:PORT accepts (the MCP SDK's settings, so that
    `mem mcp --http` and `mem ui` check them with one function): on loopback only this machine's names with
    PORT; elsewhere any (the token guards the server there, and its name is the operator's)."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not is_loopback(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = dict.fromkeys([*LOOPBACK_NAMES, f"[{host}]" if ":" in host else host])
    hosts = [f"{name}:{port}" for name in names] + (list(names) if port == 80 else [])
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=[f"http://{h}" for h in hosts])


class HostGate:
    """ASGI middleware that refuses what `rebinding_guard(host, port)` refuses, with the MCP SDK's own check
    (421 for a foreign Host, 403 for a foreign Origin), before anything else answers."""

    def __init__(self, app, host: str, port: int):
        from mcp.server.transport_security import TransportSecurityMiddleware

        self.app, self.check = app, TransportSecurityMiddleware(rebinding_guard(host, port))

    async def __call__(self, scope, receive, send):
        refusal = await self.check.validate_request(Request(scope)) if scope["type"] == "http" else None
        if refusal is not None:
            return await refusal(scope, receive, send)
        await self.app(scope, receive, send)


def token_from_file(path: Path, what: str) -> str:
    """The token in PATH, written there first (a new one, readable by its owner only) when PATH is missing."""
    from sync.storage import new_token

    if not path.exists():
        if not path.parent.is_dir():
            fail(f"{path}: there is no directory {path.parent} to make the {what} in")
        path.touch(mode=0o600)
        path.write_text(new_token() + "\n")
        typer.echo(f"wrote a new {what} to {path}", err=True)
    try:
        token = path.read_bytes().decode().strip()
    except UnicodeDecodeError:
        fail(f"{path} is not a token: it is not UTF-8 text")
    return token or fail(f"{path} is empty")


def server_token(host: str, token_file: Path | None) -> tuple[str | None, bool]:
    """(the token a server on HOST requires or None, whether it was made just now and must be printed)."""
    from sync.storage import new_token

    if token_file is not None:
        return token_from_file(token_file, "bearer token"), False
    if TOKEN_ENV in os.environ:
        return os.environ[TOKEN_ENV].strip() or fail(f"{TOKEN_ENV} is set but empty: set it to the token, or unset it"), False
    if is_loopback(host):
        return None, False
    return new_token(), True


def _problem(title: str) -> Response:
    problem = Problem(type=PROBLEM_BASE + "unauthorized", title=title, status=401, detail=title)
    return Response(msgspec.json.encode(problem), status_code=401, media_type="application/problem+json",
                    headers={"WWW-Authenticate": 'Bearer realm="mindlog"'})


def cookie_name(request: Request) -> str:
    """The token's cookie, one per port: a browser keeps cookies per host whatever the port, so two servers on
    one host (two hubs, a hub and `mem ui`) would otherwise overwrite each other's."""
    return f"mindlog_token_{request.url.port}"


class TokenGate:
    """ASGI middleware that lets a request through only with the token: `Authorization: Bearer <token>`,
    or (with `browser`) the cookie a first `?token=<token>` set. Anything else is a 401 problem document.
    Plain ASGI, so that streamed answers (MCP's) pass through untouched."""

    def __init__(self, app, token: str, *, browser: bool = False):
        self.app, self.token, self.browser = app, token.encode(), browser

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        cookie = cookie_name(request)
        given = request.query_params.get("token") if self.browser else None
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        token = given or (bearer.strip() if scheme.lower() == "bearer" else "") or (
            request.cookies.get(cookie, "") if self.browser else "")
        if not token:
            how = "open the URL printed with `?token=` once, or send" if self.browser else "send"
            answer = _problem(f"a token is needed here: {how} `Authorization: Bearer <token>`")
        elif not hmac.compare_digest(token.encode(), self.token):
            answer = _problem("the token is not this server's")
        elif given:
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            answer = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), status_code=303)
            answer.set_cookie(cookie, token, httponly=True, samesite="strict", path="/")
        else:
            return await self.app(scope, receive, send)
        await answer(scope, receive, send)
