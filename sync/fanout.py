"""Long-polls that cost no thread and no lock: asyncio waiters woken when the hub's head moves.

The hub's own commits (sync/committer.py) and commits seen by the storage's watcher (another hub
process, through LISTEN/NOTIFY or the SQLite watcher) call `advance`; each waiter whose layers the
commit touched wakes once and goes back to its route handler, which reads once.

Wake-ups are paced by what they cost: a wake-up that woke n long-polls costs the hub n pull requests
(each consumer's answer, then its next long-poll), so the next one comes no sooner than n *
WAKE_COST_SECONDS after it, together with every commit made meanwhile (at most MAX_WAKE_INTERVAL).
A hub whose commits are rarer than that wakes its long-polls the moment each lands; a busy one spends
a bounded share of its one core on wake-ups, about (the CPU of a pull request) / WAKE_COST_SECONDS,
whatever its commit rate. Without the pacing, a hub committing small groups fast spent most of its
core answering consumers, one pull per consumer per commit (bench/bench_hub_load.py at 32 agents:
about two pull requests per push); the price is a delay of at most n * WAKE_COST_SECONDS before a
waiter wakes (64 ms for 32 consumers of a layer, 100 ms at most).

The setting, measured with bench/bench_hub_load.py at 32 agents on SQLite FULL (group commit on and
off run the same fan-out): at 0.5 ms per woken long-poll the consumers still made 0.6-1.0 pull
requests per push with group commit on, about 100 µs of the hub's core each, and the hub's CPU per
push was 0.27-0.35 ms; at 2 ms they make 0.1-0.2 and the hub spends 0.18-0.21 ms, so group commit
reached 4,600-5,900 events/s where it had reached 2,000-4,300 (nearly quiet machine, load average
about 1), for a p99 fan-out of 90-95 ms instead of 25-75 (the target is 200; 90-400 ms at load 5-6).
A contract change wakes every long-poll, whatever its layers: the layers its consumer reads may have changed, and
the consumer learns of it at once (sync/client.py takes the new contract after an answer with no events).
A pull answers as before when it finds events already told: only a long-poll that found nothing new,
or only commits not yet told, waits.
"""

import asyncio
import math
import time

from eventstore.layers import CONTRACT_LAYER

WAKE_COST_SECONDS = 0.002
"""The pause before the next wake-up, per long-poll the last one woke (see the module's docstring)."""
MAX_WAKE_INTERVAL = 0.1
PRUNE_FLOOR = 64
"""Waiters held before the first prune of those that stopped waiting (`Fanout._prune`)."""
END_SLOT = 0.05
"""Long-polls given a wait (`listen`) end together, at the end of the END_SLOT-second slot their wait ends in:
one timer per slot rather than one made and cancelled per long-poll (a busy hub's long-polls are mostly
woken long before their wait is over). So a wait ends at most END_SLOT late; a client's read timeout
covers a wait with seconds to spare (sync/client.py)."""


class Fanout:
    def __init__(self, head: int = 0, cost: float = WAKE_COST_SECONDS):
        self.head = head  # what the waiters have been told of: a poll behind it returns at once
        self.cost = cost
        self._waiters: list[tuple[int, frozenset[str], asyncio.Future]] = []
        self._pending: tuple[int, set[str] | None] | None = None  # commits seen, not yet told
        self._timer: asyncio.TimerHandle | None = None
        self._next_wake = float("-inf")  # monotonic time the next wake-up may come
        self.released = False  # the server is stopping: no long-poll waits any more (`release`)
        self._prune_at = PRUNE_FLOOR  # waiters held when `listen` next drops those that stopped waiting
        self._ends: dict[int, list[asyncio.Future]] = {}  # END_SLOT slot -> the futures whose wait ends with it

    def advance(self, head: int, layers: set[str] | None) -> None:
        """Commits up to `head` are visible; they touched `layers` (None: unknown, wake everyone behind)."""
        if self._pending is not None:
            known, touched = self._pending
            head = max(head, known)
            layers = None if layers is None or touched is None else touched | layers
        now = time.monotonic()
        due = self._next_wake
        if now >= due:
            self._wake(head, layers, now)
            return
        self._pending = (head, layers)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(due - now, self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self._pending is not None:
            head, layers = self._pending
            self._wake(head, layers, time.monotonic())

    def _wake(self, head: int, layers: set[str] | None, now: float) -> None:
        self._pending = None
        if self._timer is not None:  # a late timer: this wake-up tells what it was for
            self._timer.cancel()
            self._timer = None
        self.head = max(self.head, head)
        keep, woken = [], 0
        for after, wanted, future in self._waiters:
            if future.done():
                continue
            if head > after and (layers is None or CONTRACT_LAYER in layers or not wanted.isdisjoint(layers)):
                future.set_result(True)
                woken += 1
            else:
                keep.append((after, wanted, future))
        self._waiters = keep
        self._prune_at = max(PRUNE_FLOOR, 2 * len(keep))
        self._next_wake = now + min(MAX_WAKE_INTERVAL, woken * self.cost)

    def advance_threadsafe(self, loop: asyncio.AbstractEventLoop, head: int, layers: set[str] | None) -> None:
        try:
            loop.call_soon_threadsafe(self.advance, head, layers)
        except RuntimeError:  # the loop has closed: the hub is shutting down
            pass

    def deferred(self, after: int, layers: list[str]) -> bool:
        """True while a wake-up is due that will tell waiters on `layers` of commits after `after` they
        have not been told of: a long-poll that found only those may wait for it (at most the pause)
        and share the answer of the long-polls it wakes, rather than make a pull request of its own
        for each commit."""
        if self._pending is None or not self.head <= after < self._pending[0]:
            return False
        touched = self._pending[1]
        return touched is None or not touched.isdisjoint(layers)

    @property
    def waiting(self) -> int:
        return sum(not future.done() for _, _, future in self._waiters)

    def listen(self, after: int, layers: list[str], wait: float | None = None) -> asyncio.Future | None:
        """What `wait` waits on: a future done (True) when a commit after position `after` touches one of
        `layers`; None when one has been told already (or the server is stopping). Its waiter cancels it when
        it stops waiting; with `wait`, so does the fan-out once `wait` seconds are over (at most END_SLOT later)."""
        if self.head > after or self.released:
            return None
        if len(self._waiters) >= self._prune_at:
            self._prune()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiters.append((after, frozenset(layers), future))
        if wait is not None:
            slot = math.ceil((loop.time() + wait) / END_SLOT)
            ending = self._ends.get(slot)
            if ending is None:
                ending = self._ends[slot] = []
                loop.call_at(slot * END_SLOT, self._end, slot)
            ending.append(future)
        return future

    def _end(self, slot: int) -> None:
        """The waits that end with this slot are over: their futures are cancelled."""
        for future in self._ends.pop(slot):
            if not future.done():
                future.cancel()

    def _prune(self) -> None:
        """Drops the waiters that stopped waiting (their client left, their time ran out) before any commit
        woke them: on a hub without commits, long-polls that come and go would otherwise pile up until one.
        The next prune comes when the list has doubled: each waiter is looked at a bounded number of times."""
        self._waiters = [waiter for waiter in self._waiters if not waiter[2].done()]
        self._prune_at = max(PRUNE_FLOOR, 2 * len(self._waiters))

    def release(self) -> None:
        """The server begins to stop: every long-poll ends now as if its time were up (done, False), and one
        asked from now on does not wait, so each is answered with the page as it stands instead of being cut
        off with a 500 when the shutdown's grace runs out (a follower then asks again and finds the hub gone)."""
        self.released = True
        for _after, _wanted, future in self._waiters:
            if not future.done():
                future.set_result(False)
        self._waiters = []

    async def wait(self, after: int, layers: list[str], timeout: float) -> bool:
        """Waits until a commit after position `after` touches one of `layers`, at most `timeout` seconds.

        True if one did (or may have: a commit this process has seen but the caller's read had not)."""
        future = self.listen(after, layers)
        if future is None:
            return True
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
