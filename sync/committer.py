"""Group commit: the hub's writes, one transaction at a time, each carrying everything that arrived
while the previous one was in flight (pushes from many agents, pull records), so one fsync serves a
whole group. Each push is still all or nothing and is answered only once its events are durable.

The commits run in a thread of their own, which starts the next group as soon as a commit returns:
the event loop only queues pushes and, once told a commit is done, answers them and wakes the
long-polls. (Through a worker-thread pool, each commit would wait for a busy loop to hand it over.)

A group gathers: its first push waits, at most GATHER_SECONDS, until pushes from GATHER_SHARE of the
agents that pushed in the last PUSHERS_WINDOW are queued (an agent pushing alone waits for nobody). A
commit costs its thread about as much for one push as for a dozen (the statement, the WAL's write and
fsync, the GIL hand-overs around them), and without the wait a busy hub's groups held what happened
to arrive during the last commit: measured under bench/bench_hub_load.py at 32 agents, about 16 pushes a
group, 24 with it, for at most 2 ms more per push.

Pull records (the cursor each pull acknowledges) are not awaited by the pull: they are committed
PULL_RECORD_DELAY after the first of them, riding on the commit of the group in flight or next when
pushes come (else on their own), so a hub whose consumers are woken by every commit does not spend an
fsync on their acknowledgements. They ride only once due, not with every group: a group of pushes alone
is one INSERT on SQLite, where one with records is a transaction of five statements (BEGIN, the
token-state check, two INSERTs, COMMIT), each a hand-over of the GIL between the commit thread and a
busy event loop; under bench/bench_hub_load.py at 32 agents the consumers' records came with nearly every
group. A pull that
asks for it (`durable`: the last request of a `mem pull` or `mem sync`, which acknowledges all it
brought) is answered once its record is committed, with the next group, so what the hub reports the
agent has received (`mem hub believed`) is up to date when the command returns.

With `group=False` every push (and every pull record) is a transaction of its own: the
commit-per-request baseline bench/bench_hub_load.py compares against.
"""

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

from eventstore.envelope import Event
from eventstore.ids import now_ms
from eventstore.kinds import Redaction

from .fanout import Fanout
from .storage import Committed, HubStorage, PullRecord
from .wire import PushResult

MAX_GROUP_EVENTS = 20_000
GATHER_SECONDS = 0.002
"""How long the first push of a group may wait for the pushes of the other agents pushing lately (see
`GroupCommitter`)."""
GATHER_SHARE = 0.75
PUSHERS_WINDOW = 0.1
"""Seconds over which the agents pushing lately are counted."""
PULL_RECORD_DELAY = 0.5
IDLE_CHECK = 1.0
"""Seconds between the idle commit thread's checks that its event loop is still open."""


class GroupCommitter:
    """Made inside the event loop that serves the hub; `push` and `record_pull` are called from it."""

    def __init__(self, storage: HubStorage, fanout: Fanout, group: bool = True,
                 on_redaction: Callable[[], None] | None = None):
        """`on_redaction`: called on the event loop after a commit that carried a redaction."""
        self.storage = storage
        self.fanout = fanout
        self.group = group
        self.on_redaction = on_redaction
        self._loop = asyncio.get_running_loop()
        self._pending = threading.Condition()
        self._pushes: deque[tuple[list[Event], asyncio.Future, int | None]] = deque()
        self._pulls: deque[tuple[PullRecord, asyncio.Future | None]] = deque()
        self._pulls_due: float | None = None  # monotonic time the queued pull records must be committed by
        self._recorded: dict[str, int] = {}
        self._committed: dict[str, int] = {}
        self._pushers: set[str] = set()  # agents that pushed since `_window_at`
        self._window_at = time.monotonic()
        self._gather = 1  # pushes a group waits for (at most GATHER_SECONDS): a share of the agents pushing lately
        self._first_at = 0.0  # monotonic time the oldest queued push came
        self._thread = threading.Thread(target=self._run, daemon=True, name="hub-commit")
        self._thread.start()

    def submit(self, events: list[Event], checked: int | None = None,
               then: Callable[[list[PushResult] | Exception], None] | None = None) -> asyncio.Future | None:
        """Queues a push for the next group: the future is its results once they are durable (or its refusal).
        `checked`: the epoch of the cached token state it was checked with (HubStorage.push_state), if any.
        With `then`, no future: `then(results or refusal)` is called on the event loop once the commit is done."""
        future = self._loop.create_future() if then is None else None
        now = time.monotonic()
        if now - self._window_at > PUSHERS_WINDOW:
            self._gather = max(1, int(len(self._pushers) * GATHER_SHARE))
            self._pushers, self._window_at = set(), now
        if events:
            self._pushers.add(events[0].agent)
        with self._pending:
            pushes = self._pushes
            pushes.append((events, then or future, checked))
            if len(pushes) == 1:
                self._first_at = now
                self._pending.notify()
            elif len(pushes) == self._gather:
                self._pending.notify()
        return future

    async def push(self, events: list[Event], checked: int | None = None) -> list[PushResult]:
        return await self.submit(events, checked)

    def record_pull(self, agent: str, cursor: int, durable: bool = False) -> asyncio.Future | None:
        """Queued for a later commit: a lost record is written again by the agent's next pull. A cursor
        this process recorded last time for the agent is not written twice. With `durable`, the record
        goes with the next group, and the future returned is done once it is committed (None: it is)."""
        if durable:
            if self._committed.get(agent, -1) >= cursor:
                return None
        elif self._recorded.get(agent) == cursor:
            return None
        self._recorded[agent] = cursor
        future = self._loop.create_future() if durable else None
        with self._pending:
            self._pulls.append((PullRecord(agent, cursor, now_ms()), future))
            if not self.group:
                self._pending.notify()
            elif durable or self._pulls_due is None:
                due = time.monotonic() + (0 if durable else PULL_RECORD_DELAY)
                self._pulls_due = due if self._pulls_due is None else min(due, self._pulls_due)
                if durable or not self._pushes:  # else the thread looks at the due time before it next waits
                    self._pending.notify()
        return future

    def _wait(self) -> float | None:
        """Seconds until something is due (0: now); None when nothing is queued."""
        if not self.group:
            return 0.0 if self._pushes or self._pulls else None
        due = None
        if self._pushes:
            if len(self._pushes) >= self._gather:
                return 0.0
            due = self._first_at + GATHER_SECONDS
        if self._pulls_due is not None:
            due = self._pulls_due if due is None else min(due, self._pulls_due)
        return None if due is None else max(0.0, due - time.monotonic())

    def _take(self) -> tuple[list, list[tuple[PullRecord, asyncio.Future | None]]]:
        if not self.group:
            if self._pushes:
                return [self._pushes.popleft()], []
            return [], [self._pulls.popleft()]
        taken, size = [], 0
        while self._pushes and (not taken or size + len(self._pushes[0][0]) <= MAX_GROUP_EVENTS):
            size += len(self._pushes[0][0])
            taken.append(self._pushes.popleft())
        now = time.monotonic()
        pulls = []
        if self._pulls_due is not None and self._pulls_due <= now:  # the records ride only once due
            pulls, self._pulls, self._pulls_due = list(self._pulls), deque(), None
        self._first_at = now  # for what is left, if anything
        return taken, pulls

    def _run(self) -> None:
        while not self._loop.is_closed():
            with self._pending:
                wait = self._wait()
                if wait != 0.0:
                    self._pending.wait(IDLE_CHECK if wait is None else min(wait, IDLE_CHECK))
                    continue
                taken, pulls = self._take()
            try:
                outcome = self.storage.commit([events for events, _, _ in taken], [record for record, _ in pulls],
                                              [checked for _, _, checked in taken])
            except Exception as exc:  # noqa: BLE001 - every push of the group gets the error
                outcome = exc
            try:
                self._loop.call_soon_threadsafe(self._settle, taken, outcome, pulls)
            except RuntimeError:  # the loop has closed: the hub is shutting down
                return

    def _settle(self, taken: list, outcome: Committed | Exception, pulls: list = ()) -> None:
        """On the event loop: wakes the long-polls the commit concerns, then answers its pushes and the
        pulls that waited for their records."""
        for record, future in pulls:
            if not isinstance(outcome, Exception):
                self._committed[record.agent] = max(record.cursor, self._committed.get(record.agent, 0))
            if future is not None and not future.done():
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(None)
        if isinstance(outcome, Exception):
            outcomes = [outcome] * len(taken)
        else:
            if outcome.layers:
                self.fanout.advance(outcome.head, outcome.layers)
            if self.on_redaction is not None and _redacts(taken):
                self.on_redaction()
            outcomes = outcome.outcomes
        for (_, future, _), result in zip(taken, outcomes):
            if not isinstance(future, asyncio.Future):  # a callback (`submit`'s `then`)
                try:
                    future(result)
                except Exception as exc:  # noqa: BLE001 - the other pushes of the group are answered all the same
                    self._loop.call_exception_handler({"message": "answering a push failed", "exception": exc})
            elif future.done():
                continue
            elif isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)


def _redacts(taken: list) -> bool:
    """Whether a group's pushes carry a redaction."""
    for events, _future, _checked in taken:
        for event in events:
            if type(event.body) is Redaction:
                return True
    return False
