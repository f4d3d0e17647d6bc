"""Group commit: the hub's writes, one transaction at a time, each carrying everything that arrived
while the previous one was in flight (pushes from many agents, pull records), so one fsync serves a
whole group. Each push is still all or nothing and is answered only once its events are durable.

With `group=False` every push (and every pull record) is a transaction of its own: the
commit-per-request baseline bench/bench_hub_load.py compares against.
"""

import asyncio
from collections import deque

from starlette.concurrency import run_in_threadpool

from eventstore.envelope import Event
from eventstore.ids import now_ms

from .fanout import Fanout
from .storage import HubStorage, PullRecord
from .wire import PushResult

MAX_GROUP_EVENTS = 20_000


class GroupCommitter:
    def __init__(self, storage: HubStorage, fanout: Fanout, group: bool = True):
        self.storage = storage
        self.fanout = fanout
        self.group = group
        self._pushes: deque[tuple[list[Event], asyncio.Future]] = deque()
        self._pulls: deque[PullRecord] = deque()
        self._recorded: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def push(self, events: list[Event]) -> list[PushResult]:
        future = asyncio.get_running_loop().create_future()
        self._pushes.append((events, future))
        self._wake.set()
        return await future

    def record_pull(self, agent: str, cursor: int) -> None:
        """Queued for the next commit, not awaited: a lost record is written again by the agent's next
        pull. A cursor this process recorded last time for the agent is not written twice."""
        if self._recorded.get(agent) == cursor:
            return
        self._recorded[agent] = cursor
        self._pulls.append(PullRecord(agent, cursor, now_ms()))
        self._wake.set()

    def _take(self) -> tuple[list, list[PullRecord]]:
        if not self.group:
            if self._pushes:
                return [self._pushes.popleft()], []
            return [], [self._pulls.popleft()]
        taken, size = [], 0
        while self._pushes and (not taken or size + len(self._pushes[0][0]) <= MAX_GROUP_EVENTS):
            size += len(self._pushes[0][0])
            taken.append(self._pushes.popleft())
        pulls, self._pulls = list(self._pulls), deque()
        return taken, pulls

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pushes or self._pulls:
                taken, pulls = self._take()
                try:
                    done = await run_in_threadpool(self.storage.commit, [events for events, _ in taken], pulls)
                except Exception as exc:  # noqa: BLE001 - every push of the group gets the error
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                if done.layers:
                    self.fanout.advance(done.head, done.layers)
                for (_, future), outcome in zip(taken, done.outcomes):
                    if future.done():
                        continue
                    if isinstance(outcome, Exception):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
