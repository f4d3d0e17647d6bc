"""The web pages: each route opens the workspace's `Memory`, reads through its public methods and
views, and renders a template. Nothing here writes to the log; every asset is served from here."""

import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from eventstore.errors import InvalidInput, MemError, NotFound
from eventstore.instants import format_instant, parse_instant
from projections import history as histories
from projections import trust
from projections.conflicts import conflicts_shown
from projections.views import page_path
from sync.hub import problem_response
from sync.wire import PROBLEM_BASE, Problem

from .timeline import timeline

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
NAV = [("asof", "As of"), ("timeline", "Timeline"), ("history", "Page history"), ("conflicts", "Conflicts"),
       ("search", "Search"), ("contract", "Contract")]


class Moment(msgspec.Struct):
    seq: int
    head: int
    at: str
    query: str  # the moment as a query string, for links that keep it


def _int(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    if not value.isdigit():
        raise InvalidInput(f"{name} must be a whole number, not {value!r}")
    return int(value)


def moment(mem, request: Request) -> Moment:
    """The moment the URL names: `?seq=N` or `?at=ISO` (now when neither)."""
    seq, at = _int(request, "seq"), request.query_params.get("at") or None
    if seq is not None and at is not None:
        raise InvalidInput("give seq or at, not both")
    as_of = mem.seq_at(parse_instant(at) if at is not None else None, seq)
    head = mem.checkpoint()
    recorded = mem.log.recorded_at(as_of) if as_of else None
    query = "" if seq is None and at is None else urlencode({"seq": as_of})
    return Moment(seq=as_of, head=head, at=format_instant(recorded) if recorded else "", query=query)


class Site:
    def __init__(self, root: Path, title: str = ""):
        self.root = Path(root)
        self.title = title or str(self.root)
        self.local = threading.local()

    @contextmanager
    def memory(self):
        """This thread's Memory of the workspace (SQLite connections stay in their thread), caught up
        with the log first, so a page shows what was appended since the last one."""
        from projections.memory import Memory

        mem = getattr(self.local, "memory", None)
        if mem is None:
            mem = self.local.memory = Memory.open(self.root)
        if mem.head() > mem.checkpoint():
            mem.refresh(files=False)
        yield mem

    def render(self, request: Request, name: str, current: str, **context):
        return templates.TemplateResponse(request, name, {"nav": NAV, "current": current, "title": self.title,
                                                          **context})

    # --- pages ------------------------------------------------------------------------------

    async def asof(self, request: Request):
        slug = request.query_params.get("page") or None
        with self.memory() as mem:
            now = moment(mem, request)
            seen = mem.believed(now.seq, last=10, include_all=True)
            text = mem.views.page(slug, now.seq) if slug else None
        return self.render(request, "asof.html", "asof", moment=now, believed=seen, slug=slug, text=text)

    async def history(self, request: Request):
        path = request.query_params.get("path") or ""
        slug = request.query_params.get("page")
        if slug:
            path = page_path(slug)
        a, b = _int(request, "a"), _int(request, "b")
        with self.memory() as mem:
            now = moment(mem, request)
            paths = [page_path(p.slug) for p in mem.catalog(now.seq)] + mem.views.shared_paths(now.seq)
            versions = histories.history(mem, path, now.seq) if path else []
            if versions and (a is None or b is None):
                a = versions[-2].seq if len(versions) > 1 else 0
                b = versions[-1].seq
            notes = {v.seq: _note(mem, v.seq) for v in versions}
            diff = histories.diff(mem, path, a, b) if path and b is not None else ""
        return self.render(request, "history.html", "history", moment=now, path=path, paths=paths,
                           versions=versions, notes=notes, a=a, b=b, diff=diff)

    async def timeline(self, request: Request):
        filters = {k: request.query_params.get(k) or None for k in ("kind", "layer", "agent")}
        chosen = _int(request, "event")
        with self.memory() as mem:
            now = moment(mem, request)
            strip = timeline(mem.log, now.seq, **filters)
            event = mem.event(chosen) if chosen is not None else None
            if chosen is not None and event is None:
                raise NotFound(f"there is no event at seq {chosen}")
            changed = _changed(mem, event) if event is not None else None
        detail = None
        if event is not None:
            body = msgspec.json.format(msgspec.json.encode(event.body), indent=2).decode()
            detail = {"seq": event.seq, "id": event.id, "kind": event.kind, "agent": event.agent, "layer": event.layer,
                      "digest": event.digest, "at": format_instant(event.recorded_at), "body": body,
                      "changed": changed}
        keep = {k: v for k, v in filters.items() if v}
        return self.render(request, "timeline.html", "timeline", moment=now, strip=strip, filters=filters,
                           keep=keep, detail=detail, urlencode=urlencode)

    async def conflicts(self, request: Request):
        with self.memory() as mem:
            now = moment(mem, request)
            shown = conflicts_shown(mem)
        return self.render(request, "conflicts.html", "conflicts", moment=now, conflicts=shown)

    async def search(self, request: Request):
        query = request.query_params.get("q", "")
        with self.memory() as mem:
            now = moment(mem, request)
            event = mem.event(now.seq) if now.seq else None
            hits = mem.search(query, as_of=now.seq, day=trust.day_of(event.ts if event else 0), include_all=True,
                              limit=30) if query else []
        return self.render(request, "search.html", "search", moment=now, q=query, hits=hits)

    async def contract(self, request: Request):
        with self.memory() as mem:
            now = moment(mem, request)
            contract = mem.views.contract
            agent = mem.config.agent
        return self.render(request, "contract.html", "contract", moment=now, contract=contract, agent=agent)


def _note(mem, seq: int) -> str:
    event = mem.event(seq)
    return getattr(event.body, "note", "") or "" if event else ""


def _changed(mem, event) -> str | None:
    """The file an event changed, when it names one (a history link)."""
    body = event.body
    slug = getattr(body, "new", None) or getattr(body, "slug", None)
    if event.layer == "mind":
        return page_path(slug) if slug else None
    if mem.views.contract and event.layer in mem.views.contract.layers:
        return mem.views.shared_path(event.layer, slug)
    return getattr(body, "path", None)


async def _refused(request: Request, exc: MemError):
    status = 404 if isinstance(exc, NotFound) else 400
    return problem_response(Problem(type=PROBLEM_BASE + exc.code, title=str(exc), status=status, detail=str(exc)))


def create_app(root: Path, title: str = "") -> Starlette:
    site = Site(root, title)
    routes = [Route("/", lambda request: RedirectResponse("asof")),
              Route("/asof", site.asof), Route("/history", site.history), Route("/timeline", site.timeline),
              Route("/conflicts", site.conflicts), Route("/search", site.search), Route("/contract", site.contract),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    return Starlette(routes=routes, exception_handlers={MemError: _refused})
