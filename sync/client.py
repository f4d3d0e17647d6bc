"""Pushing and pulling through a hub, CouchDB style: at-least-once sending, idempotent applying,
checkpoints that move only after a durable commit.

- push: this agent's own events in layers the contract lets it produce, after the push cursor;
  the cursor moves once the hub has acknowledged the batch (a retry re-sends; the hub answers
  `duplicate`).
- pull: events after the pull cursor; they are appended (digests checked) in the same transaction
  that stores the new cursor, so an interrupted pull neither loses nor duplicates anything.
"""

import json
import time
from pathlib import Path

import httpx
import msgspec
import zstandard

from eventstore.envelope import Event
from eventstore.errors import InvalidInput, MemError
from eventstore.layers import produced_layers

from .wire import ContractResponse, Problem, PullResponse, PushRequest, PushResponse

BATCH = 5000
PULL_BATCH = 5000
FOLLOW_WAIT = 25.0
RETRY_MAX_SECONDS = 15.0


class Remote(msgspec.Struct):
    name: str
    url: str
    token_file: str


class HubRefused(MemError):
    """The hub answered with a problem document."""

    def __init__(self, problem: Problem):
        super().__init__(f"hub refused: {problem.title}" + (f" — {problem.detail}" if problem.detail else ""),
                         code=problem.type.rsplit("/", 1)[-1])
        self.problem = problem
        self.status = problem.status


class HubUnreachable(MemError):
    """The hub could not be reached, or stopped answering (connection refused, reset, timed out)."""

    code = "hub-unreachable"
    status = 503


class PushReport(msgspec.Struct):
    remote: str
    pushed: int
    duplicates: int


class PullReport(msgspec.Struct):
    remote: str
    pulled: int
    cursor: str


def remotes_path(memory) -> Path:
    return memory.ws.mem_dir / "remotes.json"


def load_remotes(memory) -> dict[str, Remote]:
    try:
        return msgspec.json.decode(remotes_path(memory).read_bytes(), type=dict[str, Remote])
    except FileNotFoundError:
        return {}


def add_remote(memory, name: str, url: str, token_file: str) -> Remote:
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"{url!r} is not an http(s) URL")
    token_path = Path(token_file).absolute()
    if not token_path.is_file():
        raise InvalidInput(f"token file {token_file} does not exist")
    remotes = load_remotes(memory)
    remotes[name] = Remote(name=name, url=url.rstrip("/"), token_file=str(token_path))
    data = json.dumps(msgspec.to_builtins(remotes), indent=2) + "\n"
    remotes_path(memory).write_text(data)
    return remotes[name]


def get_remote(memory, name: str | None) -> Remote:
    remotes = load_remotes(memory)
    if not remotes:
        raise InvalidInput("no remote yet: `mem remote add NAME URL --token-file F`")
    if name is None:
        if len(remotes) > 1 and "origin" not in remotes:
            raise InvalidInput(f"several remotes ({', '.join(remotes)}): name one")
        name = "origin" if "origin" in remotes else next(iter(remotes))
    if name not in remotes:
        raise InvalidInput(f"no remote {name!r} (remotes: {', '.join(remotes)})")
    return remotes[name]


class HubClient:
    def __init__(self, url: str, token: str, timeout: float = 60.0, transport=None):
        self.timeout = timeout
        self.http = httpx.Client(base_url=url, timeout=timeout, transport=transport,
                                 headers={"authorization": f"Bearer {token}", "accept-encoding": "zstd"})

    @classmethod
    def for_remote(cls, remote: Remote) -> "HubClient":
        return cls(remote.url, Path(remote.token_file).read_text().strip())

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, type_, body: bytes | None = None, params=None, wait: float = 0):
        headers = {}
        if body is not None:
            headers["content-type"] = "application/json"
            if len(body) > 4096:
                body = zstandard.ZstdCompressor(level=3).compress(body)
                headers["content-encoding"] = "zstd"
        try:
            # A long-poll's read timeout covers its wait: an idle hub answers only when the wait ends.
            response = self.http.request(method, path, content=body, params=params, headers=headers,
                                         timeout=self.timeout + wait)
        except httpx.TransportError as exc:
            raise HubUnreachable(f"hub unreachable at {self.http.base_url}: {exc or type(exc).__name__}") from None
        data = response.content  # httpx undoes a zstd Content-Encoding itself
        if response.status_code >= 400:
            try:
                raise HubRefused(msgspec.json.decode(data, type=Problem))
            except msgspec.DecodeError:
                raise HubRefused(Problem(type="about:blank", title=f"HTTP {response.status_code}",
                                         status=response.status_code)) from None
        return msgspec.json.decode(data, type=type_)

    def contract(self) -> ContractResponse:
        return self._call("GET", "/v1/contract", ContractResponse)

    def push(self, events: list[Event]) -> PushResponse:
        return self._call("POST", "/v1/push", PushResponse, msgspec.json.encode(PushRequest(events=events)))

    def pull(self, cursor: str = "", limit: int = BATCH, wait: float = 0) -> PullResponse:
        return self._call("GET", "/v1/pull", PullResponse,
                          params={"cursor": cursor, "limit": limit, "wait": wait}, wait=wait)


def _outgoing(event: Event) -> Event:
    return Event(id=event.id, ts=event.ts, agent=event.agent, layer=event.layer, body=event.body,
                 digest=event.digest)


def push_cursors(memory) -> dict[str, int]:
    """The last seq pushed to each remote: the log must still hold it."""
    cursors = {}
    for name in load_remotes(memory):
        cursor = memory.log.state(f"push:{name}")
        if cursor:
            cursors[f"the push cursor of remote {name}"] = int(cursor)
    return cursors


def push(memory, remote: Remote, client: HubClient | None = None, progress=None) -> PushReport:
    client = client or HubClient.for_remote(remote)
    contract = client.contract()
    memory.set_contract(contract.contract)
    agent = memory.config.agent
    layers = produced_layers(contract.contract, agent)
    key = f"push:{remote.name}"
    cursor = int(memory.log.state(key) or 0)
    pushed = duplicates = 0
    while layers:
        batch = list(memory.log.read(after=cursor, layers=layers, agent=agent, limit=BATCH))
        if not batch:
            break
        results = client.push([_outgoing(e) for e in batch]).results
        duplicates += sum(r.duplicate for r in results)
        pushed += sum(not r.duplicate for r in results)
        cursor = batch[-1].seq
        memory.log.set_state(key, str(cursor))
        if progress:
            progress(len(batch))
    return PushReport(remote=remote.name, pushed=pushed, duplicates=duplicates)


def pull(memory, remote: Remote, client: HubClient | None = None, follow: bool = False,
         wait: float = FOLLOW_WAIT, progress=None, stop=None, say=None) -> PullReport:
    """Pulls until caught up; with `follow`, keeps long-polling (`wait` seconds per request) until
    `stop()` is true. A follower outlives the hub: when it is unreachable (or answers 5xx) it says so
    once through `say` and retries with backoff, then says when it is back."""
    client = client or HubClient.for_remote(remote)
    key = f"pull:{remote.name}"
    pulled, delay, down, behind = 0, 0.5, False, True
    while True:
        try:
            if behind:
                pulled += _pull_until_caught_up(memory, client, key, progress)
            if down and say:
                say(f"hub {remote.url} answers again; following")
            down, delay = False, 0.5
            if not follow or (stop is not None and stop()):
                break
            page = client.pull(memory.log.state(key) or "", PULL_BATCH, wait)
            pulled += _store(memory, key, page, progress)
            behind = page.more
        except (HubUnreachable, HubRefused) as exc:
            if not follow or (isinstance(exc, HubRefused) and exc.status < 500):
                raise
            if not down and say:
                say(f"{exc}; retrying until it answers")
            down, behind = True, True
            if stop is not None and stop():
                break
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)
    memory.refresh()
    return PullReport(remote=remote.name, pulled=pulled, cursor=memory.log.state(key) or "")


def _store(memory, key: str, page: PullResponse, progress) -> int:
    """Appends a page (digests checked) in the transaction that moves the cursor."""
    memory.log.append(page.events, state={key: page.cursor}, verify=True)
    if page.events and progress:
        progress(len(page.events))
    if page.events and not page.more:
        memory.refresh()  # once caught up, not after every page: a burst renders its files once
    return len(page.events)


def _pull_until_caught_up(memory, client: HubClient, key: str, progress) -> int:
    """Pulls pages until one comes back empty: that request acknowledges the last one."""
    memory.set_contract(client.contract().contract)
    pulled = 0
    while True:
        page = client.pull(memory.log.state(key) or "", PULL_BATCH, 0)
        pulled += _store(memory, key, page, progress)
        if not page.events and not page.more:
            return pulled
