"""A workspace on disk: the memory files an agent reads, and `.mem/` with the log and the views."""

import fcntl
import json
import os
import shlex
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import msgspec

from .backends import check_location, open_log, shown
from .errors import (Damaged, InvalidInput, NoWorkspace, StorageFailure, is_damaged, storage_exceptions,
                     storage_failure)
from .recorder import Recorder

MEM_DIR = ".mem"
CONFIG_FILE = "config.json"


def log_damaged(location, detail) -> Damaged:
    return Damaged(f"the event log {location} is damaged: {detail}")


def log_cut_short(checkpoint: int, head: int) -> Damaged:
    """Views past the log's head: the log was emptied, replaced or cut short after they folded it."""
    return Damaged(f"the views are at seq {checkpoint}, past the log head {head}: the log is damaged or was cut "
                   "short; run `mem verify`")


def views_not_of_log(seq: int, chain: str) -> Damaged:
    """Views whose anchor (the last event they folded) this log does not hold at its seq."""
    return Damaged(f"the views were built up to seq {seq} on a log whose chain there is {chain[:16]}..., which this "
                   "log does not hold: the log was rewritten or replaced, or the views are another workspace's; run "
                   "`mem verify`")


def views_edited(checkpoint: int, anchor: int) -> Damaged:
    """Views whose checkpoint is behind the last event they folded: changed outside mem (folding again from the
    checkpoint would fold those events twice). The log is not in question: a replay rebuilds them from it."""
    return Damaged(f"the views say they are at seq {checkpoint} but folded up to seq {anchor}: they were changed "
                   "outside mem; `mem replay` rebuilds them from the log")


LOG_AS_IS = ("; `mem replay --log-as-is` rebuilds the views from the log as it is (what it no longer holds leaves the "
             "views and the files, and with it the only evidence that it was there)")
"""What a replay refused over such views says can be done (`Memory.witnesses`)."""


def views_damaged(path, detail) -> Damaged:
    return Damaged(f"the views database {path} is damaged ({detail}): run `mem replay`")


def open_read_only(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to the SQLite file at `path`, or None when there is no such file or SQLite cannot open
    it. A process that has the file open through SQLite asks through SQLite: closing a descriptor of it opened any
    other way drops every POSIX lock the process holds on it (cli/web/app.py, `in_wal_mode`)."""
    if not path.is_file():
        return None
    try:
        return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None


def sqlite_damage(path: Path) -> str | None:
    """What SQLite's quick check finds wrong with the database file at `path` (None: nothing, or no file)."""
    db = open_read_only(path)
    if db is None:
        return None
    try:
        found = [row[0] for row in db.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        return str(exc) if is_damaged(exc) else None
    finally:
        db.close()
    return None if found == ["ok"] else "; ".join(line for row in found for line in row.splitlines())[:200]


def on_read_only_storage(exc: BaseException, location) -> bool:
    """Whether SQLite could not open the file at `location` because its directory is read-only (a read-only
    mount says only SQLITE_CANTOPEN; `readonly.connect` opens such files read-only, so this is what is left
    when even that fails)."""
    if getattr(exc, "sqlite_errorname", None) != "SQLITE_CANTOPEN" or not isinstance(location, Path):
        return False
    directory = location.parent
    try:
        return location.is_file() and (bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
                                       or not os.access(directory, os.W_OK))
    except OSError:
        return False


class WorkspaceConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`.mem/config.json`. `log` is where the event log lives when not in `.mem/log.db` (a
    postgresql:// URL); the views always stay in the workspace."""

    agent: str = "agent"
    synchronous: str = "FULL"
    log: str | None = None


def absolute(path: str | Path) -> Path:
    """`path` made absolute; one with `..` parts resolved as the file system reads it (`link/..` is the parent of
    where the link leads). `Path.absolute` keeps them, and the parents of `ws/../elsewhere` include `ws` (a command
    given `-w ../elsewhere` from inside a workspace wrote there, nc19b); taking them out as text read `link/..` as the
    folder holding the link (nc20b). A path without them is kept as given (a workspace reached through a link is
    named so)."""
    path = Path(path)
    if not path.is_absolute():
        path = current_directory() / path
    return Path(os.path.realpath(path)) if ".." in path.parts else path


CWD_GONE = "the current directory no longer exists: cd to one that does, or give absolute paths (--workspace, --db)"


def current_directory() -> Path:
    """The cwd, or a refusal when it was deleted under the shell (Python's own error is a traceback)."""
    try:
        return Path(os.getcwd())
    except FileNotFoundError:
        raise InvalidInput(CWD_GONE) from None


def cwd_gone() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


class Workspace:
    def __init__(self, root: str | Path):
        self.root = absolute(root)
        self.mem_dir = self.root / MEM_DIR
        self.log_path = self.mem_dir / "log.db"
        self.views_path = self.mem_dir / "views.db"
        self.lock_path = self.mem_dir / "project.lock"

    @contextmanager
    def locked(self):
        """The workspace's projector lock held against other processes (`Memory.lock`, the hub's mirror): one at a
        time appends, folds or writes files. A workspace whose .mem/ cannot be written stops here."""
        try:
            self.mem_dir.mkdir(exist_ok=True)
            handle = open(self.lock_path, "a+")
        except OSError as exc:
            raise storage_failure(exc, f"cannot change the workspace {self.root}") from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @property
    def exists(self) -> bool:
        return (self.mem_dir / CONFIG_FILE).exists()

    def config(self) -> WorkspaceConfig:
        try:
            return msgspec.json.decode((self.mem_dir / CONFIG_FILE).read_bytes(), type=WorkspaceConfig)
        except FileNotFoundError:
            raise NoWorkspace(f"{self.root} is not a mindlog workspace (run `mem init`)") from None
        except msgspec.MsgspecError as exc:
            raise InvalidInput(f"{self.mem_dir / CONFIG_FILE} is damaged: {exc}") from None

    def write_config(self, config: WorkspaceConfig) -> None:
        self.mem_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the log and views: this user's alone
        tmp = self.mem_dir / (CONFIG_FILE + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.touch(mode=0o600)  # a log's URL may hold its password
        tmp.write_text(json.dumps(msgspec.to_builtins(config), indent=2) + "\n")
        os.replace(tmp, self.mem_dir / CONFIG_FILE)

    def open_log(self, config: WorkspaceConfig | None = None) -> Recorder:
        """This workspace's event log, in whichever backend its config names."""
        config = config or self.config()
        location = config.log or self.log_path
        try:
            return open_log(location, synchronous=config.synchronous)
        except storage_exceptions() as exc:
            if is_damaged(exc):
                raise log_damaged(location, exc) from None
            where = f"cannot open the event log {shown(location)}"
            if on_read_only_storage(exc, location):
                raise StorageFailure(f"{where}: the storage is read-only ({exc.sqlite_errorname})") from None
            raise storage_failure(exc, where) from None

    @classmethod
    def init(cls, root: str | Path, agent: str | None = None, log: str | None = None) -> "Workspace":
        """Creates a workspace, or opens an existing one; an existing workspace keeps its agent and its
        log. `log` is a postgresql:// URL (default: `.mem/log.db`)."""
        if log is not None:
            check_location(log)
        ws = cls(root)
        if ws.exists:
            current = ws.config().agent
            if agent is not None and agent != current:
                raise InvalidInput(f"{ws.root} is already the workspace of agent {current!r}; "
                                   f"an agent's log cannot change hands (init a new directory for {agent!r})")
            agent = current
        agent = "agent" if agent is None else agent
        if not agent or any(c in agent for c in "/\\\n\r\t ") or len(agent) > 64:
            raise InvalidInput(f"agent name {agent!r} must be one word of at most 64 characters")
        outer = None if ws.exists else cls.around(ws.root.parent)
        inside = outer and next((d for d in (outer.root / "mind", outer.mem_dir) if ws.root.is_relative_to(d)), None)
        if inside:  # the outer workspace would list its files as untracked pages, and adopt would trip on them
            raise InvalidInput(f"{ws.root} is inside {inside} of the workspace {outer.root}; init it elsewhere")
        for directory in (ws.root, ws.root / "mind"):
            if directory.exists() and not directory.is_dir():
                what = "is" if directory == ws.root else "keeps its pages in"
                raise InvalidInput(f"{directory} is a file; a workspace {what} a directory")
        try:
            ws.root.mkdir(parents=True, exist_ok=True)
            (ws.root / "mind").mkdir(exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot make the workspace {ws.root}: {exc.strerror}") from None
        if not ws.exists:
            ws.write_config(WorkspaceConfig(agent=agent, log=log))
        elif log is not None and ws.config().log != log:
            raise InvalidInput(f"{ws.root} is already a workspace with its log elsewhere; its log stays where it is")
        return ws

    @classmethod
    def around(cls, path: str | Path) -> "Workspace | None":
        """The workspace that `path` is in (or is), if any."""
        path = absolute(path)
        for candidate in (path, *path.parents):
            if (candidate / MEM_DIR / CONFIG_FILE).exists():
                return cls(candidate)
        return None

    @classmethod
    def find(cls, start: str | Path | None = None) -> "Workspace":
        """The workspace at `start` (or MEM_WORKSPACE, or the cwd) or the nearest one above it."""
        given = start or os.environ.get("MEM_WORKSPACE")
        start = absolute(given or current_directory())
        found = cls.around(start)
        if found is not None:
            return found
        if given and start.is_file():  # `mem init` there would refuse it (nc21a)
            raise NoWorkspace(f"{start} is a file; a workspace is a directory (`mem init --workspace DIR`)")
        raise NoWorkspace(f"no mindlog workspace at or above {start}; " + (
            f"`mem init --workspace {shlex.quote(str(start))}` makes one there" if given else "run `mem init` or pass --workspace"))

    def damage(self, exc: BaseException) -> Damaged | None:
        """Which of this workspace's databases a SQLite error that says "damaged" (is_damaged) came from,
        as the error that names it: damage deep in a file shows only when a query reaches it, long after
        the file opened, and SQLite's error does not say which file. Checks the log (when a SQLite file),
        then the views."""
        if not is_damaged(exc):
            return None
        try:
            location = self.config().log
        except Exception:  # noqa: BLE001 - a config that cannot be read names no file
            return None
        if location is None:
            detail = sqlite_damage(self.log_path)
            if detail:
                return log_damaged(self.log_path, detail)
        detail = sqlite_damage(self.views_path)
        return views_damaged(self.views_path, detail) if detail else None
