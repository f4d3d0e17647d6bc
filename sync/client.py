"""Pushing and pulling through a hub, CouchDB style: at-least-once sending, idempotent applying,
checkpoints that move only after a durable commit.

- push: this agent's own events in layers the contract lets it produce, after the push cursor;
  the cursor moves once the hub has acknowledged the batch (a retry re-sends; the hub answers
  `duplicate`).
- pull: events after the pull cursor; each is checked as the hub checks a push (sync.intake), and
  those that pass are appended in the same transaction that stores the new cursor, so an interrupted
  pull neither loses nor duplicates anything, and one bad event is rejected alone.
"""

import bisect
import json
import os
import sys
import threading
import queue
import re
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, NamedTuple

import msgspec

from eventstore import validate
from eventstore.envelope import MAX_TS, Event, check_event, decode_body
from eventstore.errors import (Damaged, Held, IdConflict, InvalidInput, MemError, NotFound, StorageFailure,
                               TRY_LATER, storage_exceptions, storage_failure, unavailable)
from eventstore.governance import INGEST_VERB, held_message, ingest_refusal, is_held, releases
from eventstore.ids import MINTED_AHEAD_MS, now_ms, uuid7_ms
from eventstore.instants import format_instant
from eventstore.kinds import Redacted, Redaction
from eventstore.layers import Contract, consumed_layers, left, produces, redacts_own_alone, takes
from eventstore.recorder import broken_link
from eventstore.redaction import stand_in
from eventstore.workspace import absolute
from projections.bulk import BULK_FOLD_THRESHOLD, discard, spawn_builder, worth_building
from projections.fold import no_cyclic_gc
from projections.materialize import write_atomic
from projections.memory import REDACTION_FILES
from projections.redact import pending_since
from projections.replay import replay

from .intake import Rejected, accept, conflicting
from .marks import Mark, encoded, load, marks_key, start_again, with_mark
from .wire import (MAX_PULL, MAX_REQUEST_BYTES, MSGPACK, ContractResponse, Problem, PullPage, PullResponse, PushRequest,
                   PushResponse)

BATCH = 5000
PULL_BATCH = 5000
CATCH_UP_BATCH = MAX_PULL
FOLLOW_WAIT = 25.0
RETRY_MAX_SECONDS = 15.0


class Remote(msgspec.Struct):
    name: str
    url: str
    token_file: str
    agent: str = ""  # the agent the token was accepted for (another than the workspace's only with --force)


class HubRefused(MemError):
    """The hub answered with a problem document: a refusal (4xx), or a failure of its own (5xx: its storage
    unavailable, a bug), which is not something the request did wrong."""

    def __init__(self, problem: Problem, message: str | None = None, then: str | None = None):
        """`message` in place of the hub's words; `then`, the next step, after them."""
        said = "hub failed" if problem.status >= 500 else "hub refused"
        message = message or f"{said}: {problem.title}" + (f" — {problem.detail}" if problem.detail else "")
        super().__init__(f"{message}: {then}" if then else message, code=problem.type.rsplit("/", 1)[-1])
        self.problem = problem
        self.status = problem.status


class HubUnreachable(MemError):
    """The hub could not be reached, or stopped answering (connection refused, reset, timed out, bad URL)."""

    code = "hub-unreachable"
    status = 503


class BadAnswer(MemError):
    """The remote answered with something that is not a mindlog hub's answer (not JSON, wrong shape)."""

    code = "bad-answer"
    status = 502


class HubBehind(MemError):
    """The hub lost events it had handed out to this workspace (a database restored from a backup, say)."""

    code = "hub-behind"
    status = 409


PULLING_AGAIN = ("the next `mem pull` pulls again from the last pull the hub still holds (what this workspace holds "
                 "already is kept once)")
PUSHING_AGAIN = ("the next `mem push` sends this agent's events again from the last push the hub still holds "
                 "(those it holds are counted as already there)")


class Asked(msgspec.Struct, frozen=True):
    """What a contract request asks the hub about (`holds_asked`), read once with it: a concurrent push or pull of
    this workspace moves the marks read here, and the hub's answer is about these, not those."""

    pushed: str
    """The id of the last event the hub acknowledged to a push ('': none yet)."""
    pulled_at: int
    pulled_id: str
    """The hub position and id of the last event pulled from it (0, '': none yet)."""
    pulled_to: int
    """The hub position this workspace pulled up to."""

    @property
    def ids(self) -> list[str]:
        return [id for id in (self.pushed, self.pulled_id) if id]


def holds_asked(memory, name: str) -> Asked:
    """The marks a contract request asks the hub about: the last event this workspace pushed to it and the last it
    pulled from it (`hub_lost_pushes`, `hub_behind`)."""
    position, _, pulled = (memory.log.state(_pulled_key(name)) or "").partition(" ")
    return Asked(pushed=memory.log.state(_pushed_key(name)) or "", pulled_at=int(position or 0), pulled_id=pulled,
                 pulled_to=int(memory.log.state(f"pulled-to:{name}") or 0))


def ask_contract(memory, client: "HubClient", name: str) -> tuple["ContractResponse", Asked]:
    asked = holds_asked(memory, name)
    return client.contract(asked.ids), asked


def hub_behind(remote: "Remote", answer: "ContractResponse", asked: Asked) -> str | None:
    """What to say when the hub no longer holds what this workspace pulled from it (None: it does, as far as it
    tells): its head is behind the position pulled up to, or the last event pulled is no longer at its position (a
    hub restored from a backup hands the lost positions out again, to other events)."""
    if answer.head and answer.head < asked.pulled_to:
        why = f"its head is at hub position {answer.head}, this workspace pulled up to {asked.pulled_to}"
    elif asked.pulled_id and answer.holds is not None and answer.holds.get(asked.pulled_id) != asked.pulled_at:
        why = f"the event this workspace pulled at hub position {asked.pulled_at} is no longer there"
    else:
        return None
    return (f"remote {remote.name} at {remote.url} lost events this workspace pulled from it (restored from a "
            f"backup?): {why}")


def hub_lost_pushes(remote: "Remote", answer: "ContractResponse", asked: Asked) -> str | None:
    """What to say when the hub no longer holds the last event this workspace pushed to it (None: it does, or it
    does not tell): the push cursor then counts as pushed events the hub lost."""
    if not asked.pushed or answer.holds is None or asked.pushed in answer.holds:
        return None
    return f"remote {remote.name} at {remote.url} lost events this workspace pushed to it (restored from a backup?)"


class HeldBack(msgspec.Struct):
    """Own events that cannot be pushed: the contract no longer lets this agent produce their layer."""

    layer: str
    count: int
    why: str
    seqs: list[int] = []
    """Their seqs: what `mem redact` (the redact tool's targets) takes back, when the agent will not produce it."""


class PushReport(msgspec.Struct):
    """`resent`: the hub had lost events this workspace pushed, so this push sent all of this agent's again."""

    remote: str
    pushed: int
    duplicates: int
    held: list[HeldBack] = []
    resent: bool = False
    taken_back: int = 0
    """Own events the contract refuses that this agent took back before they went out (`taken_back`): passed for
    good."""


class PullReport(msgspec.Struct):
    """`pulled` counts events new to this log; `returned` this agent's own events coming back (the
    log had them already); `already_held` other agents' events the log had already (brought again
    after its pull cursor was forgotten, say by replacing the remote, or by another hub too);
    `skipped` files not written because they were edited by hand; `rejected` events that failed this
    consumer's checks (left out; the cursor moved past them)."""

    remote: str
    pulled: int
    cursor: str
    returned: int = 0
    skipped: list[str] = []
    rejected: list[Rejected] = []
    already_held: int = 0
    not_adoptable: dict[str, str] = {}  # skipped files `mem adopt` cannot take -> what of the edit (Memory.not_adoptable)
    restarted: bool = False  # the hub had lost events this workspace pulled: this pull began again before them
    conflicts: list[str] = []  # the shared pages (LAYER/SLUG) this pull left in a conflict they were not in before


class PackedPullPage(PullPage):
    """A pull answer that came in msgpack (wire.MSGPACK): its events are read as msgpack."""

    packed: ClassVar[bool] = True


class PulledBatch(msgspec.Struct):
    """What one batch of a follower brought: counted as in PullReport."""

    pulled: int
    returned: int
    position: int
    already_held: int = 0
    conflicts: list[str] = []  # the shared pages (LAYER/SLUG) it left in a conflict they were not in before


def remotes_path(memory) -> Path:
    return memory.ws.mem_dir / "remotes.json"


def load_remotes(memory) -> dict[str, Remote]:
    try:
        return msgspec.json.decode(remotes_path(memory).read_bytes(), type=dict[str, Remote])
    except FileNotFoundError:
        return {}
    except msgspec.MsgspecError as exc:
        raise InvalidInput(f"{remotes_path(memory)} is damaged: {exc} (fix it, or remove it and `mem remote add` again)") from None


class RemoteAdded(msgspec.Struct):
    """`warnings`: what the hub's contract did here that the agent must hear of (a layer's file placed where its
    own file is: Memory.blocked), each one line."""

    remote: Remote
    agent: str
    replaced: Remote | None = None
    warnings: list[str] = []


def _save_remotes(memory, remotes: dict[str, Remote]) -> None:
    data = json.dumps(msgspec.to_builtins(remotes), indent=2) + "\n"
    write_atomic(remotes_path(memory), [data])


def _forget_cursors(memory, name: str) -> None:
    for key in (f"push:{name}", f"held:{name}", _taken_key(name), _pushed_key(name), _came_key(name),
                marks_key("push", name), _clock_key(name)):
        memory.log.set_state(key, "")
    _forget_pull_cursor(memory, name)


def _forget_pull_cursor(memory, name: str) -> None:
    for key in (f"pull:{name}", f"pulled-to:{name}", f"pulled-at:{name}", _pulled_key(name), _covered_key(name),
                marks_key("pull", name), _redactions_key(name)):
        memory.log.set_state(key, "")


def _pull_again(memory, remote: Remote, client: "HubClient") -> str:
    """The hub lost events this workspace pulled: the pull starts again after the newest pull whose last event the
    hub still holds at its position, or from the hub's start. Says from where."""
    mark = start_again(memory, client, marks_key("pull", remote.name), positioned=True)
    memory.log.set_state(_redactions_key(remote.name), "")  # its positions too were handed out again
    if mark is None:
        _forget_pull_cursor(memory, remote.name)
        return "from its start"
    return f"after hub position {mark.at}, the last pull it still holds"


def new_token_file(path: str):
    """A new file for a token, readable by its owner alone (mode 600), opened for writing; an existing file is
    refused (a token written over another is lost), before the agent is registered."""
    try:
        return open(absolute(path), "x", encoding="utf-8", opener=lambda name, flags: os.open(name, flags, 0o600))
    except FileExistsError:
        raise InvalidInput(f"{path} exists already: give a new file for the token") from None
    except OSError as exc:
        raise InvalidInput(f"the token file {path} cannot be made: {exc.strerror}") from None


def add_remote(memory, name: str, url: str, token_file: str, *, force: bool = False,
               client: "HubClient | None" = None) -> RemoteAdded:
    """Adds (or replaces) a remote after asking the hub who the token belongs to: a token of another
    agent is refused unless `force`. The hub's contract is kept, so shared writes work at once."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"{url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput(f"{url!r} is not an http(s) URL with a host")
    if parsed.port is not None:
        validate.port(parsed.port)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", name):
        raise InvalidInput(f"remote name {name!r} must be letters, digits, '-', '_' or '.'")
    token_path = absolute(token_file)
    if not token_path.is_file():
        raise InvalidInput(f"token file {token_file} " + ("is a directory" if token_path.is_dir() else "does not exist"))
    remote = Remote(name=name, url=url.rstrip("/"), token_file=str(token_path))
    client = client or HubClient.for_remote(remote)
    try:
        answer = client.contract()
    finally:
        client.close()
    agent = memory.config.agent
    if answer.agent != agent and not force:
        raise InvalidInput(f"the token belongs to agent {answer.agent!r}, not to this workspace's agent {agent!r}: "
                           "use that agent's token, or --force to sync as another agent")
    remote.agent = answer.agent
    remotes = load_remotes(memory)
    replaced = remotes.get(name)
    if replaced is not None and replaced.url != remote.url:
        _forget_cursors(memory, name)
    remotes[name] = remote
    _save_remotes(memory, remotes)
    warnings: list[str] = []
    mode = token_path.stat().st_mode & 0o777
    if mode & 0o077:  # `mem hub agent add main > main.token` under a usual umask: 0644 (nc24b)
        warnings.append(f"warning: the token file {token_file} can be read by other users (mode {mode:o}): "
                        f"`chmod 600 {shlex.quote(token_file)}`")
    take_placed(memory, answer.contract, warnings.append)
    return RemoteAdded(remote=remote, agent=answer.agent, replaced=replaced, warnings=warnings)


def remove_remote(memory, name: str) -> Remote:
    remotes = load_remotes(memory)
    if name not in remotes:
        raise NotFound(f"no remote {name!r}" + (f" (remotes: {', '.join(remotes)})" if remotes else ""))
    removed = remotes.pop(name)
    _save_remotes(memory, remotes)
    _forget_cursors(memory, name)
    return removed


def get_remote(memory, name: str | None) -> Remote:
    remotes = load_remotes(memory)
    if not remotes:
        raise InvalidInput("no remote yet: `mem remote add NAME URL --token-file F`",
                           for_tools="no remote yet: a person adds one (`mem remote add NAME URL --token-file F`, "
                                     "with a token the hub's administrator gives); no tool can")
    if name is None:
        if len(remotes) > 1 and "origin" not in remotes:
            raise InvalidInput(f"several remotes ({', '.join(remotes)}): name one")
        name = "origin" if "origin" in remotes else next(iter(remotes))
    if name not in remotes:
        raise InvalidInput(f"no remote {name!r} (remotes: {', '.join(remotes)})")
    return remotes[name]


class Outgoing(NamedTuple):
    """A request body as it goes out (JSON, zstd above 4 KB) and its headers."""

    content: bytes
    headers: dict[str, str]

    @classmethod
    def of(cls, body: bytes) -> "Outgoing":
        if len(body) > 4096:
            import zstandard

            return cls(zstandard.ZstdCompressor(level=3).compress(body),
                       {"content-type": "application/json", "content-encoding": "zstd"})
        return cls(body, {"content-type": "application/json"})

    @classmethod
    def push(cls, events: list[Event]) -> "Outgoing":
        return cls.of(msgspec.json.encode(PushRequest(events=events)))


PUSH_BYTES = MAX_REQUEST_BYTES // 2
"""The most bytes of JSON one push request carries (one event alone may carry more, up to the hub's limit)."""


def push_bodies(events: list[Event]) -> list[tuple[list[Event], Outgoing]]:
    """A batch's request bodies, in order: one, unless its JSON is past PUSH_BYTES, then halves until each fits (nc32b:
    a batch of 5,000 events cut by count alone passed the hub's 16 MiB, which refused it at every push for good)."""
    encoded = msgspec.json.encode(PushRequest(events=events))
    if len(encoded) <= PUSH_BYTES or len(events) == 1:
        return [(events, Outgoing.of(encoded))]
    half = len(events) // 2
    return push_bodies(events[:half]) + push_bodies(events[half:])


def on_loopback(url: str) -> bool:
    """Whether a hub's URL names this machine (localhost, 127.0.0.0/8, ::1): its answers are then asked for
    uncompressed, since compressing them would only cost CPU at both ends of the same machine."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HubClient:
    """Every transport failure and every answer that does not decode becomes one MemError line naming
    the remote and its URL; a problem document becomes HubRefused."""

    def __init__(self, url: str, token: str, timeout: float = 60.0, transport=None, name: str = "hub"):
        import httpx  # here, not at the top: `mem status` and the other local commands never load it

        self.timeout, self.url, self.name = timeout, url, name
        try:
            encoding = "identity" if on_loopback(url) else "zstd"
            self.http = httpx.Client(base_url=url, timeout=timeout, transport=transport,
                                     headers={"authorization": f"Bearer {token}", "accept-encoding": encoding})
        except (httpx.InvalidURL, ValueError) as exc:
            raise HubUnreachable(f"remote {name} has a bad URL {url!r}: {exc}") from None

    @classmethod
    def for_remote(cls, remote: Remote, timeout: float = 60.0) -> "HubClient":
        try:
            token = Path(remote.token_file).read_text().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read the token file {remote.token_file} of remote {remote.name}: "
                               f"{exc.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"the token file {remote.token_file} of remote {remote.name} is not a token: "
                               "it is not UTF-8 text") from None
        if not token or not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
            raise InvalidInput(f"the token file {remote.token_file} of remote {remote.name} is not a token: "
                               + ("it is empty" if not token else "a token is one word of printable ASCII"))
        return cls(remote.url, token, timeout=timeout, name=remote.name)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "HubClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _refusal(self, problem: Problem, path: str) -> HubRefused:
        """The hub's refusal, with the next step where its words give none, as a newcomer found (nc22a): a URL given
        with a path, a token revoked."""
        code = problem.type.rsplit("/", 1)[-1]
        if code == "http-404":
            return HubRefused(problem, f"remote {self.name} at {self.url} has no {path}: a hub's URL is the one "
                                       "`mem serve` prints, with no path")
        if code == "invalid-token":
            return HubRefused(problem, then="ask the hub's administrator for a new token (`mem hub agent add`), then "
                                            f"`mem remote add {self.name} {self.url} --token-file FILE` again")
        return HubRefused(problem)

    def _call(self, method: str, path: str, type_, body: "bytes | Outgoing | None" = None, params=None,
              wait: float = 0, packed=None):
        """`packed`: the type an answer in msgpack (wire.MSGPACK) is read as, asked for with `Accept`; without
        it, only JSON is asked for and read."""
        import httpx

        headers = {"accept": MSGPACK} if packed is not None else {}
        if body is not None:
            body, sent = body if isinstance(body, Outgoing) else Outgoing.of(body)
            headers = {**headers, **sent}
        try:
            # A long-poll's read timeout covers its wait: an idle hub answers only when the wait ends.
            response = self.http.request(method, path, content=body, params=params, headers=headers,
                                         timeout=self.timeout + wait)
            data = response.content  # httpx undoes a zstd Content-Encoding itself
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            reason = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
            if isinstance(exc, httpx.ConnectError) and "refused" in reason.lower():
                reason += " (no hub listens there: is `mem serve` running, and is the URL right?)"
            raise HubUnreachable(f"cannot reach remote {self.name} at {self.url}: {reason}") from None
        if response.status_code >= 400:
            try:
                problem = msgspec.json.decode(data, type=Problem)
            except (msgspec.DecodeError, msgspec.ValidationError):
                status = response.status_code
                raise HubRefused(Problem(type="about:blank", title=f"HTTP {status}", status=status),
                                 f"remote {self.name} at {self.url} answered {path} with HTTP {status} and no problem "
                                 "document, as no mindlog hub answers: is that the hub's URL?") from None
            raise self._refusal(problem, path)
        try:
            if packed is not None and response.headers.get("content-type", "").partition(";")[0] == MSGPACK:
                return msgspec.msgpack.decode(data, type=packed)
            return msgspec.json.decode(data, type=type_)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise BadAnswer(f"remote {self.name} at {self.url} answered {path} with something that is not a "
                            f"mindlog hub's answer: {str(exc)[:200]}") from None

    def contract(self, holds: list[str] = ()) -> ContractResponse:
        """`holds`: event ids whose positions the hub tells, those it holds (`ContractResponse.holds`)."""
        return self._call("GET", "/v1/contract", ContractResponse, params={"holds": ",".join(holds)} if holds else None)

    def push(self, events: "list[Event] | Outgoing") -> PushResponse:
        """Pushes a batch: its events, or its request body made beforehand (`Outgoing.push`)."""
        body = events if isinstance(events, Outgoing) else Outgoing.push(events)
        return self._call("POST", "/v1/push", PushResponse, body)

    def pull(self, cursor: str = "", limit: int = BATCH, wait: float = 0, layers: list[str] | None = None,
             until: str = "") -> PullResponse:
        return self._call("GET", "/v1/pull", PullResponse, params=_pull_params(cursor, limit, wait, layers, until),
                          wait=wait)

    def pull_page(self, cursor: str = "", limit: int = BATCH, wait: float = 0, held: str | None = None,
                  durable: bool = False, layers: list[str] | None = None, until: str = "") -> PullPage:
        """Like `pull`, each event still encoded (what a consumer checks one by one). `held`, when the
        request goes out before the page it follows is stored, is the cursor this agent has durably
        stored (what the hub records as received); by default the hub takes `cursor` as that. `durable`
        (a request that may be a pull's last): the hub answers once it has committed that record. `layers`
        (a backfill, never waiting): only those layers' events, up to the position of the cursor `until`."""
        params = _pull_params(cursor, limit, wait, layers, until)
        if held is not None:
            params["held"] = held
        if durable:
            params["ack"] = "durable"
        return self._moved(self._call("GET", "/v1/pull", PullPage, params=params, wait=wait, packed=PackedPullPage),
                           cursor)

    def _moved(self, page: PullPage, cursor: str) -> PullPage:
        """`page`, answered after `cursor`, unless it brought events without moving the cursor past them."""
        if page.events and page.cursor == cursor:  # asked again, the same page would come back, forever
            raise BadAnswer(f"remote {self.name} at {self.url} sent {len(page.events)} events without moving the "
                            "cursor past them: pull stopped (asking again would bring the same page back)")
        return page

    def redactions_page(self, cursor: str = "", limit: int = BATCH) -> PullPage | None:
        """GET /v1/redactions after `cursor` (a cursor of their own), each event still encoded; None from a hub that
        predates it (404)."""
        try:
            answer = self._call("GET", "/v1/redactions", PullPage, params={"cursor": cursor, "limit": limit},
                                packed=PackedPullPage)
            return self._moved(answer, cursor)
        except HubRefused as exc:
            if exc.status == 404:
                return None
            raise


def _pull_params(cursor: str, limit: int, wait: float, layers: list[str] | None, until: str) -> dict:
    params = {"cursor": cursor, "limit": limit, "wait": wait}
    if layers is not None:
        params["layers"] = ",".join(layers)
        if until:
            params["until"] = until
    return params


def check_chain(memory, after: int, upto: int) -> None:
    """Refuses a push whose events the log's chain no longer vouches for: every row after the push cursor `after` up to
    `upto` links to the one before it (`broken_link`, one sha256 a row, no body read). The hub cannot see this chain,
    so only the producer can catch an event changed after it was appended, its digest made anew."""
    seq = broken_link(memory.log.chain_rows(after, upto), after)
    if seq is not None:
        raise Damaged(f"nothing pushed: the event log's chain breaks at seq {seq} (an event was changed, removed or "
                      "reordered outside mindlog); `mem verify` names the first bad seq")


def checked(events: list[Event]) -> list[Event]:
    """`events`, each refused (naming its seq) unless its digest matches its content, as the hub checks it."""
    for event in events:
        try:
            check_event(event)
        except MemError as exc:
            raise Damaged(f"nothing more pushed: the event at seq {event.seq} does not match its digest ({exc}): it "
                          "was changed outside mindlog; `mem verify` names the first bad seq") from None
    return events


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


def _held_key(remote: Remote) -> str:
    return f"held:{remote.name}"


def _taken_key(remote: Remote | str) -> str:
    """The seqs of the own events a push passed for good as taken back (`taken_back`): never at the hub."""
    return f"taken:{getattr(remote, 'name', remote)}"


def _taken(memory, remote: Remote) -> set[int]:
    return set(json.loads(memory.log.state(_taken_key(remote)) or "[]"))


def shown_taken_back(memory, remote: Remote) -> list[str]:
    """The shared pages whose file shows a version this agent took back before it went out (its stub): the other
    agents show the version before it, and nothing else says this copy differs (nc33a); until a producer writes the
    page anew."""
    from eventstore.redaction import page_version

    shown = []
    for seq in sorted(_taken(memory, remote)):
        event = memory.log.get_by_seq(seq)
        version = page_version(event.body) if event is not None else None
        if version is not None and version[0] and memory.views.shared_winner(event.layer, version[0]) == event.id:
            shown.append(memory.page_file(event.layer, version[0]))
    return shown


def _came_key(name: str) -> str:
    return f"from-hub:{name}"


def _covered_key(name: str) -> str:
    return f"consumed:{name}"


def _pushed_key(name: str) -> str:
    """The id of the last event the hub acknowledged to a push of this workspace."""
    return f"pushed-last:{name}"


def _redactions_key(name: str) -> str:
    """The cursor of GET /v1/redactions (`_redactions_apart`)."""
    return f"redactions:{name}"


def _pulled_key(name: str) -> str:
    """'POSITION ID' of the last event this workspace pulled from the hub."""
    return f"pulled-last:{name}"


def uncovered(memory, name: str, contract: Contract, previous: Contract | None = None) -> list[str]:
    """The layers this agent consumes under `contract` whose past its pull cursor from remote `name` has skipped:
    the hub sends a consumer only the events of the layers it consumes, so when the cursor passed their events it
    did not consume them (the layers the cursor covers are kept beside it; a workspace that has not kept them yet
    takes those `previous`, its copy of the contract before this one, gave it). None without a cursor: a first
    pull brings every layer's past."""
    if not memory.log.state(f"pull:{name}"):
        return []
    agent, stored = memory.config.agent, memory.log.state(_covered_key(name))
    covered = set(json.loads(stored) if stored else consumed_layers(previous or Contract(), agent))
    covered |= memory.not_taken().keys()  # a hub layer a local one shadows is never taken (sync.intake)
    return [layer for layer in consumed_layers(contract, agent) if layer not in covered]


CAME_FROM_ANY = "from-any-hub"
"""The state row holding the runs of seqs of this agent's own events that any pull brought, kept for good."""


class CameFromHub:
    """The seqs (runs of them, after the push cursor) of this agent's own events that a pull from the
    remote brought: the hub has them, so they are never pushed to it nor held back from it. They are
    this agent's when a second workspace syncs as the same agent (its log gets the first one's events
    by pulling them); the log itself does not say where an event came from, so the pull that appends
    them records their seqs in the same transaction (`mark`), and each push forgets the runs its
    cursor has passed (`prune`).

    What a pull from any remote brought is in it too (CAME_FROM_ANY, never forgotten): a push sends only what this
    workspace wrote, to every remote. A hub could hand over events in the agent's own name (it forged them, or
    another workspace of the agent wrote them), and `mem push` to another remote sent them on under the agent's
    token (nc19a)."""

    def __init__(self, memory, name: str):
        self.runs: list[list[int]] = json.loads(memory.log.state(_came_key(name)) or "[]")
        self.from_any = self.merged(self.runs + json.loads(memory.log.state(CAME_FROM_ANY) or "[]"), ())
        self.starts = [lo for lo, _hi in self.from_any]

    def __contains__(self, seq: int) -> bool:
        at = bisect.bisect_right(self.starts, seq) - 1
        return at >= 0 and seq <= self.from_any[at][1]

    @staticmethod
    def merged(runs, seqs) -> list[list[int]]:
        merged: list[list[int]] = []
        for lo, hi in sorted([*map(tuple, runs), *((seq, seq) for seq in seqs)]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return merged

    @classmethod
    def mark(cls, memory, name: str, seqs: list[int], back: list[int] = ()) -> dict[str, str]:
        """The state rows recording `seqs` too (read under the log's write lock, in the append's transaction), and
        `back`, this workspace's own events the pull brought back: this remote's hub has them (nc35a: after `mem
        remote add` again, its cursor at 0, they counted as never sent, and a redaction of one as a withdrawal),
        but another remote's may not, so they are not marked as from any."""
        from_any = {CAME_FROM_ANY: json.dumps(cls.merged(json.loads(memory.log.state(CAME_FROM_ANY) or "[]"), seqs))}
        floor = int(memory.log.state(f"push:{name}") or 0)
        seqs = [seq for seq in [*seqs, *back] if seq > floor]
        if not seqs:
            return from_any
        return {**from_any, _came_key(name): json.dumps(cls.merged(cls(memory, name).runs, seqs))}

    @classmethod
    def prune(cls, memory, name: str, cursor: int) -> dict[str, str]:
        runs = [[max(lo, cursor + 1), hi] for lo, hi in cls(memory, name).runs if hi > cursor]
        return {_came_key(name): json.dumps(runs)}


def pushable(memory, remote: Remote, contract: Contract, agent: str, event: Event,
             withheld: set[int] = frozenset(), taken: set[int] | None = None, hub_clock: int | None = None) -> bool:
    """Whether the hub's contract takes `event` from this agent (`event_refusal`)."""
    return event_refusal(memory, remote, contract, agent, event, withheld, taken, hub_clock) is None


def event_refusal(memory, remote: Remote, contract: Contract, agent: str, event: Event,
                  withheld: set[int] = frozenset(), taken: set[int] | None = None,
                  hub_clock: int | None = None) -> str | None:
    """`refusal` of one of this agent's events, a redaction naming only its own events that went out to the hub told
    apart (one naming an event the hub never had is refused by it: its target is held back with it). `withheld`:
    seqs a running push found refused that its held-back list may no longer name; `taken`: the seqs taken back
    (`taken_back`; None: as the state rows say). An event that names one of those (a redaction, a reversal, a page
    version's parent) is held back: the hub, which never had it, would refuse the whole push for it (nc30a).
    `hub_clock`: how far the hub's clock is ahead of this machine's, in ms (`made_ahead`)."""
    ahead = made_ahead(event.id, hub_clock)
    if ahead:
        return ahead
    if withdrawn(memory, event):
        return WITHDRAWN
    taken = _taken(memory, remote) if taken is None else taken
    gone = (taken or withheld) and _names_kept(memory, event, taken | withheld)
    if gone and gone not in taken:  # nc35a: sent, it named what the hub does not have, refused whole
        return f"it names seq {gone}, which is held back too: it goes once that one does"
    if gone and type(event.body) is Redaction:
        return (f"it redacts seq {gone} too, which this agent took back before it went out: the hub never had it, "
                "so this redaction stays this copy's (the hub's administrator may `mem hub redact` the others)")
    if gone:
        again = (f"the redact tool with targets [{event.seq}]" if memory.told == "tools" else
                 f"`mem redact {event.seq} --reason \"...\"`")  # nc37a: the sync tool's warning named `mem redact`
        return (f"it names seq {gone}, which this agent took back before it went out: the hub never had it; "
                f"{again} takes this one back too")
    own = False
    if type(event.body) is Redaction:
        went, came = went_out(memory, remote, withheld | taken), CameFromHub(memory, remote.name)
        own = all((target := memory.log.get(id)) is not None and target.agent == agent
                  and (went(target.seq) or target.seq in came) for id in event.body.target_ids)
    return refusal(contract, agent, event.layer, event.original_kind, bool(event.body.allowed_secrets), own)


WITHDRAWN = "this agent withdrew it before it went out (`mem redact`, while it did not produce the layer)"
"""`event_refusal`'s answer for a withdrawal and its targets (Redaction.withdraws): taken back for good, never sent."""


def withdrawn(memory, event: Event) -> bool:
    """Whether `event` is a redaction that withdraws its targets (Redaction.withdraws) or one of those targets."""
    body = event.body
    if type(body) is Redacted:
        by = memory.log.get(body.by)
        body = by.body if by is not None else None
    return type(body) is Redaction and body.withdraws


def made_ahead(id: str, hub_clock: int | None = None) -> str | None:
    """Why the hub would refuse an event id made more than MINTED_AHEAD_MS after its clock (sync.hub.check_minted);
    None when it was not. `hub_clock`: how far the hub's clock is ahead of this machine's (ms), as its last answer
    said (a push asks it first); None when not known: this machine's clock stands for the hub's, which cannot tell a
    clock ahead when the event was made from one behind now. Held back, the event goes once the hub's clock passes
    (the rest of the push goes now: nc30a, a refused batch stopped every push; a clock ahead, nc31a)."""
    made = uuid7_ms(id) if id[14] == "7" else 0
    if made <= now_ms() + (hub_clock or 0) + MINTED_AHEAD_MS:
        return None
    whose = ("the hub's clock (this machine's clock was ahead when it was made)" if hub_clock is not None else
             "this machine's clock (was the clock ahead then, or is it behind now?)")
    return (f"it was made at {format_instant(min(made, MAX_TS))}, more than a day ahead of {whose}: the hub takes it "
            f"once its own clock reads {format_instant(min(made, MAX_TS) - MINTED_AHEAD_MS)}")


def unsent(memory, events: list[Event]) -> set[str]:
    """The ids of the own events among `events` that no remote's hub has had: after its push cursor, or held back or
    taken back by its pushes. A redaction of such events together with others, which are at a hub, could go to no
    hub (the hub refuses a redaction of an event it does not hold): `mem redact` gives them one of their own (nc30a)."""
    remotes = list(load_remotes(memory).values())
    agent, contract = memory.config.agent, memory.views.contract
    shared = set(contract.layers) - memory.local_layers() if contract else set()
    events = [e for e in events if e.layer in shared and e.agent == agent]
    if not remotes or not events:
        return set()
    state = [(went_out(memory, r, _taken(memory, r)), CameFromHub(memory, r.name)) for r in remotes]
    return {e.id for e in events if not any(went(e.seq) or e.seq in came for went, came in state)}


def went_out(memory, remote: Remote, kept: set[int] = frozenset()) -> Callable[[int], bool]:
    """Whether an own event (by its seq) went out to the remote's hub: the push cursor passed it, and neither held it
    back nor passed it as `kept` (taken back, or refused by the push under way)."""
    cursor = int(memory.log.state(f"push:{remote.name}") or 0)
    kept = set(json.loads(memory.log.state(_held_key(remote)) or "[]")) | kept
    return lambda seq: seq <= cursor and seq not in kept


def _names_kept(memory, event: Event, kept: set[int]) -> int | None:
    """The seq of an event held back or taken back (`kept`) that `event` names: as a redaction's target, the entry it
    reverses, or a page version's parent; None when it names none."""
    body = stand_in(event.body) if type(event.body) is Redacted else event.body  # a redacted one names as before
    named = (body.target_ids if type(body) is Redaction else [body.reverses] if getattr(body, "reverses", None)
             else getattr(body, "parents", None) or [])
    for id in named:
        target = memory.log.get(id)
        if target is not None and target.seq in kept:
            return target.seq
    return None


NOT_PRODUCED = "the hub's contract does not list"
"""How `refusal` begins for a layer the agent does not produce (now): what a taken-back redaction answers."""

SECRET_ALLOWED = "secret-allowed"
"""`refusal`'s answer for an event written with --allow-secret in a layer the hub scans (said by `_secret_why`)."""


def refusal(contract: Contract, agent: str, layer: str, kind: str, secret: bool, own: bool = False) -> str | None:
    """Why the hub's contract would refuse for good an event of this agent's (None: it takes it): the agent does not
    produce the layer (but for a redaction naming only its own events, `own`, of a layer it consumes:
    `redacts_own_alone`), the layer's format changed while the event waited, or the layer is scanned for secrets now
    and the event was written with --allow-secret over a finding (`secret`; the hub's own scan refuses it:
    `SECRET_ALLOWED`). Worded to be true whether the contract changed or this agent never had the right (a local
    copy edited)."""
    if layer not in contract.layers:
        return f"the hub's contract has no layer {layer!r}"
    if not produces(contract, agent, layer) and not (own and redacts_own_alone(contract, agent, layer, kind)):
        return f"{NOT_PRODUCED} {agent!r} among the producers of {layer!r}"
    spec = contract.layers[layer]
    if not takes(spec, kind):
        return f"the hub's contract makes {layer!r} a {spec.format} layer now, which takes no {kind}"
    if secret and spec.scan_secrets:
        return SECRET_ALLOWED
    return None


def _secret_why(layer: str, ids: list[str], told: str = "cli") -> str:
    refused = (f"the hub's contract scans {layer!r} for secrets now, and the hub refuses what this agent wrote there "
               "with --allow-secret")
    if told == "tools":  # nc37a: the sync tool's warning named `mem redact`
        return (f"{refused}; the redact tool given them as targets sends them without their text, or the contract "
                f"may set `scan_secrets = false` for {layer!r}")
    shown = " ".join(ids[:3]) + (f" (and {len(ids) - 3} more: `mem log --layer {layer}`)" if len(ids) > 3 else "")
    return (f"{refused}; `mem redact {shown} --reason \"...\"` sends it without its text, or the "
            f"contract may set `scan_secrets = false` for {layer!r}")


def unpushed(memory, remote: Remote) -> int:
    """Own events a push would send now (`outgoing`)."""
    return outgoing(memory, remote)[0]


def _clock_key(remote: Remote | str) -> str:
    """How far the hub's clock was ahead of this machine's (ms) at the last push: what `mem status` goes by."""
    return f"hub-clock:{getattr(remote, 'name', remote)}"


def last_hub_clock(memory, remote: Remote) -> int | None:
    value = memory.log.state(_clock_key(remote))
    return int(value) if value and value.lstrip("-").isdigit() else None


class PushPlan:
    """How a push decides each own event, in log order (`goes`): sent, held back (with why), or taken back for good.
    `mem push` and `mem status` both go by it, so status says what the next push does (nc35a, nc36a, nc37a: status
    judged apart, and said held what a push sends, to push what it holds, waiting what it takes back)."""

    def __init__(self, memory, remote: Remote, contract: Contract, hub_clock: int | None = None):
        self.memory, self.remote, self.contract, self.hub_clock = memory, remote, contract, hub_clock
        self.agent = memory.config.agent
        self.withheld: set[int] = set()  # the seqs refused so far, taken back or not
        self.taken = _taken(memory, remote)  # the seqs taken back, by earlier pushes and by this one
        self.kept: dict[int, tuple[str, str, str]] = {}  # seq -> (layer, why, id) of each held back

    def goes(self, event: Event) -> bool:
        why = event_refusal(self.memory, self.remote, self.contract, self.agent, event, self.withheld, self.taken,
                            self.hub_clock)
        if why is None:
            return True
        self.withheld.add(event.seq)
        if taken_back(self.memory, event, self.withheld):
            self.taken.add(event.seq)
        else:
            self.kept[event.seq] = (event.layer, why, event.id)
        return False

    def split(self, events: list[Event]) -> tuple[list[Event], list[int]]:
        """`events` (in log order) to send, and the seqs of those held back: the ones the contract refuses, and those
        that name one held back or taken back before them (nc35a: a version built on a version withdrawn in the same
        batch was sent, and a reversal of it refused the whole push, at every push); those taken back are neither."""
        sending = [event for event in events if self.goes(event)]
        return sending, [event.seq for event in events if event.seq in self.kept]

    def held(self) -> list[HeldBack]:
        grouped: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for seq, (layer, why, id) in sorted(self.kept.items()):
            grouped.setdefault((layer, why), []).append((seq, id))
        return [HeldBack(layer=layer, count=len(held), seqs=[seq for seq, _id in held],
                         why=_secret_why(layer, [id for _seq, id in held], self.memory.told) if why == SECRET_ALLOWED
                         else why) for (layer, why), held in sorted(grouped.items())]


def push_sources(memory, remote: Remote, contract: Contract, known=None):
    """What a push reads: (the events it held before, to try again; the layers it reads after its cursor; the seqs a
    pull brought; the spans a layer was the agent's own) — `pending` reads the rest."""
    local = memory.local_layers()
    shared = sorted((set(contract.layers) | set(known.layers if known else ())) - local)
    came, once_local = CameFromHub(memory, remote.name), memory.once_local()
    held = [seq for seq in json.loads(memory.log.state(_held_key(remote)) or "[]") if seq not in came]
    retried = [e for e in map(memory.log.get_by_seq, held)  # older versions held local layers' events
               if e.layer not in local and not written_local(once_local, e.layer, e.seq)]
    return retried, shared, came, once_local


def pending(events: list[Event], contract: Contract, agent: str, came, once_local) -> list[Event]:
    """Of own events read after the push cursor, those a push decides on: not those a pull brought, not a redaction of
    a layer the agent left (its own copy's), not one written while the layer was the agent's own."""
    return [e for e in events if e.seq not in came and not (e.kind == "redaction" and left(contract, agent, e.layer))
            and not written_local(once_local, e.layer, e.seq)]


def outgoing(memory, remote: Remote) -> tuple[int, list[HeldBack]]:
    """(how many own events the next push sends, what it holds back), decided as a push decides (PushPlan) on the
    contract last seen, made ahead judged by the hub's clock as the last push found it (nc35a)."""
    contract = memory.views.contract
    if contract is None:
        return 0, []
    plan = PushPlan(memory, remote, contract, last_hub_clock(memory, remote))
    retried, shared, came, once_local = push_sources(memory, remote, contract)
    cursor = int(memory.log.state(f"push:{remote.name}") or 0)
    after = list(memory.log.read(after=cursor, layers=shared, agent=memory.config.agent)) if shared else []
    sending = sum(plan.goes(e) for e in [*retried, *pending(after, contract, memory.config.agent, came, once_local)])
    return sending, plan.held()


def written_local(once_local: dict[str, list[tuple[int, int]]], layer: str, seq: int) -> bool:
    """Whether the event at `seq` in `layer` was written while the layer was this agent's own (Memory.once_local)."""
    spans = once_local.get(layer)
    return spans is not None and any(start < seq < end for start, end in spans)


def take_contract(memory, client: HubClient, tally: "_Tally", fold: bool = True,
                  restart: bool = False) -> ContractResponse:
    """`fetch_contract`, then the past of each layer this agent now consumes that its pull cursor skipped
    (`uncovered`), fetched before the cursor moves on (`_backfill`): so a consumer added to a layer ends up with
    the layer's whole history, as a new workspace would.

    A hub that lost events this workspace pulled from it (`hub_behind`) hands their positions out again: with
    `restart` (a pull that has stored nothing yet) the pull cursor is forgotten, said through the tally, and the
    pull begins from the hub's start (the log keeps each event once, by id); else HubBehind."""
    previous, shadowed = memory.views.contract, memory.not_taken()
    answer, asked = fetch_contract(memory, tally.remote, client, tally.say)
    behind = hub_behind(tally.remote, answer, asked)
    if behind and not restart:
        raise HubBehind(f"{behind}; {PULLING_AGAIN}")
    if behind:
        tally.restart(behind, _pull_again(memory, tally.remote, client))
    _backfill(memory, client, tally, uncovered(memory, tally.name, answer.contract, previous), fold)
    not_taken = memory.not_taken()  # its past is fetched once a local layer no longer shadows it
    for layer in sorted(not_taken.keys() - shadowed.keys()):  # said as the contract changes, not at its first event
        tally.not_taken(not_taken[layer])  # (nc31b)
    covered = json.dumps([layer for layer in consumed_layers(answer.contract, memory.config.agent)
                          if layer not in not_taken])
    if memory.log.state(_covered_key(tally.name)) != covered:
        memory.log.set_state(_covered_key(tally.name), covered)
    return answer


def _backfill(memory, client: HubClient, tally: "_Tally", layers: list[str], fold: bool) -> None:
    """Pulls `layers`' events up to the pull cursor (the hub's `layers` and `until`), checked and appended as
    a pull's are (those the log holds are left out by id), the cursor left where it is. Its last request
    acknowledges them all (the hub records them per layer: `mem hub believed`)."""
    if not layers:
        return
    until, at = memory.log.state(f"pull:{tally.name}"), ""
    while True:
        page = client.pull_page(at, PULL_BATCH, durable=bool(at), layers=layers, until=until)
        tally.store(memory, page, fold=False, backfill=True)
        if not page.events and not page.more and page.cursor == at:
            break
        at = page.cursor
    if fold:
        tally.skipped.update(memory.follow().unwritten)


def _redactions_apart(memory, client: HubClient, tally: "_Tally", fold: bool) -> None:
    """Takes the redactions the hub holds of this agent's events, and of the layers it consumed under an earlier
    contract, in layers it does not consume now, after their cursor (GET /v1/redactions): its pulls bring it those of
    the layers it consumes or produces now, not those of a layer it no longer produces or consumes, nor those its pull
    cursor passed before the hub handed them over. Asked once a pull has caught up: a redaction its pages brought
    already has nothing left to remove (not counted twice, nc20a). Checked as a pull's events are (each must remove a
    body this log holds: sync.intake.apart_refusal), then appended with the cursor moved past them. A hub that predates
    it is not asked again in this pull; one that says the cursor is ahead of it (restored from a backup) is asked
    again from its start."""
    if tally.no_redactions_endpoint:
        return
    key, stored = _redactions_key(tally.name), False
    while True:
        at = memory.log.state(key) or ""
        try:
            page = client.redactions_page(at, PULL_BATCH)
        except HubRefused as exc:
            if exc.status != 409 or not at:
                raise
            memory.log.set_state(key, "")  # a hub restored from a backup: its positions are handed out again
            continue
        if page is None:
            tally.no_redactions_endpoint = True
            return
        stored = tally.store(memory, page, fold=False, apart=True) or stored
        if not page.more or not page.events or page.cursor == at:  # a full page alone has more after it
            break
    if fold and stored:
        tally.skipped.update(memory.follow().unwritten)


def fetch_contract(memory, remote: Remote, client: HubClient, say=None) -> tuple[ContractResponse, Asked]:
    """The hub's contract (kept for rendering) and position, with what it was asked about; refused if the token is
    no longer the agent it was accepted for (a token file swapped behind mindlog's back). A contract that places a
    layer's file where this agent's own file is (Memory.blocked) is taken, and said through `say`."""
    answer, asked = ask_contract(memory, client, remote.name)
    expected = remote.agent or memory.config.agent
    if answer.agent != expected:
        raise InvalidInput(f"remote {remote.name}'s token now belongs to agent {answer.agent!r}, not {expected!r}; "
                           "`mem remote add` it again with the right token")
    take_placed(memory, answer.contract, say)
    return answer, asked


def take_placed(memory, contract: Contract, say=None) -> None:
    """Keeps the hub's `contract` (Memory.set_contract); a layer's file it places where this agent's own file is
    (Memory.blocked), and was not before, is said through `say`, and so is a layer this agent took that the
    contract no longer names (its file goes: a typo in a contract did that without a word)."""
    blocked = memory.blocked() if say else {}
    before = memory.hub_contract() if say else None
    memory.set_contract(contract)
    for path, why in (memory.blocked() if say else {}).items():
        if path not in blocked:
            say(f"warning: {why}")
    agent, local = memory.config.agent, memory.local_layers() if before is not None else set()
    for name in sorted(set(consumed_layers(before, agent)) - set(contract.layers) - local if before else ()):
        path = before.layers[name].path
        file = f"{path}PAGE.md" if path.endswith("/") else path
        say(f"warning: layer {name} left the hub's contract, and its file {path} with it (its past stays in the log: "
            f"`mem history {file}`)")


def check_ingests(memory, outgoing: list[Event], cursor: int, came: "CameFromHub | tuple" = ()) -> None:
    """Refuses, before anything leaves, a push whose ingest would stand beside a held head of its page
    as this workspace knows it (the hub would refuse it: eventstore.governance.ingest_refusal). The
    versions the push adds are this agent's own after the push cursor (but those `came` from the hub),
    and those retried."""
    agent, retried = memory.config.agent, {event.id for event in outgoing}
    for event in outgoing:
        if event.kind != "page.ingest":
            continue
        heads, new = {}, set()
        for id in memory.views.shared_heads(event.layer, event.body.slug):
            head = memory.log.get(id)
            heads[id] = is_held(getattr(head.body, "frontmatter", None))
            if head.agent == agent and ((head.seq > cursor and head.seq not in came) or id in retried):
                new.add(id)
        held = ingest_refusal(event.id, heads, new)
        if held is not None:
            raise Held(f"{held_message(event.layer, event.body.slug, held, INGEST_VERB)}; nothing was pushed "
                       f"(event {event.id} is the version this agent wrote before it saw the hold)")


def releases_ahead(memory, events: list[Event], after: int, came: "CameFromHub") -> list[Event]:
    """This agent's releases, written after seq `after` and not yet pushed, of held versions of the pages
    `events` ingest: a push split in several requests sends them with the ingest, which the hub would
    otherwise refuse as standing beside the hold its release comes later to lift."""
    agent, found = memory.config.agent, {}
    for event in events:
        if event.kind != "page.ingest":
            continue
        rows = memory.views.shared.versions(event.layer, event.body.slug, memory.views.checkpoint())
        docs = {id: doc for id, _agent, _parents, _deleted, doc in rows}
        for id, author, parents, deleted, doc in rows:
            if author != agent or deleted or id in found:
                continue
            for parent in json.loads(parents):
                held = decode_body(docs[parent]) if docs.get(parent) is not None else None
                if held is not None and is_held(held.frontmatter) and releases(decode_body(doc), held):
                    release = memory.log.get(id)
                    if release.seq > after and release.seq not in came:
                        found[id] = release
                    break
    return sorted(found.values(), key=lambda e: e.seq)


def push(memory, remote: Remote, client: HubClient | None = None, progress=None, say=None) -> PushReport:
    """Sends this agent's events after the push cursor. A hub that lost events this workspace pushed to it
    (`hub_lost_pushes`) gets all of them again, said through `say`: it keeps each once, by id."""
    client = client or HubClient.for_remote(remote)
    known = memory.views.contract
    answer, asked = fetch_contract(memory, remote, client, say)
    contract, lost = answer.contract, hub_lost_pushes(remote, answer, asked)
    if lost:
        since = _push_again(memory, remote, client)
        if say:
            say(f"warning: {lost}; sending this agent's events again {since} (those it holds are counted as "
                "already there)")
    agent = memory.config.agent
    key, held_key = f"push:{remote.name}", _held_key(remote)
    cursor = int(memory.log.state(key) or 0)
    retried, shared, came, once_local = push_sources(memory, remote, contract, known)
    hub_clock = answer.now - now_ms() if answer.now else None
    plan = PushPlan(memory, remote, contract, hub_clock)
    taken = plan.taken
    taken_before = len(taken)
    pushed = duplicates = 0

    def goes(event: Event) -> bool:
        """Whether `event` would go, not deciding it (a pre-check, an ingest's release read ahead)."""
        return pushable(memory, remote, contract, agent, event, plan.withheld, taken, hub_clock)

    last = next(iter(memory.log.read_rows(after=cursor, layers=shared, agent=agent, limit=1, newest_first=True)),
                None) if shared else None
    if last is not None:  # up to the last event to send, not the head: rows pulled since are checked once pushed past
        check_chain(memory, cursor, last[0])

    def send(events: list[Event], bodies: list[tuple[list[Event], Outgoing]] | None = None) -> str | None:
        """The id of the batch's last event, acknowledged (None: nothing to send), in one request or more
        (`push_bodies`), in order."""
        nonlocal pushed, duplicates
        if not events:
            return None
        for part, body in bodies or push_bodies(events):
            results = client.push(body).results
            duplicates += sum(r.duplicate for r in results)
            pushed += sum(not r.duplicate for r in results)
            if progress:
                progress(len(part))
        return events[-1].id

    if shared:
        check_ingests(memory, [*(e for e in retried if goes(e)),
                               *(e for e in memory.log.read(after=cursor, layers=shared, agent=agent, kinds=["page.ingest"])
                                 if goes(e) and e.seq not in came
                                 and not written_local(once_local, e.layer, e.seq))],
                      cursor, came)

    sending, held = plan.split(retried)
    acknowledged = send([_outgoing(e) for e in checked(sending)])
    clock = {_clock_key(remote): str(hub_clock)} if hub_clock is not None else {}
    if acknowledged:
        memory.log.append([], state=lambda _seqs: {**_pushed_rows(memory, remote, cursor, held, sorted(taken),
                                                                  acknowledged), **clock})
    else:
        memory.log.append([], state=lambda _seqs: {held_key: json.dumps(held),
                                                   _taken_key(remote): json.dumps(sorted(taken)), **clock})

    def moved(cursor: int, held: list[int], taken_seqs: list[int], acknowledged: str | None) -> None:
        rows = (_pushed_rows(memory, remote, cursor, held, taken_seqs, acknowledged) if acknowledged
                else {key: str(cursor), held_key: json.dumps(held), _taken_key(remote): json.dumps(taken_seqs)})
        memory.log.append([], state=lambda _seqs: {**rows, **CameFromHub.prune(memory, remote.name, cursor)})

    # While the hub checks and commits a batch, this thread reads and encodes the next one, then moves the cursor
    # past the batch the hub has answered (a crash before that resends it). One batch is in flight at a
    # time, so the hub receives them in log order.
    sent_ahead: set[str] = set()
    with ThreadPoolExecutor(1, thread_name_prefix="push") as sender, no_cyclic_gc():
        in_flight = answered = None
        while shared:
            read = list(memory.log.read(after=cursor, layers=shared, agent=agent, limit=BATCH))
            if read:
                sending, kept = plan.split(pending(read, contract, agent, came, once_local))
                outgoing = [e for e in sending if e.id not in sent_ahead]
                if len(read) == BATCH:  # more may follow in another request
                    ahead = [e for e in releases_ahead(memory, outgoing, read[-1].seq, came)
                             if goes(e) and e.id not in sent_ahead]
                    sent_ahead.update(e.id for e in ahead)
                    outgoing += ahead
                outgoing = [_outgoing(e) for e in checked(outgoing)]
                body = push_bodies(outgoing) if outgoing else None
                held += kept
                cursor = read[-1].seq
            if in_flight is not None:
                answered, in_flight = (*in_flight[1:], in_flight[0].result()), None
            if read:
                in_flight = (sender.submit(send, outgoing, body), cursor, list(held), sorted(taken))
            if answered is not None:
                moved(*answered)
                answered = None
            if not read:
                break
    return PushReport(remote=remote.name, pushed=pushed, duplicates=duplicates,
                      held=plan.held(), resent=bool(lost), taken_back=len(taken) - taken_before)


def taken_back(memory, event: Event, withheld: set[int]) -> bool:
    """Whether an own event that the contract refuses was taken back before it went out: its body redacted (a
    producer made a consumer redacts what it wrote but could not push), or a redaction naming only such events
    (`withheld`: the seqs refused so far, in log order). Neither is held back: the hub never had them, and a
    consumer could not send them; the push passes them for good."""
    if type(event.body) is Redacted or withdrawn(memory, event):
        return True
    return type(event.body) is Redaction and all((target := memory.log.get(id)) is not None
                                                 and target.seq in withheld for id in event.body.target_ids)


def _pushed_rows(memory, remote: Remote, cursor: int, held: list[int], taken: list[int],
                 acknowledged: str) -> dict[str, str]:
    """The state rows of a push the hub acknowledged up to `cursor`, its last event `acknowledged`, with the mark a
    restored hub would start again from (sync.marks)."""
    rows = {f"push:{remote.name}": str(cursor), _held_key(remote): json.dumps(held),
            _taken_key(remote): json.dumps(taken), _pushed_key(remote.name): acknowledged}
    key = marks_key("push", remote.name)
    return {**rows, key: encoded(with_mark(load(memory, key), Mark(at=cursor, id=acknowledged, state=rows)))}


def _push_again(memory, remote: Remote, client: HubClient) -> str:
    """The hub lost events this workspace pushed: the push starts again after the newest push it still holds, or from
    the first event when it holds none. Says from where."""
    mark = start_again(memory, client, marks_key("push", remote.name), positioned=False)
    if mark is None:
        for key in (f"push:{remote.name}", _held_key(remote), _pushed_key(remote.name), marks_key("push", remote.name)):
            memory.log.set_state(key, "")  # not what was taken back: no hub ever had it
        return "from the first"
    return f"after seq {mark.at}, the last push it holds"


def pull(memory, remote: Remote, client: HubClient | None = None, follow: bool = False,
         wait: float = FOLLOW_WAIT, progress=None, stop=None, say=None, on_batch=None) -> PullReport:
    """Pulls until caught up; with `follow`, keeps long-polling (`wait` seconds per request) until
    `stop()` is true. A follower outlives the hub: when it is unreachable (or answers 5xx) it says so
    once through `say` and retries with backoff, then says when it is back. `on_batch` hears of every
    batch applied. `progress(advance, total)` counts hub positions: `total` is how far the hub's head
    was ahead of this log when the pull began (it grows if the hub moves on meanwhile)."""
    memory.refuse_unwritable()
    open_before = _open_conflicts(memory)
    client = client or HubClient.for_remote(remote)
    key = f"pull:{remote.name}"
    tally = _Tally(remote, progress, on_batch, say, client)
    tally.open_conflicts = set(open_before)
    delay, down, behind = 0.5, False, True
    while True:
        try:
            if behind:
                answer = take_contract(memory, client, tally, restart=True)
                tally.expect(memory, answer.head or answer.position)
                if down and say:  # said at the first answer, before anything it brings is stored
                    say(f"hub {remote.url} answers again; following" if down == "hub" else
                        "the event log answers again; following")
                down, delay = False, 0.5
                _recorded_so_far(tally, lambda: _pull_until_caught_up(memory, client, tally))
                _redactions_apart(memory, client, tally, fold=True)
            if not follow or (stop is not None and stop()):
                break
            page = client.pull_page(memory.log.state(key) or "", PULL_BATCH, wait)
            tally.store(memory, page)
            if not page.events:  # its wait is over, or a contract change woke it (sync/fanout.py)
                take_contract(memory, client, tally)
                _redactions_apart(memory, client, tally, fold=True)
            behind = page.more
        except (HubUnreachable, HubRefused, StorageFailure, *storage_exceptions()) as exc:
            hub = isinstance(exc, HubUnreachable) or (isinstance(exc, HubRefused) and exc.status >= 500)
            if not follow or not (hub or unavailable(exc)):  # nc35a: a follower on a PostgreSQL log ended while
                if tally.pulled and isinstance(exc, (HubUnreachable, HubRefused)):  # its database restarted
                    exc.args = (f"{exc}; {_stopped_after(tally.pulled)}",)  # what landed is said (nc29b)
                raise
            if not down and say:
                say(f"{exc}; retrying until it answers" if hub else
                    f"{str(exc).removesuffix(TRY_LATER)}; retrying until it does" if isinstance(exc, StorageFailure)
                    else f"the event log does not answer ({' '.join(str(exc).split())}); retrying until it does")
            down, behind = ("hub" if hub else "log"), True
            if stop is not None and stop():
                break
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)
    tally.skipped.update(memory.follow().unwritten)
    return PullReport(remote=remote.name, pulled=tally.pulled, cursor=memory.log.state(key) or "",
                      returned=tally.returned, skipped=sorted(tally.skipped), rejected=tally.rejected,
                      already_held=tally.already_held, restarted=tally.restarted,
                      not_adoptable=memory.not_adoptable(tally.skipped),
                      conflicts=sorted(_open_conflicts(memory) - open_before))


def _recorded_so_far(tally: "_Tally", pulling: Callable[[], None]) -> None:
    """`pulling()`; a storage failure after some pages were recorded (a full disk) says how many events they hold."""
    try:
        pulling()
    except storage_exceptions() as exc:
        if not tally.pulled or unavailable(exc):  # a database down: a follower waits it out (`pull`)
            raise
        raise StorageFailure(f"{storage_failure(exc)}: {_stopped_after(tally.pulled)}") from None


def _stopped_after(pulled: int) -> str:
    return (f"the pull stopped after {pulled} event{'' if pulled == 1 else 's'}, which are recorded (the next pull "
            "goes on from there)")


def _open_conflicts(memory) -> set[str]:
    return {f"{conflict.layer}/{conflict.slug}" for conflict in memory.conflicts()}


class _Tally:
    """Stores pulled pages and counts what they brought: new events apart from this agent's own
    coming back and from other events the log held already, files a hand edit kept from being
    written, and events rejected (told through `say`)."""

    def __init__(self, remote: Remote, progress, on_batch, say=None, client: HubClient | None = None):
        self.remote, self.name, self.progress, self.on_batch, self.say = remote, remote.name, progress, on_batch, say
        self.client = client  # to take the hub's contract again when a page has events this workspace's rejects
        self.pulled = self.returned = self.already_held = 0
        self.skipped: set[str] = set()
        self.rejected: list[Rejected] = []
        self.told: set[str] = set()  # why the hub's layers a local one shadows are not taken, said once each
        self.start = self.reached = self.total = 0
        self.appended: list[tuple[int, int]] = []  # the seqs each page's append added (first, last)
        self.redactions: list[int] = []  # the seqs of the redactions among them
        self.restarted = False
        self.open_conflicts: set[str] = set()  # as of the last batch told to `on_batch` (a follower's)
        self.no_redactions_endpoint = False  # a hub that predates GET /v1/redactions: not asked again
        self.pages: dict = {}  # id -> (layer, slug) of the page versions pulled: sync.intake.page_of

    def not_taken(self, why: str) -> None:
        """Says, once per pull, why a hub layer a local one shadows is not taken."""
        if self.say and why not in self.told:
            self.told.add(why)
            self.say(f"warning: {why} (its events are left out; `mem status` says so)")

    def restart(self, behind: str, since: str) -> None:
        """The hub lost events this workspace pulled (`hub_behind`): the pull begins again `since` (`_pull_again`)."""
        self.restarted = True
        if self.say:
            self.say(f"warning: {behind}; pulling again {since} (what this workspace holds already is kept once)")

    def expect(self, memory, hub_position: int) -> None:
        """Sizes the progress: from the hub position this log has pulled to, up to the hub's head."""
        self.start = self.reached = int(memory.log.state(f"pulled-to:{self.name}") or 0)
        self.total = max(hub_position - self.start, 0)
        if self.progress:
            self.progress(0, self.total)

    def reach(self, head: int) -> None:
        """Sizes the progress up to the hub's head, as a page reports it."""
        if head - self.start > self.total:
            self.total = head - self.start
            if self.progress:
                self.progress(0, self.total)

    def advance(self, position: int) -> None:
        if self.progress and position > self.reached:
            self.total = max(self.total, position - self.start)
            self.progress(position - self.reached, self.total)
            self.reached = position

    def unsent_redactions(self, memory, events: list[Event]) -> list[str]:
        """The ids of this agent's redactions not pushed to this remote yet, when the batch brings redactions:
        the hub will place them after the batch's, so the batch's win a target both redact (as on the hub). One
        the hub sends back (in this batch, or before: `CameFromHub`) has its place there already, though the
        push cursor may not have moved past it (a push stopped between the hub's answer and its commit)."""
        if not any(type(event.body) is Redaction for event in events):
            return []
        cursor = int(memory.log.state(f"push:{self.name}") or 0)
        came, batch = CameFromHub(memory, self.name), {event.id for event in events}
        return [event.id for event in memory.log.read(after=cursor, kinds=["redaction"], agent=memory.config.agent)
                if event.seq not in came and event.id not in batch]

    def store(self, memory, page: PullPage, fold: bool = True, backfill: bool = False, apart: bool = False) -> bool:
        """Checks a page event by event (sync.intake), rejects what fails, and appends the rest in the
        transaction that moves the cursor past all of them (a `backfill`'s page leaves it); with `fold`, the
        views and files follow once caught up. A page with events this workspace's copy of the contract rejects
        is checked again under the hub's contract if that has changed (a layer added, a consumer added), the
        past of the layers it now consumes fetched first: the cursor never moves past an event rejected only
        because that copy was out of date. The events of a hub layer a local layer shadows are left out, said once
        per layer. `apart`: a page of GET /v1/redactions (`_redactions_apart`), its cursor their own. Whether
        the page brought events the log did not hold."""
        not_taken = memory.not_taken()
        events, rejected = accept(page.events, memory.views.contract or Contract(), memory.config.agent, memory.log,
                                  packed=page.packed, not_taken=not_taken, pages=self.pages, apart=apart)
        if rejected and not backfill and not apart and self.client is not None:
            known = memory.views.contract
            if take_contract(memory, self.client, self, fold).contract != known:
                not_taken = memory.not_taken()
                events, rejected = accept(page.events, memory.views.contract or Contract(), memory.config.agent,
                                          memory.log, packed=page.packed, not_taken=not_taken, pages=self.pages)
        shadowed = set(not_taken.values())
        position = max([e.seq for e in events] + [r.position for r in rejected if r.position], default=0)
        state = {f"pulled-at:{self.name}": str(now_ms())}
        marked = None
        if apart:
            state[_redactions_key(self.name)] = page.cursor
        elif not backfill:
            state[f"pull:{self.name}"] = page.cursor
            if page.events:
                state[f"pulled-to:{self.name}"] = str(position)
            if events:
                state[_pulled_key(self.name)] = f"{events[-1].seq} {events[-1].id}"
                marked = Mark(at=events[-1].seq, id=events[-1].id, state={
                    key: state[key] for key in (f"pull:{self.name}", f"pulled-to:{self.name}", _pulled_key(self.name))
                } | {_covered_key(self.name): memory.log.state(_covered_key(self.name)) or ""})
        agent = memory.config.agent
        redacting = any(type(event.body) is Redaction for event in events)

        def rows(seqs: list[int]) -> dict[str, str]:
            # events the log held already keep their seqs: this workspace's own, come back, are no hub's (nc28b)
            own = [seq for seq, event in zip(seqs, events) if event.agent == agent and seq > head]
            back = [seq for seq, event in zip(seqs, events) if event.agent == agent and seq <= head]
            marks = {}
            if marked is not None:
                key = marks_key("pull", self.name)
                marks[key] = encoded(with_mark(load(memory, key), marked))
            if redacting:  # until the files are rewritten without what it removed
                marks[REDACTION_FILES] = pending_since(memory, seqs)
            return {**state, **marks, **(CameFromHub.mark(memory, self.name, own, back) if own or back else {})}

        head = memory.log.head()
        unsent = self.unsent_redactions(memory, events)
        try:
            seqs = memory.log.append(events, state=rows, unsent=unsent)  # intake recomputed every digest already
        except storage_exceptions():
            if events:
                raise
            return False  # a page that brought nothing new: its cursor and time alone are not worth failing (nc18b)
        except IdConflict:
            events, clashing = conflicting(events, memory.log)
            for clash in clashing:
                self.pages.pop(clash.id, None)  # the log holds another event with that id
            rejected += clashing
            seqs = memory.log.append(events, state=rows, unsent=unsent)
        self.rejected += rejected
        for r in rejected if self.say else ():
            if r.reason in shadowed:
                self.not_taken(r.reason)
                continue
            what = f"event {r.id} (hub position {r.position})" if r.position is not None else "an undecodable event"
            self.say(f"warning: rejected {what}: {r.reason}")
        fresh = [seq for seq in seqs if seq > head]  # one transaction's: consecutive
        if fresh:
            self.appended.append((fresh[0], fresh[-1]))
            if redacting:
                self.redactions += [seq for seq, event in zip(seqs, events) if type(event.body) is Redaction]
        held = [event for seq, event in zip(seqs, events) if seq <= head]
        returned = sum(1 for event in held if event.agent == agent)
        self.pulled += len(fresh)
        self.returned += returned
        self.already_held += len(held) - returned
        if not apart:
            self.advance(position)
        if events and not page.more and fold:
            self.skipped.update(memory.follow().unwritten)  # once caught up: a burst renders its files once
        if events and self.on_batch:
            conflicts = []
            if not page.more and fold:  # folded: a follower says a conflict as `mem pull` does (it said none: nc23b)
                now = _open_conflicts(memory)
                conflicts, self.open_conflicts = sorted(now - self.open_conflicts), now
            self.on_batch(PulledBatch(pulled=len(fresh), returned=returned, position=position,
                                      already_held=len(held) - returned, conflicts=conflicts))
        return bool(fresh)


def _pull_until_caught_up(memory, client: HubClient, tally: _Tally) -> None:
    """Pulls pages until one comes back empty: that request acknowledges the last one, and its answer
    waits until the hub has committed that (so does the first request, which may be the last).

    A pull that turns out to be a catch-up (hub positions ahead of this log plus logged events the views have
    not folded yet: `worth_building`) goes on in `_catch_up`: it appends every page first and then builds the
    views once with `mem replay`'s bulk fold. Otherwise
    each request goes out once the page before it is appended (the cursor it carries tells the hub what
    this agent holds), and while the hub answers it this thread folds that page into the views; the
    files are written once, when caught up."""
    with ThreadPoolExecutor(1, thread_name_prefix="pull") as requests, no_cyclic_gc():
        checkpoint = memory.views.checkpoint()
        behind = memory.log.head() - checkpoint
        # The hub's position (the contract's answer) already tells a catch-up: its first page is a catch-up's
        # size, and the views build's process starts while that page is on its way.
        child = spawn_builder() if worth_building(tally.total + behind, checkpoint, BULK_FOLD_THRESHOLD) else None
        try:
            page = requests.submit(client.pull_page, memory.log.state(f"pull:{tally.name}") or "",
                                   PULL_BATCH if child is None else CATCH_UP_BATCH, 0, None, True).result()
            tally.reach(page.head)
            if worth_building(tally.total + memory.log.head() - checkpoint, checkpoint, BULK_FOLD_THRESHOLD):
                child, started = None, child
                return _catch_up(memory, client, tally, page, requests, started)
        finally:
            if child is not None:
                discard(child)
        while True:
            tally.store(memory, page)
            if not page.events and not page.more:
                tally.advance(tally.start + tally.total)
                return
            asked = requests.submit(client.pull_page, page.cursor, PULL_BATCH, 0, None, not page.more)
            if page.more:
                memory.follow(files=False)
            page = asked.result()


def _catch_up(memory, client: HubClient, tally: _Tally, page: PullPage, requests: ThreadPoolExecutor,
              child=None) -> None:
    """A catch-up: while a page is checked and appended, the hub already serves the next one (the request
    says which cursor is durably stored), and `mem replay`'s bulk build of the views follows the log in a
    thread of its own (_ViewsBuilder; in `child` when its process was started ahead). Once caught up, the build
    swaps the views in and writes the files."""
    with _ViewsBuilder(memory, tally, child) as builder, \
            ThreadPoolExecutor(1, thread_name_prefix="append", initializer=yield_cpu) as appender:
        appender.submit(_append_pages, memory, client, tally, page, requests, builder).result()


def _append_pages(memory, client: HubClient, tally: _Tally, page: PullPage, requests: ThreadPoolExecutor,
                  builder: "_ViewsBuilder") -> None:
    held = memory.log.state(f"pull:{tally.name}") or ""
    received = 0
    while True:
        received += len(page.events)
        if page.more:
            asked = requests.submit(client.pull_page, page.cursor, tail_limit(page.head, tally.start + received), 0,
                                    held)
        tally.store(memory, page, fold=False)
        builder.follow(memory.log.head())
        held = page.cursor
        if not page.events and not page.more:
            tally.advance(tally.start + tally.total)
            return
        if not page.more:  # the last page: the next (empty) answer acknowledges it, once stored
            asked = requests.submit(client.pull_page, page.cursor, CATCH_UP_BATCH, 0, None, True)
        page = asked.result()


def tail_limit(head: int, reached: int) -> int:
    """The size of a catch-up's next page, the hub's head `head` and `reached` the positions this agent has come
    past (at least: some may be in layers it does not read): CATCH_UP_BATCH, but the last 20,000 in pages of 10,000,
    5,000 and 5,000. A hub that does not say its head (0) gets CATCH_UP_BATCH.

    The views build folds each page once it is appended, and what it has left to do when the last page is
    appended is the pull's tail: smaller last pages shorten it, the fold's batch and the history writer's after
    it, for a few more requests and commits."""
    left = head - reached
    if not head or left >= 2 * CATCH_UP_BATCH:
        return CATCH_UP_BATCH
    return max(min(left // 2, CATCH_UP_BATCH), CATCH_UP_BATCH // 4)


YIELD_NICE = 10
"""How much lower a catch-up's appending thread runs than the rest of the pull (nice values)."""


def yield_cpu() -> None:
    """Lowers the calling thread's priority by YIELD_NICE (Linux: each thread has a nice value of its own, and the
    threads and processes it starts inherit it, so the views build is started elsewhere).

    A catch-up's appends and its views build (two processes, sync/bulk.py) share the machine's cores, and the
    build can only follow the appends: whatever of it is left when the last page is appended is the pull's
    tail. The appends take what CPU the build leaves, so the build keeps close behind them. Measured on 2
    cores (bench/bench_sync.py's 100,000 events, load 4 from other work): 16,500 events/s at the same
    priority, 28,300 at +5, 39,600 at +10."""
    if sys.platform == "linux":
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + YIELD_NICE, 19))
        except OSError:
            pass


class _Stop(Exception):
    """Tells a views build to give up (the catch-up it followed failed or was interrupted)."""


class _ViewsBuilder:
    """`mem replay` in a thread of its own while a catch-up appends its pages: its bulk fold reads the log
    (through a connection of its own) up to each head `follow` reports; when the catch-up is done it folds
    the rest, swaps the new views in and writes the files. Two threads rather than one step after the
    other, because much of the fold's time and of the append's is spent in SQLite, which lets go of the
    GIL. A kill, or a catch-up that fails, leaves the views as they were: the next pull builds them again.
    The build holds the workspace's lock (as `mem replay` does) until it is done, so the catch-up's own
    thread must not take it meanwhile: it only checks and appends.

    A redaction pulled meanwhile may have reached the log after the build read its target: the views are
    then built once more, from the log as it ends up."""

    def __init__(self, memory, tally: _Tally, child=None):
        self.memory, self.tally, self.child = memory, tally, child
        self.heads: queue.SimpleQueue = queue.SimpleQueue()
        self.start = memory.log.head()
        progress = tally.progress
        if progress:
            progress(0, self.start + tally.total, "views")
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="views")
        try:
            self.built = self.thread.submit(replay, memory, keep_hand_edits=True, heads=self._heads(), child=child,
                                            progress=(lambda n: progress(n, None, "views")) if progress else None,
                                            expected=self.start + tally.total)
        except BaseException:
            self.thread.shutdown()
            self._discard()
            raise

    def _discard(self) -> None:
        """Ends the process started ahead for the build if the build never took it (it failed before)."""
        if self.child is not None and self.child.poll() is None:
            discard(self.child)

    def _redacted(self) -> bool:
        """Whether a redaction reached the log since the build began: among the pages this catch-up appended
        (noted as each was stored), or among whatever else was appended between them or after them (read
        from the log: none, unless another process appended meanwhile)."""
        log, tally, after = self.memory.log, self.tally, self.start
        if any(seq > after for seq in tally.redactions):
            return True
        for first, last in sorted(tally.appended):
            if first - 1 > after and next(log.read_rows(after, first - 1, kinds=["redaction"], limit=1), None):
                return True
            after = max(after, last)
        head = log.head()
        return head > after and next(log.read_rows(after, head, kinds=["redaction"], limit=1), None) is not None

    def _heads(self):
        while (head := self.heads.get()) is not None:
            if head is _Stop:
                raise _Stop
            yield head

    def follow(self, head: int) -> None:
        self.heads.put(head)

    def __enter__(self) -> "_ViewsBuilder":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is not None:
                self.heads.put(_Stop)
                try:
                    self.built.result()
                except Exception:  # _Stop, or a failure of its own: the catch-up's error is the one to tell
                    pass
                return
            self.heads.put(None)
            if self.tally.progress:
                self.tally.progress(0, self.memory.log.head(), "views")
            report = self.built.result()
            if self._redacted():
                report = replay(self.memory, keep_hand_edits=True)
            if report.files is not None:
                self.tally.skipped.update(report.files.unwritten)
                self.memory.redactions_rewritten(report.files.refused)
        finally:
            self.thread.shutdown()
            self._discard()
