"""Bearer tokens for the servers `mem` starts: `mem ui` and `mem mcp --http` on an address other hosts
reach, and the admin token of the hub's pages.

A server on a loopback address asks no token (only this machine reaches it). On any other address it
refuses every request without the token: `--token-file FILE` reads it from FILE, or writes a new one
there when FILE is missing (as `mem serve --admin-token-file` does), so that it stays the same across
restarts; or the environment variable MEM_SERVER_TOKEN holds the token itself (a service manager's secret, never
on a command line that `ps` shows); without either a new token is made at each start and printed once, on stdout,
with the URL. A token is at least 16 characters (`MIN_TOKEN`): a shorter one is refused at start. A
script (an MCP client) sends `Authorization: Bearer <token>`; a browser opens the printed URL once,
`?token=<token>`, and the answer sets an HttpOnly, SameSite=Strict cookie and redirects to the same page without
the token, so the token leaves the address bar and the history. The cookie holds no token: a browser sends a
host's cookies to every port of it (another server there gets them too), so it holds a random session id that this
server process maps to the token (`PageSessions`), good for the pages only (the hub's push and pull API never reads
a cookie, and the id is no token) and forgotten when the process stops.

A server on loopback also refuses a request whose Host is not one of this machine's names with its port
(421), or whose Origin is another site's (403): a web page whose name its owner rebinds to 127.0.0.1 (DNS
rebinding) would otherwise read, from the user's browser, what only this machine should (`rebinding_guard`).
"""

import hmac
import ipaddress
import os
import secrets
import threading
from collections import OrderedDict
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
        if refusal is not None:  # as a problem document, as the servers' other refusals (nc33b: the SDK's text)
            from sync.hub import problem_response
            from sync.wire import PROBLEM_BASE, Problem

            what = "host" if refusal.status_code == 421 else "origin"
            problem = Problem(type=f"{PROBLEM_BASE}foreign-{what}", title=refusal.body.decode(),
                              status=refusal.status_code, detail=f"on loopback this server answers only its own "
                              f"{what} names (a page elsewhere must not read it through DNS rebinding)")
            return await problem_response(problem)(scope, receive, send)
        await self.app(scope, receive, send)


MIN_TOKEN = 16
"""The fewest characters a server's token may have (a new one has 47): one of a few characters is guessed."""


def long_enough(token: str, where: str, remedy: str) -> str:
    """TOKEN, or a one-line refusal naming WHERE it came from when it is too short to guard anything, and the
    `remedy`."""
    if len(token) < MIN_TOKEN:
        fail(f"{where} holds a token of {len(token)} characters: a token needs at least {MIN_TOKEN} ({remedy})")
    return token


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
    if not token:
        fail(f"{path} is empty")
    return long_enough(token, str(path), "delete the file to have a new one made")


def server_token(host: str, token_file: Path | None) -> tuple[str | None, bool]:
    """(the token a server on HOST requires or None, whether it was made just now and must be printed)."""
    from sync.storage import new_token

    if token_file is not None:
        return token_from_file(token_file, "bearer token"), False
    if TOKEN_ENV in os.environ:
        token = os.environ[TOKEN_ENV].strip() or fail(f"{TOKEN_ENV} is set but empty: set it to the token, or unset it")
        return long_enough(token, TOKEN_ENV, "set it to a longer one, such as `python -c 'import secrets; "
                           "print(secrets.token_urlsafe(32))'`"), False
    if is_loopback(host):
        return None, False
    return new_token(), True


def _problem(title: str) -> Response:
    problem = Problem(type=PROBLEM_BASE + "unauthorized", title=title, status=401, detail=title)
    return Response(msgspec.json.encode(problem), status_code=401, media_type="application/problem+json",
                    headers={"WWW-Authenticate": 'Bearer realm="mindlog"'})


def cookie_name(request: Request) -> str:
    """The pages' session cookie, one name per port: a browser keeps (and sends) cookies per host whatever the
    port, so two servers on one host (two hubs, a hub and `mem ui`) would otherwise overwrite each other's."""
    return f"mindlog_session_{request.url.port}"


class PageSessions:
    """What the pages' cookie holds instead of the token: a random id, which this process maps to the token given
    once as `?token=`. The cookie reaches every server on the host (cookies are not kept apart by port), so what
    it carries must not be a credential anywhere else: the id is no token (the hub's API refuses it) and dies with
    the process. The `KEPT` newest ids are kept (each `?token=` visit makes one; the oldest is forgotten first)."""

    KEPT = 1024

    def __init__(self):
        self._tokens: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, token: str) -> str:
        """A new session id for a browser that gave TOKEN (already checked)."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[session] = token
            while len(self._tokens) > self.KEPT:
                self._tokens.popitem(last=False)
        return session

    def token(self, session: str) -> str | None:
        with self._lock:
            return self._tokens.get(session) if session else None


def presented(request: Request, sessions: PageSessions | None) -> tuple[str, bool, bool]:
    """(the token a request presents or "", whether it came as `?token=`, whether it sent a session cookie this
    process does not know). With `sessions` (the pages) `?token=` and the cookie count; else only the header."""
    given = request.query_params.get("token", "") if sessions is not None else ""
    scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
    token = given or (bearer.strip() if scheme.lower() == "bearer" else "")
    cookie = request.cookies.get(cookie_name(request), "") if sessions is not None and not token else ""
    if cookie:
        token = sessions.token(cookie) or ""
    return token, bool(given), bool(cookie) and not token


STALE_SESSION = "this browser's session is not this server's (it restarted, or the session was forgotten)"


def without_token(request: Request, token: str, sessions: PageSessions, path: str) -> RedirectResponse:
    """The answer to a page asked with a valid `?token=`: a redirect to the same page without it, setting the
    session cookie (for PATH and below). The target is this server's whatever the request's path (`//host/x` would
    be another host's: leading slashes are one)."""
    rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
    target = "/" + request.url.path.lstrip("/\\")
    answer = RedirectResponse(target + (f"?{rest}" if rest else ""), status_code=303)
    answer.set_cookie(cookie_name(request), sessions.open(token), httponly=True, samesite="strict", path=path)
    return answer


class TokenGate:
    """ASGI middleware that lets a request through only with the token: `Authorization: Bearer <token>`,
    or (with `browser`) the session cookie a first `?token=<token>` set. Anything else is a 401 problem document.
    Plain ASGI, so that streamed answers (MCP's) pass through untouched."""

    def __init__(self, app, token: str, *, browser: bool = False):
        self.app, self.token = app, token.encode()
        self.sessions = PageSessions() if browser else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        token, given, stale = presented(request, self.sessions)
        if not token:
            how = ("open a page once with `?token=<token>` (as the URL printed at start, unless the token came from a "
                   "file), or send") if self.sessions else "send"
            why = f"{STALE_SESSION}: {how}" if stale else f"a token is needed here: {how}"
            answer = _problem(f"{why} `Authorization: Bearer <token>`")
        elif not hmac.compare_digest(token.encode(), self.token):
            answer = _problem("the token is not this server's")
        elif given:
            answer = without_token(request, token, self.sessions, "/")
        else:
            return await self.app(scope, receive, send)
        await answer(scope, receive, send)
