"""Long-polls that cost no thread and no lock: asyncio waiters woken when the hub's head moves.

The hub's own commits (sync/committer.py) and commits seen by the storage's watcher (another hub
process, through LISTEN/NOTIFY or the SQLite watcher) call `advance`; each waiter whose layers the
commit touched wakes once and goes back to its route handler, which reads once.
"""

import asyncio


class Fanout:
    def __init__(self, head: int = 0):
        self.head = head
        self._waiters: list[tuple[int, frozenset[str], asyncio.Future]] = []

    def advance(self, head: int, layers: set[str] | None) -> None:
        """Commits up to `head` are visible; they touched `layers` (None: unknown, wake everyone behind)."""
        self.head = max(self.head, head)
        keep = []
        for after, wanted, future in self._waiters:
            if future.done():
                continue
            if head > after and (layers is None or not wanted.isdisjoint(layers)):
                future.set_result(True)
            else:
                keep.append((after, wanted, future))
        self._waiters = keep

    def advance_threadsafe(self, loop: asyncio.AbstractEventLoop, head: int, layers: set[str] | None) -> None:
        try:
            loop.call_soon_threadsafe(self.advance, head, layers)
        except RuntimeError:  # the loop has closed: the hub is shutting down
            pass

    @property
    def waiting(self) -> int:
        return sum(not future.done() for _, _, future in self._waiters)

    async def wait(self, after: int, layers: list[str], timeout: float) -> bool:
        """Waits until a commit after position `after` touches one of `layers`, at most `timeout` seconds.

        True if one did (or may have: a commit this process has seen but the caller's read had not)."""
        if self.head > after:
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((after, frozenset(layers), future))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
