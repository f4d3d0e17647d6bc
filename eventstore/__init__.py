"""The event log: event types, encoding, the SQLite log and the write side."""

from .backends import open_log
from .envelope import Event, new_event
from .errors import MemError
from .kinds import KINDS
from .sqlite import SQLiteLog
from .workspace import Workspace

__all__ = ["Event", "KINDS", "MemError", "SQLiteLog", "Workspace", "new_event", "open_log"]
