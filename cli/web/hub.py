"""The hub's pages at /ui of `mem serve`: the workspace pages over the hub's mirror (sync.mirror),
behind a token.

A browser gives its token once as `?token=...` (the answer sets an HttpOnly session cookie scoped to /ui,
which holds no token: cli/tokens.py `PageSessions`; and redirects to the same page without it, so the token
leaves the address bar and the history); a script sends `Authorization: Bearer <token>`. An agent's token
shows the layers that agent consumed under the contract in force at the moment shown (now: the current one),
and nothing after that moment (`Site.horizon`, `Site.check_shown`); the admin token (`mem serve
--admin-token-file`) shows every layer ever shared and the contract changes. No token, or an unknown
one: a 401 page.
"""

import hmac
import sys
import threading

from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse

from eventstore.errors import MemError
from eventstore.layers import CONTRACT_LAYER, consumed_layers
from sync.mirror import HubMirror
from sync.storage import HubStorage, hash_token

from ..tokens import STALE_SESSION, PageSessions, presented, without_token
from .app import Moment, Site, refused, site_app


class Admin:
    """The viewer of the admin token: no string, so that no agent's name (an agent may be called `admin`) is it."""

    def __repr__(self) -> str:
        return "ADMIN"


ADMIN = Admin()

NO_ICON = '<link rel="icon" href="data:,">'
"""On the pages answered without a token: the icon is behind the token too, and the hub has no /favicon.ico."""

UNAUTHORIZED = """<!doctype html><html lang="en"><head><meta charset="utf-8">""" + NO_ICON + """<title>401 · mindlog hub</title></head>
<body><h1>401: a token is needed</h1><p>{why}. Open <code>/ui/?token=&lt;your hub token&gt;</code> once
(an agent's token shows the layers it consumes; the admin token shows all), or send
<code>Authorization: Bearer &lt;token&gt;</code>.</p></body></html>"""


GETTING_READY = """<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">""" + NO_ICON + """
<title>getting ready · mindlog hub</title></head><body><h1>The hub's pages are getting ready</h1>
<p id="getting-ready">{progress} This page reloads by itself.</p>
</body></html>"""


READY_WAIT = 5.0
"""Seconds a page waits for a warm-up under way before it answers that the pages are getting ready."""


class GettingReady(Exception):
    """A page asked for while the mirror catches up in the background (see `HubSite.warm_up`)."""


class HubSite(Site):
    hub = True
    called = "this hub"
    rebuild_damaged = True

    def __init__(self, storage: HubStorage, mirror: HubMirror, admin_token: str | None = None):
        super().__init__(mirror.root, title="hub")
        self.storage = storage
        self.mirror = mirror
        self.admin_hash = hash_token(admin_token) if admin_token else None
        self.sessions = PageSessions()
        self.ready = threading.Event()
        self.ready.set()
        self.copied = self.folded = self.total = 0
        self._scrub_lock = threading.Lock()
        self._scrubs_due = 0

    def warm_up(self) -> threading.Thread:
        """Copies the hub into the mirror and folds it from the moment the hub starts, on a thread of its
        own: the first page of a hub holding a million events would otherwise wait for all of it. Until
        then a page answers 503 saying how far it got (and reloads itself); a failed warm-up leaves the
        pages to catch up as they do without one."""
        self.ready.clear()
        thread = threading.Thread(target=self._warm, name="mindlog-ui-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        from projections.bulk import worth_building
        from projections.memory import Memory

        def copied(n: int) -> None:
            self.copied += n

        def folded(n: int) -> None:
            self.folded += n

        try:
            self.total = self.storage.head()
            self.copied = self.mirror.log.head()
            self.copied = self.mirror.catch_up(progress=copied)
            mem = Memory.open(self.root)
            try:
                head, checkpoint = mem.head(), mem.checkpoint()
                self.folded = 0 if worth_building(head - checkpoint, checkpoint) else checkpoint  # a build starts afresh
                mem.refresh(files=False, progress=folded)
            finally:
                mem.close()
        except Exception as exc:  # noqa: BLE001 - the pages catch up on their own after this
            print(f"warning: the hub's pages could not get ready in the background: {exc}", file=sys.stderr)
        finally:
            self.ready.set()

    def scrub_soon(self) -> None:
        """The hub committed a redaction: the mirror copies it and rebuilds its views without what it removed, on a
        thread of its own (`HubMirror.scrub`); redactions committed while it runs get one more pass after it."""
        with self._scrub_lock:
            self._scrubs_due += 1
            if self._scrubs_due > 1:
                return
        threading.Thread(target=self._scrub, name="mindlog-ui-scrub", daemon=True).start()

    def _scrub(self) -> None:
        while True:
            with self._scrub_lock:
                due = self._scrubs_due
            self.ready.wait()  # after the warm-up's first catch-up, which copies the redaction too
            try:
                self.mirror.scrub()
            except Exception as exc:  # noqa: BLE001 - the next page catches up as it does without this
                print(f"warning: the hub's pages could not copy a redaction at once: {exc}", file=sys.stderr)
            with self._scrub_lock:
                self._scrubs_due -= due
                if not self._scrubs_due:
                    return

    def viewer(self, token: str) -> str | Admin | None:
        """ADMIN, the agent the token names, or None."""
        if self.admin_hash is not None and hmac.compare_digest(hash_token(token), self.admin_hash):
            return ADMIN
        return self.storage.agent_for_token(token)

    def horizon(self, now: Moment) -> int:
        """The moment itself: a token's layers are those of the moment, and what they got after is not its to know."""
        return now.seq

    def visible(self, request: Request, mem, now: Moment) -> set[str]:
        """The admin: every layer ever shared. An agent: the layers it consumed under the contract in force
        at the moment (now when the URL names none)."""
        viewer = request.state.viewer
        if viewer is ADMIN:
            return set(self.mirror.ever_shared().layers) | {CONTRACT_LAYER}
        return set(consumed_layers(self.contract_at(mem, now), viewer))

    def memory(self):
        if not self.ready.wait(READY_WAIT):
            raise GettingReady()
        self.mirror.catch_up()
        return super().memory()

    @staticmethod
    def instant(mem, now: Moment) -> int | None:
        """The hub time of the moment: None (now) when the URL names none."""
        return None if not now.query else mem.recorded_at(now.seq) if now.seq else 0

    def contract_at(self, mem, now: Moment):
        return self.storage.contract(self.instant(mem, now))[0]

    def received(self, request: Request, mem, now: Moment) -> list[tuple[str, int]]:
        """Each agent's pull cursor by the moment (an agent's token: its own only)."""
        at = self.instant(mem, now)
        viewer = request.state.viewer
        names = [a.name for a in self.storage.agents() if a.revoked_at is None] if viewer is ADMIN else [viewer]
        got = [(name, min(self.storage.received_by(name, at), now.seq)) for name in names]
        return [(name, upto) for name, upto in got if upto]


class TokenGate(BaseHTTPMiddleware):
    def __init__(self, app, site: HubSite):
        super().__init__(app)
        self.site = site

    async def dispatch(self, request: Request, call_next):
        token, given, stale = presented(request, self.site.sessions)
        if not token:
            return HTMLResponse(UNAUTHORIZED.format(why=STALE_SESSION[0].upper() + STALE_SESSION[1:] if stale
                                                    else "No token was given"), status_code=401)
        try:
            viewer = await run_in_threadpool(self.site.viewer, token)
        except MemError as exc:  # raised here, in a middleware, it would pass the app's handlers by: a bare 500
            return await refused(request, exc)
        if viewer is None:
            return HTMLResponse(UNAUTHORIZED.format(why="The token is unknown or was revoked"), status_code=401)
        if given:
            return without_token(request, token, self.site.sessions, request.scope.get("root_path", "") or "/")
        request.state.viewer = viewer
        return await call_next(request)


def warm_up_progress(copied: int, folded: int, total: int) -> str:
    """How far the warm-up got. Once every event is folded the views are still being finished (their indexes and
    the history written), which takes seconds on a big hub: said so, not a count that reads as done."""
    copied = min(copied, total)
    folded = min(folded, copied)
    if total and folded == total:
        return f"All {total:,} hub events copied and folded; the views' indexes are being finished."
    return f"{copied:,} of {total:,} hub events copied, {folded:,} of them folded so far."


def hub_ui(storage: HubStorage, mirror: HubMirror, admin_token: str | None = None, *, warm_up: bool = False,
           redactions: list | None = None):
    """The ASGI app to mount at /ui of a hub; with `warm_up`, the mirror starts catching up at once. `redactions`:
    the hub's listeners to a redaction it commits (`sync.hub.Hub.redaction_listeners`), to which the mirror is
    added, so it copies the redaction at once (`HubSite.scrub_soon`); so it does after one committed by another
    process, where the storage tells (`HubStorage.watch_redactions`: `mem hub redact` on a PostgreSQL hub)."""
    site = HubSite(storage, mirror, admin_token)
    if warm_up:
        site.warm_up()
    if redactions is not None:
        redactions.append(site.scrub_soon)
        storage.watch_redactions(site.scrub_soon)

    async def getting_ready(request: Request, exc: GettingReady):
        return HTMLResponse(GETTING_READY.format(progress=warm_up_progress(site.copied, site.folded, site.total)),
                            status_code=503, headers={"Retry-After": "2"})

    return site_app(site, middleware=[Middleware(TokenGate, site=site)], handlers={GettingReady: getting_ready})

