"""The web pages: each route opens the workspace's `Memory`, reads through its public methods and
views, and renders a template. Nothing here writes to the log; every asset is served from here."""

import re
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import msgspec
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from eventstore import validate
from eventstore.errors import (InvalidInput, MemError, NotFound, StorageFailure, is_damaged, storage_exceptions,
                               storage_failure)
from eventstore.instants import format_instant
from eventstore.kinds import KINDS
from eventstore.layers import RESERVED_LAYERS, consumes, produces
from eventstore.ids import now_ms
from eventstore.workspace import Workspace, open_read_only
from projections import history as histories
from projections import trust
from projections.conflicts import conflicts_shown
from projections.search import MARK
from projections.views import LOG_PATH, MIND_PATH, page_path
from sync.hub import problem_response
from sync.storage import HUB_AGENT
from sync.wire import PROBLEM_BASE, Problem

from ..output import event_count
from .timeline import timeline

HERE = Path(__file__).parent
ICON = "image/vnd.microsoft.icon"
"""static/favicon.ico: linked from every page, and served at /favicon.ico, where browsers ask for it anyway."""
templates = Jinja2Templates(directory=str(HERE / "templates"))
_MARKED = re.compile(f"{re.escape(MARK[0])}(\\w+){re.escape(MARK[1])}")


def marked(snippet: str) -> Markup:
    """A search snippet as HTML: escaped, each word search marked (`**so**`) in a <mark>."""
    return Markup(_MARKED.sub(r"<mark>\1</mark>", str(escape(snippet))))


templates.env.filters["marked"] = marked
templates.env.filters["event_count"] = event_count
templates.env.filters["instant"] = format_instant
NAV = [("asof", "As of"), ("timeline", "Timeline"), ("history", "Page history"), ("conflicts", "Conflicts"),
       ("search", "Search"), ("contract", "Contract")]


class Moment(msgspec.Struct):
    seq: int
    head: int
    at: str
    query: str  # the moment as a query string, for links that keep it


MAX_INT = 2**63 - 1
SEARCH_HITS = 30
FILES_LISTED = 500
"""The shared files the as-of page lists (a hub of 40,000 shared pages made a 4 MB page); the file chosen is always
shown, and search and the history page find the others."""


def _int(request: Request, name: str, signed: bool = False) -> int | None:
    """A whole number from the query; `signed`: one below zero too, which the caller refuses in its own words (a seq
    is before the first event, as the CLI's `--seq -1` says: "-1 is no whole number" was not true, nc21a)."""
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    digits = value[1:] if signed and value.startswith("-") else value
    if not (digits.isascii() and digits.isdigit()):  # str.isdigit alone takes '²' (int() refuses it) and '１'
        raise InvalidInput(f"{name} must be a whole number, not {value!r}")
    if not -MAX_INT - 1 <= int(value) <= MAX_INT:  # no seq or time goes past what the databases hold
        raise InvalidInput(f"{name} must be at most {MAX_INT}, not {value}" if int(value) > 0 else
                           f"{name} must be at least {-MAX_INT - 1}, not {value}")
    return int(value)


def moment(mem, request: Request) -> Moment:
    """The moment the URL names: `?seq=N` or `?at=TIME` (now when neither), refused as the CLI's `--seq`
    and `--at` are (before the first event, past the head, in the future)."""
    seq, at = _int(request, "seq", signed=True), request.query_params.get("at") or None
    if seq is not None and at is not None:
        raise InvalidInput("give seq or at, not both")
    as_of = mem.moment(at).seq if at is not None else mem.seq_at(None, seq)
    head = mem.checkpoint()
    recorded = mem.recorded_at(as_of) if as_of else None
    query = "" if seq is None and at is None else urlencode({"seq": as_of})
    return Moment(seq=as_of, head=head, at=format_instant(recorded) if recorded else "", query=query)


def judged_day(mem, now: Moment) -> str:
    """The day staleness is judged on, as `mem search` and `mem believed` judge it: the moment's own day, else today."""
    if not now.query:
        return trust.day_of(now_ms())
    event = mem.event(now.seq) if now.seq else None
    return trust.day_of(event.ts if event else 0)


def in_wal_mode(path: Path) -> bool:
    """Whether the file at `path` holds an SQLite database in WAL mode: views truncated or replaced by other means are
    not, and opening them in WAL mode needs a lock no other connection of the server may hold (`Site._let_go`).

    Asked through SQLite, never read with open(): closing any descriptor of a database file drops every POSIX lock the
    process holds on it, its SQLite connections' included (SQLite keeps its own descriptors open while a lock is held).
    Without the server's locks, the next `mem` command to close the views took itself for their last user and deleted
    their WAL and shared memory under the server's readers: about one page in five answered 503
    (SQLITE_IOERR_SHORT_READ) while commands wrote."""
    db = open_read_only(path)
    if db is None:
        return False
    try:
        return db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    except sqlite3.Error:
        return False
    finally:
        db.close()


class Site:
    """The pages over one workspace; a hub's (cli/web/hub.py) narrows the layers shown to a token's."""

    hub = False
    called = "this workspace"
    rebuild_damaged = False
    """Whether damaged views are moved aside and built again when a page opens them: a hub's mirror's, all made from
    the hub; not a workspace's, which `mem replay` rebuilds when asked (damage may be evidence: Memory.witnesses)."""

    def __init__(self, root: Path, title: str = ""):
        self.root = Path(root)
        self.title = title or str(self.root)
        self.local = threading.local()
        self._kept = threading.Lock()
        self._memories: dict[int, object] = {}  # each thread's Memory (by id), kept open from page to page
        self._busy: set[int] = set()  # those a page is reading now
        self._stale: set[int] = set()  # those to close once their page is answered
        self._views_path: Path | None = None

    @contextmanager
    def memory(self):
        """This thread's Memory of the workspace (SQLite connections stay in their thread), caught up
        with the log first, so a page shows what was appended since the last one. Views found damaged under the
        server (a file truncated) are let go in every thread (`_let_go`)."""
        from projections.memory import Memory

        mem = getattr(self.local, "memory", None)
        with self._kept:  # taken as busy at once: `_let_go` closes only a Memory no page reads
            if mem is not None and id(mem) in self._memories and mem.views_replaced():
                self._let_go_of_all()  # a replay renamed new views into place: no thread reads the old file (nc20b)
            if mem is not None and id(mem) not in self._memories:  # closed (`_let_go`, or just above)
                mem = None
            if mem is not None:
                self._busy.add(id(mem))
        if mem is None:
            if self._views_path is not None and not in_wal_mode(self._views_path):
                self._let_go()  # views changed under the server: its threads' connections would hold this open up
            try:
                mem = Memory.open(self.root, rebuild_damaged=self.rebuild_damaged)
            except storage_exceptions() as exc:
                if is_damaged(exc):
                    self._let_go()
                raise
            mem.called = self.called
            self.local.memory = mem
            self._views_path = mem.ws.views_path
            with self._kept:
                self._memories[id(mem)] = mem
                self._busy.add(id(mem))
        try:
            if mem.head() > mem.checkpoint() or mem.moved_elsewhere():
                mem.refresh(files=False)
            yield mem
        except storage_exceptions() as exc:
            if is_damaged(exc):
                self._let_go()
            raise
        finally:
            with self._kept:
                self._busy.discard(id(mem))
                if id(mem) in self._stale:
                    self._close(mem)

    def _let_go(self) -> None:
        """Closes every thread's Memory (one a page reads now once it is answered, by its own thread), each to be
        opened again by its thread's next page. A connection to views in WAL mode holds a lock on the file as long
        as it is open, so an idle thread's connection to views damaged since held up every command (`mem replay`,
        meant to repair them, too) and this server's own opening of them again (nc17a). Closed under the lock that a
        page takes its Memory as busy under: never while another thread reads through it (nc20b)."""
        with self._kept:
            self._let_go_of_all()

    def _let_go_of_all(self) -> None:
        """`_let_go`, the caller holding `_kept`."""
        for key, mem in list(self._memories.items()):
            if key in self._busy:
                self._stale.add(key)
            else:
                self._close(mem)

    def _close(self, mem) -> None:
        """Closes `mem` (the caller holds `_kept`); its thread opens another at its next page."""
        del self._memories[id(mem)]
        self._stale.discard(id(mem))
        mem.close()

    def render(self, request: Request, name: str, current: str, **context):
        return templates.TemplateResponse(request, name, {"nav": NAV, "current": current, "title": self.title,
                                                          "hub": self.hub, **context})

    def horizon(self, now: Moment) -> int:
        """The last seq whose existence a page as of the moment may tell (whether a file, page or agent's
        events ever were): in a workspace, the head (its owner reads all of it anyway, and a page opened as
        of a moment before it was written says so); on a hub, the moment itself, since a token's layers are
        those of the moment (an agent dropped since must learn nothing of what came after)."""
        return now.head

    def visible(self, request: Request, mem, now: Moment) -> set[str] | None:
        """The layers this request may see at the moment (None: every layer; a hub narrows it to a token's)."""
        return None

    def check_layer(self, request: Request, mem, now: Moment, layer: str | None) -> None:
        """A layer the request may not see is one that does not exist, as far as it can tell; in a
        workspace, one neither private nor in the contract of the moment (a typo, as the CLI refuses it)."""
        visible = self.visible(request, mem, now)
        if visible is None and layer is not None and layer not in RESERVED_LAYERS:
            contract = mem.contract_as_of(now.seq)
            visible = {layer} if contract is not None and layer in contract.layers else set()
        if layer is not None and visible is not None and layer not in visible:
            raise NotFound(f"there is no layer {layer!r} here")

    def check_agent(self, request: Request, mem, now: Moment, agent: str | None) -> None:
        """An agent that never wrote to this log (in the layers the request sees) is refused, naming those
        that did: an empty strip would read as an agent that was idle."""
        if agent is None:
            return
        visible = self.visible(request, mem, now)
        upto = self.horizon(now)
        totals = mem.activity().totals(mem.recorded_at(upto) or 0) if upto else {}
        agents = sorted({name for layer, name in totals if visible is None or layer in visible})
        if agent not in agents:
            named = [name for name in agents if name != HUB_AGENT]  # the hub's own redactions: no agent
            raise NotFound(f"no agent {agent!r} wrote to {self.called} (agents that did: "
                           f"{', '.join(named) or 'none yet'})")

    def check_file(self, request: Request, mem, now: Moment, path: str) -> None:
        """A file the request may not see does not exist, as far as it can tell: on a hub, one in a layer
        it does not see, or in no shared layer at all (the hub keeps no other file)."""
        layer = mem.layer_of(path, now.seq, since_start=True)
        if layer:
            self.check_layer(request, mem, now, layer)
        elif self.visible(request, mem, now) is not None:
            raise NotFound(f"there is no file {path!r} here")

    def check_ever(self, mem, now: Moment, path: str, called: str) -> None:
        """A page or file shown as of a moment when it did not exist is said so; one that never existed up to the
        horizon (the head; on a hub the moment) is a 404, as on the history page (a typo would read as a page not
        written yet). A layer's file is the layer's, empty until its first event."""
        if not histories.history(mem, path, self.horizon(now)):
            raise NotFound(f"there is no {called} here")

    @staticmethod
    def check_shown(now: Moment, name: str, value: int | None) -> None:
        """An event or version named in the URL (`event`, `a`, `b`) is one by the moment shown: later ones are
        read as of a later moment (on a hub, a token's layers are those of the moment, and what came after is
        not theirs to read). One past the head is said so (a diff with the head would read as one with that seq)."""
        if value is None or value <= now.seq:
            return
        if value > now.head:
            raise InvalidInput(f"{name} {value} is past the log head ({now.head})")
        raise InvalidInput(f"{name} {value} is after the moment shown (seq {now.seq}): open a later moment to see it")

    def received(self, request: Request, mem, now: Moment) -> list[tuple[str, int]]:
        """(consumer, the seq it had received up to) by the moment, where that is known."""
        return []

    # --- pages ------------------------------------------------------------------------------

    def asof(self, request: Request):
        slug = request.query_params.get("page") or None
        page = validate.slug(slug) if slug else None  # first: an unsafe slug is a 400, on a hub too
        chosen = request.query_params.get("file") or None
        with self.memory() as mem:
            now = moment(mem, request)
            seen = mem.believed(now.seq, last=10, include_all=True, shared=False, day=judged_day(mem, now))
            text = mem.page_text(page, now.seq) if page and not self.hub else None
            if text is None and slug:  # a hub keeps no wiki page: every one is a 404
                self.check_ever(mem, now, page_path(slug), f"page {slug!r}")
            files = self.shared_files(request, mem, now)
            if chosen is not None and chosen not in files:
                self.check_file(request, mem, now, chosen)
            shown = mem.file_text(chosen, now.seq) if chosen else None
            if chosen is not None and shown is None and not _layer_file(mem, chosen, now.seq,  # the layer's: not yet
                                                                        None if self.hub else mem.config.agent):
                self.check_ever(mem, now, chosen, f"file {chosen!r}")
            received = self.received(request, mem, now)
            own = [p for p in self.agent_files(mem, now) if p not in files]
        return self.render(request, "asof.html", "asof", moment=now, believed=seen, slug=slug, text=text,
                           files=files, listed=FILES_LISTED, own=own, chosen=chosen, shown=shown, received=received)

    def agent_files(self, mem, now: Moment) -> list[str]:
        """The wiki's two files and the agent's own files in adf_files by the moment; a hub has none."""
        if self.hub:
            return []
        return [MIND_PATH, LOG_PATH, *mem.file_paths(now.seq)]

    def shared_files(self, request: Request, mem, now: Moment) -> list[str]:
        """The shared files with a version by the moment in the layers this request sees then."""
        return mem.shared_listing(now.seq, self.visible(request, mem, now))

    def history(self, request: Request):
        path = request.query_params.get("path") or request.query_params.get("file") or ""  # `file`, as on as-of
        slug = request.query_params.get("page")
        if slug:
            path = page_path(validate.slug(slug))  # an unsafe slug is a 400, as on the as-of page
        a, b = _int(request, "a"), _int(request, "b")
        with self.memory() as mem:
            now = moment(mem, request)
            paths = [] if self.hub else [page_path(p.slug) for p in mem.catalog(now.seq)]
            shared = self.shared_files(request, mem, now)
            paths += shared + [p for p in self.agent_files(mem, now) if p not in shared]
            if path and path not in paths:
                self.check_file(request, mem, now, path)
            versions = histories.described(mem, histories.history(mem, path, now.seq)) if path else []
            wiki = not self.hub and path in (MIND_PATH, LOG_PATH)  # there from `mem init` on, as the as-of page shows
            if path and not versions and not wiki:
                self.check_ever(mem, now, path, f"file {path!r}")
            for name, value in (("a", a), ("b", b)):
                self.check_shown(now, name, value)
            if versions and (a is None or b is None):
                a = versions[-2].seq if len(versions) > 1 else 0
                b = versions[-1].seq
            notes = {v.seq: _note(mem, v.seq) for v in versions}
            diff = histories.diff(mem, path, a, b) if path and b is not None else ""
        return self.render(request, "history.html", "history", moment=now, path=path, paths=paths,
                           versions=versions, notes=notes, a=a, b=b, diff=diff)

    def timeline(self, request: Request):
        filters = {k: request.query_params.get(k) or None for k in ("kind", "layer", "agent")}
        span = {k: _int(request, k) for k in ("t0", "t1")}
        if span["t0"] is not None and span["t1"] is not None and span["t1"] < span["t0"]:
            raise InvalidInput(f"t1 ({span['t1']}) is before t0 ({span['t0']}): the range ends before it begins")
        chosen = _int(request, "event")
        with self.memory() as mem:
            now = moment(mem, request)
            self.check_layer(request, mem, now, filters["layer"])
            self.check_agent(request, mem, now, filters["agent"])
            if filters["kind"] is not None and filters["kind"] not in KINDS:
                raise NotFound(f"there is no event kind {filters['kind']!r}")
            visible = self.visible(request, mem, now)
            strip = timeline(mem, now.seq, **span, **filters, visible=visible)
            if chosen is not None and chosen <= now.head:  # one past the head: no event, a 404 below
                self.check_shown(now, "event", chosen)
            event = mem.event(chosen) if chosen is not None else None
            if chosen is not None and (event is None or (visible is not None and event.layer not in visible)):
                raise NotFound(f"there is no event at seq {chosen}")
            changed = _changed(mem, event) if event is not None else None
            diff = histories.diff(mem, changed, event.seq - 1, event.seq) if changed else ""
        detail = None
        if event is not None:
            body = msgspec.json.format(msgspec.json.encode(event.body), indent=2).decode()
            detail = {"seq": event.seq, "id": event.id, "kind": event.kind, "agent": event.agent, "layer": event.layer,
                      "digest": event.digest, "at": format_instant(event.recorded_at), "body": body,
                      "changed": changed, "diff": diff}
        keep = {k: v for k, v in filters.items() if v}
        if now.query:
            keep["seq"] = now.seq
        span = {"t0": strip.t0, "t1": strip.t1} if any(v is not None for v in span.values()) else {}
        return self.render(request, "timeline.html", "timeline", moment=now, strip=strip, filters=filters,
                           keep=keep, span=span, zoom=_zoom(strip), detail=detail, urlencode=urlencode)

    def conflicts(self, request: Request):
        with self.memory() as mem:
            now = moment(mem, request)
            visible = self.visible(request, mem, now)
            shown = [c for c in conflicts_shown(mem, now.seq) if visible is None or c.layer in visible]
        return self.render(request, "conflicts.html", "conflicts", moment=now, conflicts=shown)

    def search(self, request: Request):
        query = request.query_params.get("q", "")
        with self.memory() as mem:
            now = moment(mem, request)
            visible = self.visible(request, mem, now)
            hits = mem.search(query, as_of=now.seq, day=judged_day(mem, now), include_all=True, limit=SEARCH_HITS,
                              within=visible) if query.strip() else []
        return self.render(request, "search.html", "search", moment=now, q=query, hits=hits)

    def contract(self, request: Request):
        with self.memory() as mem:
            now = moment(mem, request)
            activity = mem.activity()
            contract = self.contract_at(mem, now)
            visible = self.visible(request, mem, now)
            totals = activity.totals(mem.recorded_at(now.seq) or 0) if now.seq else {}
            received = dict(self.received(request, mem, now))
            uses = layer_uses(contract, totals, received, visible, None if self.hub else mem.config.agent)
            agent = mem.config.agent
        return self.render(request, "contract.html", "contract", moment=now, uses=uses, agent=agent)

    def contract_at(self, mem, now: Moment):
        """The contract as of the moment: the hub's as last pulled, with the local layers declared by then."""
        return mem.contract_as_of(now.seq)


class LayerUse(msgspec.Struct):
    """One layer of the contract as of a moment, and who produced and consumed it by then."""

    layer: str
    path: str
    format: str
    producers: list[str]
    consumers: list[str]
    produced: list[tuple[str, int]]  # agent, events in the layer by the moment
    received: list[tuple[str, str]]  # consumer, what it had received by the moment


def layer_uses(contract, totals, received: dict[str, int], visible: set[str] | None, self_agent: str | None):
    """`received` maps a consumer to the seq it had received up to (a hub's pull cursors); in a
    workspace (`self_agent`), the agent itself has received what its log holds of the layer."""
    uses = []
    for name, spec in sorted((contract.layers if contract else {}).items()):
        if visible is not None and name not in visible:
            continue
        produced = sorted((agent, n) for (layer, agent), n in totals.items() if layer == name)
        got = []
        if self_agent is not None and consumes(contract, self_agent, name):
            got.append((self_agent, f"{event_count(sum(n for a, n in produced if a != self_agent))} of others in its log"))
        for consumer, upto in sorted(received.items()):
            if consumes(contract, consumer, name):
                got.append((consumer, f"up to seq {upto}"))
        uses.append(LayerUse(layer=name, path=spec.path, format=spec.format, producers=list(spec.producers),
                             consumers=list(spec.consumers), produced=produced, received=got))
    return uses


def _zoom(strip) -> dict[str, dict[str, int]]:
    """The time ranges of the zoom buttons: in (the middle half), out (twice as wide), earlier, later (as wide,
    moved by half), each kept within the first and the last event (out of it a zoom out went below 0, a 400,
    and a move at the end narrowed the range)."""
    t0, t1 = strip.t0, strip.t1
    width = max(t1 - t0, 1)
    earlier = max(t0 - width // 2, strip.first)
    later = min(t1 + width // 2, strip.last)
    return {"in": {"t0": t0 + width // 4, "t1": t1 - width // 4},
            "out": {"t0": max(t0 - width // 2, strip.first), "t1": min(t1 + width // 2, strip.last)},
            "earlier": {"t0": earlier, "t1": earlier + (t1 - t0)}, "later": {"t0": later - (t1 - t0), "t1": later}}


def _layer_file(mem, path: str, as_of: int, agent: str | None = None) -> bool:
    """Whether `path` is an entries layer's own file as of a seq (there from the contract on, empty until the layer's
    first event), not a page in a pages layer's folder (which, like any file, may never have existed). With `agent`
    (a workspace's), of a layer it then produced or consumed: another's file is no more there than a typo's (it read
    "did not exist at seq N", where the CLI and the hub's pages say there is none: nc23b)."""
    target = mem.views.shared_target(path, as_of) if mem.views.contract else None
    if target is None or target[1] is not None:
        return False
    contract = mem.views.contract_at(as_of)
    return agent is None or contract is not None and (consumes(contract, agent, target[0])
                                                       or produces(contract, agent, target[0]))


def _note(mem, seq: int) -> str:
    event = mem.event(seq)
    return getattr(event.body, "note", "") or "" if event else ""


def _changed(mem, event) -> str | None:
    return mem.path_changed(event)


async def refused(request: Request, exc: MemError):
    """A refusal as a problem: 404 for what is not there, a failed storage's own status (503: the hub's API says
    the same), else 400."""
    status = 404 if isinstance(exc, NotFound) else exc.status if isinstance(exc, StorageFailure) else 400
    return problem_response(Problem(type=PROBLEM_BASE + exc.code, title=str(exc), status=status, detail=str(exc)))


def site_app(site: Site, middleware=(), handlers=None) -> Starlette:
    """The pages of a Site as an ASGI app (a workspace's for `mem ui`; a hub's, mounted at /ui)."""
    routes = [Route("/", lambda request: RedirectResponse("asof")),
              Route("/favicon.ico", lambda request: FileResponse(HERE / "static/favicon.ico", media_type=ICON)),
              Route("/asof", site.asof), Route("/history", site.history), Route("/timeline", site.timeline),
              Route("/conflicts", site.conflicts), Route("/search", site.search), Route("/contract", site.contract),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    async def storage_failed(request: Request, exc: BaseException):
        """As `mem` says it: the damaged file named (with what to do), else the storage's cause in one line."""
        try:
            damage = Workspace.find(site.root).damage(exc)
        except MemError:
            damage = None
        return await refused(request, damage or storage_failure(exc))

    failures = dict.fromkeys(storage_exceptions(), storage_failed)
    return Starlette(routes=routes, middleware=list(middleware),
                     exception_handlers={**failures, MemError: refused, **(handlers or {})})


def create_app(root: Path, title: str = "") -> Starlette:
    return site_app(Site(root, title))
