"""The one interface every event-log backend implements (SQLite here; the hub has its own storage)."""

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import msgspec

from .envelope import Event


class VerifyReport(msgspec.Struct):
    ok: bool
    checked: int
    head: int
    first_bad_seq: int | None = None
    problem: str | None = None


class Recorder(ABC):
    """An append-only, gapless, commit-ordered event log.

    `append` is atomic for the whole batch and idempotent per event id: an id already present
    with the same digest returns its existing seq, with another digest the batch is refused.
    """

    @abstractmethod
    def append(self, events: Sequence[Event]) -> list[int]: ...

    @abstractmethod
    def read(self, after: int = 0, upto: int | None = None, *, kinds: Sequence[str] | None = None,
             layers: Sequence[str] | None = None, agent: str | None = None, since_ms: int | None = None,
             limit: int | None = None, newest_first: bool = False) -> Iterator[Event]: ...

    @abstractmethod
    def get(self, id: str) -> Event | None: ...

    @abstractmethod
    def head(self) -> int: ...

    @abstractmethod
    def seq_at(self, recorded_at_ms: int) -> int:
        """The last seq recorded at or before this time (0 when none)."""

    @abstractmethod
    def verify(self) -> VerifyReport: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
