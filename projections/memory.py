"""An agent's memory: the write side, the log and the projections wired together.

This is the library the CLI is a thin layer over: every write validates, appends one event, brings
the views and the files up to date and returns the event (its seq set); every read returns what the
CLI prints, so no command reaches into the log or the views itself.
"""

import os
import shlex
import posixpath
import shutil
import sqlite3
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import msgspec

from eventstore.envelope import Event
from eventstore.ids import is_uuid, now_ms, seq_number
from eventstore import secrets, validate
from eventstore.errors import (Damaged, HandEdited, InvalidInput, MemError, NotFound, Stale, StorageFailure, UnsafePath,
                               for_each, is_damaged, storage_exceptions, storage_failure)
from eventstore.instants import format_local, past_instant
from eventstore.readonly import full_disk, read_only
from eventstore.kinds import CONFIG_KEY_PREFIXES, KINDS, AlwaysAdd, AlwaysRemove, ContractChange, Redacted
from eventstore.layers import (AGENT, MIND, PRIVATE_LAYERS, check_agent_name, consumes, lenient_contract,
                               produces)
from eventstore.recorder import VerifyReport
from eventstore.backends import shown
from eventstore.workspace import Workspace, absolute, log_cut_short, views_damaged, views_edited, views_not_of_log
from eventstore.writer import AdfWriter, SharedWriter, Writer, file_path

from . import adf, audit, local_layers, redact, trust
from .activity import Activity
from .bulk import worth_building
from .fold import catch_up
from .materialize import (FileReport, InTheWay, file_hash, hand_edited, materialize, record_adopted, refuse_in_the_way,
                          remove_stale_temp_files, write_atomic, written_hash)
from .render import CATALOG_EDIT, always_lines
from .replay import remove_leftovers, replay
from .shared import SharedPage
from .views import KEPT_ASIDE, LOG_PATH, MIND_PATH, Views, page_path, placement, slug_of


CONTRACT_STATE = "hub-contract"
"""The log's state key holding the hub's contract as last taken (`.mem/contract.json`'s bytes): a workspace made again
on the log takes it (`Memory._keep_contract_of_log`)."""


def below_zero(name: str, value: int) -> InvalidInput:
    """A count below zero, refused naming the CLI's flag (`-n`, `--last`) or the MCP tools' parameter."""
    return InvalidInput(f"{'-' if len(name) == 1 else '--'}{name} must be 0 or more, not {value}",
                        for_tools=f"{name} must be 0 or more, not {value}")


class CatalogPage(msgspec.Struct):
    slug: str
    title: str
    hook: str


CLOCK_SLACK_MS = 60_000
"""How far the log's last recorded time may be ahead of the clock before a command says so (Memory.clock_behind)."""
REDACTION_FILES = "redaction-files"
"""The log state key set in the transaction of a redaction, cleared once the files are rewritten without what it
removed (Memory.redaction_cut_off)."""
REDACTED_UNDER = "redacted-under:"
"""The log state key (then a path) of a hand edit made on text a redaction removed: Memory.redacted_under."""


class Unchanged(msgspec.Struct):
    """A write that would record what its file holds already: nothing is recorded. `version`: the current version."""

    version: Event
    path: str


class Compaction(msgspec.Struct):
    """A compaction or clear: its event, and the audit row that archived what it removed (None when
    loop audit is off or nothing was removed)."""

    event: Event
    archived: audit.AuditRow | None = None


def _file_identity(path) -> tuple[int, int] | None:
    """(device, inode) of a file, None when there is none: a file renamed into place has another."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


class Checkout(msgspec.Struct):
    """What `Memory.checkout` wrote (the files of the moment) and what it left: files already in the directory that
    the moment does not hold."""

    written: list[str]
    left: list[str]
    more_left: bool = False  # the directory held more than LEFT_LOOKED_AT files: `left` is of those looked at


LEFT_LOOKED_AT = 10_000
"""The most files a checkout looks at of those already in its directory (`Checkout.left`): a directory given by
mistake (a disk's root holds a million) is not walked whole."""


def _files_under(root: Path, most: int = LEFT_LOOKED_AT) -> tuple[list[str], bool]:
    """The files below `root` (links not followed), as paths relative to it: at most `most` of them, and whether
    there were more."""
    found = []
    for folder, folders, files in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, name), root) for name in files]
        found += [os.path.relpath(os.path.join(folder, name), root) for name in folders
                  if os.path.islink(os.path.join(folder, name))]
        if len(found) > most:
            return found[:most], True
    return found, False


def _not_for_a_checkout(target: Path, workspace: Path) -> str | None:
    """Why `target` (resolved) is no directory a checkout writes into, even with --force, or None."""
    if target == Path(target.anchor):
        return "the file system's root"
    if target == Path.home().resolve():
        return "your home directory"
    if workspace.resolve().is_relative_to(target):
        return f"a directory holding the workspace {workspace}"
    return None


class Moment(msgspec.Struct):
    """A moment someone typed, as understood: the instant (ms) and the seq in force then."""

    at_ms: int
    seq: int

    def __str__(self) -> str:
        return f"as of {format_local(self.at_ms)} (seq {self.seq})"


FOLDER_GONE = "its folder"
"""How the hint for a file not written into a page folder moved aside begins (Memory.not_adoptable)."""


class Memory:
    called = "this workspace"
    """What a refusal of a moment before the first event calls this memory (the hub's pages: "this hub")."""

    def __init__(self, workspace: Workspace, *, rebuild_damaged: bool = False):
        """`rebuild_damaged` (a replay): a damaged views database is moved aside to `views.db.damaged`
        and an empty one takes its place, to be rebuilt from the log; otherwise a damaged one is refused."""
        self.ws = workspace
        self.config = workspace.config()
        self.log = workspace.open_log(self.config)
        try:
            self.views = self._open_views(rebuild_damaged)
            self._set_up()
        except BaseException:
            if hasattr(self, "views"):
                self.views.close()
            self.log.close()
            raise

    def _set_up(self) -> None:
        self._views_file = _file_identity(self.ws.views_path)
        self.writer = Writer(self.config.agent, self.views)
        self.adf_writer = AdfWriter(self.config.agent, self.views)
        self.shared_writer = SharedWriter(self.config.agent, self.views)
        self.last_report = FileReport()
        # Set when an append committed but the views or files could not follow (a full disk): the
        # event stands, and the next command catches up. The CLI prints it as a warning.
        self.behind: str | None = None
        self._thread_lock = threading.RLock()
        self._lock_depth = 0
        self._swept = False  # the leftovers of killed processes removed since this process took the lock
        # A long-running caller (the MCP server) answers once the event is in the log and the views, and
        # writes the files after: appends then leave them dirty for its own `refresh()`.
        self.defer_files = False
        self.told = "cli"  # whose words messages made here name the way forward in: "cli", or "tools" (MCP)
        self._seen = self._stamp()
        if self.views.started_over:  # views of an older version: folded again before anything reads them
            self.refresh()

    def _stamp(self) -> tuple:
        """The log's head and the kept hub contract's file (its size and time), as this process last caught up."""
        try:
            found = self.contract_path.stat()
            contract = (found.st_size, found.st_mtime_ns)
        except FileNotFoundError:
            contract = None
        return self.log.head(), contract

    def moved_elsewhere(self) -> bool:
        """Whether another process (the CLI, a pull) appended to the log or took a new hub contract since this one
        last caught up (`refresh`): what a long-running caller (the MCP server, the web view) checks before it reads.
        The views' checkpoint is no witness: the other process folds its events into the same views, so they are at
        the head while this process's copy of the contract, which places the layers' files, is not (nc34b)."""
        return self._stamp() != self._seen

    def _open_views(self, rebuild_damaged: bool) -> Views:
        path = self.ws.views_path
        try:
            return Views(path, contract=self.hub_contract(), agent=self.config.agent)
        except sqlite3.DatabaseError as exc:
            if not is_damaged(exc):
                raise
            if not rebuild_damaged:
                raise views_damaged(path, exc) from None
        except Damaged:  # their checkpoint or anchor changed outside mem (Views.checkpoint)
            if not rebuild_damaged:
                raise
        for part in ("", "-wal", "-shm"):
            if Path(f"{path}{part}").exists():
                os.replace(f"{path}{part}", f"{path}.damaged{part}")
        return Views(path, contract=self.hub_contract(), agent=self.config.agent)

    @classmethod
    def open(cls, root: str | Path | None = None, *, rebuild_damaged: bool = False) -> "Memory":
        return cls(Workspace.find(root), rebuild_damaged=rebuild_damaged)

    @classmethod
    def init(cls, root: str | Path, agent: str | None = None, log: str | None = None) -> "Memory":
        """A new workspace (its log in `log`, a postgresql:// URL, or by default in `.mem/log.db`). When
        making it fails (PostgreSQL unreachable), what it had made is removed: no half-made workspace."""
        made = [p for p in (absolute(root), absolute(root) / "mind") if not p.exists()]
        mem_dir = Workspace(root).mem_dir
        new = not mem_dir.exists()
        if new and agent is not None:
            check_agent_name(agent)  # an agent's workspace: a name a contract can name (the hub's mirror is `_hub`)
        try:
            memory = cls(Workspace.init(root, agent, log))
            if new and log is not None:
                memory._refuse_a_log_of_another_agent()
                memory._keep_contract_of_log()
        except BaseException:
            if new:
                shutil.rmtree(mem_dir, ignore_errors=True)
                for path in reversed(made):
                    if path.is_dir() and not any(path.iterdir()):
                        path.rmdir()
            raise
        memory.refresh()
        return memory

    def _refuse_a_log_of_another_agent(self) -> None:
        """A new workspace on an existing PostgreSQL log may take up its own agent's log (a lost workspace
        rebuilt from it), never another agent's: the private layers hold only their owner's events."""
        first = next(self.log.read(layers=sorted(PRIVATE_LAYERS), limit=1), None)
        if first is not None and first.agent != self.config.agent:
            self.close()
            raise InvalidInput(f"the log {shown(self.config.log)} holds the memory of agent {first.agent!r} (its "
                               f"first private event, seq {first.seq}); an agent's log cannot change hands: give "
                               f"--agent {first.agent} to take it up again, or another database")

    def _keep_contract_of_log(self) -> None:
        """A new workspace on a log that holds its agent's memory (a lost workspace rebuilt from its PostgreSQL log)
        takes the hub's contract it last took, kept in the log beside the sync cursors (`set_contract`), or else the
        last one its `contract.change` events recorded (a log kept before), as if pulled: its shared layers' files
        are written at once, and its shared writes work before `mem remote add`."""
        kept = self.log.state(CONTRACT_STATE)
        if not kept:
            last = next(self.log.read(kinds=["contract.change"], layers=[AGENT], limit=1, newest_first=True), None)
            kept = msgspec.json.encode(lenient_contract(last.body.layers)).decode() \
                if last is not None and isinstance(last.body, ContractChange) else None
        if kept and self.hub_contract() is None:
            write_atomic(self.contract_path, [kept])

    def close(self) -> None:
        self.views.close()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def root(self) -> Path:
        return self.ws.root

    @contextmanager
    def lock(self):
        """The workspace's projector lock: one process at a time checks files for hand edits, appends,
        folds, writes files or adopts edits, so none sees another's half-done work (a page in the views
        not yet on disk would look deleted by hand). Re-entrant within a process."""
        with self._thread_lock:
            if self._lock_depth:
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            self.refuse_unwritable()
            with self.ws.locked():  # every change takes the lock first: a read-only workspace stops here
                self._lock_depth, self._swept = 1, False
                try:
                    self._reopen_replaced_views()
                    yield
                finally:
                    self._lock_depth = 0

    def refuse_unwritable(self) -> None:
        """Refuses a change before anything is appended when the databases can be opened only to read (a full disk,
        a read-only file): said as such, not as SQLite's error of the append that would have failed halfway."""
        def refused(why: str) -> StorageFailure:
            return StorageFailure(f"cannot change the workspace {self.root}: {why}")

        if full_disk(self.views.db) or full_disk(getattr(self.log, "db", None)):  # the lock file opens there
            raise refused("the disk is full (its databases could be opened only to read)")
        for path, db in ((self.ws.views_path, self.views.db), (self.ws.log_path, getattr(self.log, "db", None))):
            if read_only(db):  # a file this process may not write in a folder it may (`chattr +i`, chmod)
                raise refused(f"{path} can be opened only to read (the file or its folder is read-only)")

    def witnesses(self, rebuild: bool = False) -> tuple[int, int]:
        """Refuses views the log cannot have given: their checkpoint past the log's head (events lost at its end, or
        the log replaced), or an anchor (the seq and chain of the last event they folded) this log does not hold there
        (a log rewritten, another workspace's views). They are the only evidence of it (projections.integrity):
        nothing reads them, folds onto them or rebuilds over them unasked. Views edited outside mem (a checkpoint
        moved back behind the anchor, one that is no seq) are refused too, but to a replay (`rebuild`), which builds
        them anew from the log. Returns (the views' checkpoint, the log's head) as it read them."""
        try:  # the views before the log: a writer appending meanwhile cannot make them seem ahead of its head
            checkpoint, anchor = self.views.checkpoint(), self.views.anchor()
        except Damaged:
            if rebuild:
                return 0, self.log.head()
            raise
        head = self.log.head()
        if checkpoint > head:
            raise log_cut_short(checkpoint, head)
        if anchor is not None and anchor[0] > checkpoint:
            if not rebuild:
                raise views_edited(checkpoint, anchor[0])
            anchor = None  # views edited outside mem witness nothing
        if anchor is not None and anchor[0]:
            event = self.log.get_by_seq(anchor[0])
            if event is None or event.chain != anchor[1]:
                raise views_not_of_log(*anchor)
        return checkpoint, head

    def refresh(self, *, force: bool | frozenset[str] = False, progress=None, files: bool = True) -> FileReport:
        """Catches the views up with the log and writes what changed to the workspace.

        With `files` False only the views move; the files stay marked dirty until a later refresh.
        A redaction is never folded: the views (and the files) are rebuilt from the log instead, which
        no longer holds what it removed. So are views far behind (`bulk.worth_building`: a catch-up cut off
        after it appended its pages), which a bulk build makes faster than a fold batch by batch.

        On storage this process cannot write (the views or the log opened read-only) the views are read as they
        are, when they are as far as the log; views behind it are refused."""
        stuck = next((db for db in (self.views.db, getattr(self.log, "db", None)) if read_only(db)), None)
        if stuck is not None:
            head, checkpoint = self.log.head(), self.views.checkpoint()
            if head != checkpoint:
                raise StorageFailure(f"the views {self.ws.views_path} are at seq {checkpoint}, the log at {head}, "
                                     f"and {stuck.why}: they cannot catch up to be read")
            return self.last_report
        with self.lock():
            if files and not self._swept:  # what a killed process left: none is left while this process holds the lock
                remove_stale_temp_files(self.views, self.root)
                remove_leftovers(self.ws)
                self._swept = True
            checkpoint, head = self.witnesses()
            self._seen = self._stamp()
            if not worth_building(head - checkpoint, checkpoint) and next(
                    self.log.read_rows(checkpoint, head, kinds=["redaction"], limit=1), None) is None:
                try:
                    catch_up(self.log, self.views, upto=head, progress=progress)
                except sqlite3.IntegrityError as exc:  # rows of events past the checkpoint: edited outside mem
                    raise views_damaged(self.ws.views_path, f"they hold events past their checkpoint, seq "
                                                            f"{checkpoint}: {exc}") from None
                self.views.set_contract(self.hub_contract())  # local layers come and go with config events
                if files:
                    self.last_report = self._rewritten(materialize(self.views, self.root, force=force))
                return self.last_report
        self.last_report = self._rewritten(replay(self, force=force, keep_hand_edits=True, progress=progress).files)
        return self.last_report

    def _rewritten(self, report: FileReport) -> FileReport:
        """`report`: the files are what the views say (but those edited by hand). When it wrote, removed or left any,
        the rewrite owed since a redaction (REDACTION_FILES, made here or pulled, maybe cut off) is done, and the files
        left as edited by hand are marked if the redaction may have changed them (redact.mark_redacted_under); a
        refresh that touched no file reads no log state."""
        if report.written or report.removed or report.refused:
            self.redactions_rewritten(report.refused)
        return report

    def redactions_rewritten(self, left: list[str]) -> None:
        """The files are rewritten since the redactions REDACTION_FILES names, but those in `left` (edited by hand)."""
        since = self.log.state(REDACTION_FILES)
        if since:
            if left:
                redact.mark_redacted_under(self, left, int(since) if since.isdigit() else 0)
            self.log.set_state(REDACTION_FILES, "")

    def clock_behind(self, since: int) -> str | None:
        """Said when something was recorded after seq `since` with a recorded time ahead of this machine's clock by
        more than CLOCK_SLACK_MS: the log's times never go back, so while the clock is behind its last one (set wrong
        once, ahead), everything is stamped with that one, and reads by time see it so."""
        head = self.log.head()
        last = self.log.recorded_at(head) if head > since else None
        ahead = (last - now_ms()) if last is not None else 0
        if ahead <= CLOCK_SLACK_MS:
            return None
        hours = ahead / 3_600_000
        by = f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:,.0f} days"
        return (f"this machine's clock is {by} behind the log's last recorded time "
                f"({format_local(last)}): what is recorded is stamped with that time (a log's times never go back) until "
                "the clock passes it; was the clock ahead when it was recorded?")

    def redaction_cut_off(self) -> bool:
        """Whether a redaction committed and its rewrite of the files has not been done yet (the process stopped): the
        files not written yet may still hold what it removed, until the next command that writes files. A flag left
        set once nothing is left to write (stopped after the files, before clearing it) is cleared by the next refresh
        that writes a file; `mem status` tells it only while files are left to write."""
        return bool(self.log.state(REDACTION_FILES))

    def append(self, event: Event, *, touches: list[str] = (), adopt: dict[str, bytes] | None = None,
               force: bool = False, allow_secret: bool = False) -> Event:
        """Appends one event and returns it with its seq, refusing first if it holds a secret (unless
        allowed), or if a file it would rewrite is unsafe or was edited by hand."""
        return self.append_all([event], touches=touches, adopt=adopt, force=force, allow_secret=allow_secret)[0]

    def append_all(self, events: list[Event], *, touches: list[str] = (), adopt: dict[str, bytes] | None = None,
                   force: bool = False, allow_secret: bool = False, checked: bool = False,
                   from_disk: bool = False, gone: Iterable[str] = ()) -> list[Event]:
        """Appends events in one transaction, with `append`'s checks; returns them with their seqs.
        `checked`: each event went through `admit` already (a batch of adopted pages, refused one by one).
        `adopt`: files whose bytes the events record, no longer hand edits when the files still hold them.
        `from_disk`: those bytes were read from the files (hand edits adopted): they are the base of the files'
        later edits even when a file changed again meanwhile, so that edit is merged onto what was adopted,
        never against an older base (which both changed: refused for good). `gone`: files deleted by hand whose
        deletion the events record, no longer hand edits while they stay deleted (the other files touched still are).
        `force`: the files touched are written over hand edits; any other file edited by hand is left as it is.

        Once the events are committed the command has succeeded: if the views or files then cannot follow
        (a full disk), `behind` says so and the next command catches up."""
        if not checked:
            events = [self.admit(event, allow_secret) for event in events]
        for path in touches:
            validate.inside_workspace(self.root, path)
            refuse_in_the_way(self.root, path)
        with self.lock():
            self.witnesses()  # views the log cannot have given are folded onto by nothing, this append's included
            self.refuse_folder_gone(touches)
            if not force:
                gone, known = set(gone), self.views.written.hashes(set(touches))
                strangers = [p for p in touches if p not in known and (self.root / p).is_file()]  # made by hand: the
                # views would leave them, and a later adopt would take them over what is recorded now
                edited = [p for p in sorted({*hand_edited(self.views, self.root, set(touches)), *strangers})
                          if not (adopt and p in adopt and (self.root / p).read_bytes() == adopt[p])
                          and not (p in gone and not (self.root / p).exists())]
                if edited:
                    raise HandEdited(self.hand_edited_message(edited), edited,
                                     for_tools=self.hand_edited_message(edited, tools=True))
            for event, seq in zip(events, self.log.append(events)):
                event.seq = seq
            if adopt:
                self._record_adopted(adopt, from_disk)
            self.follow(force=frozenset(touches) if force else False, files=force or not self.defer_files)
        return events

    def _record_adopted(self, adopt: dict[str, bytes], from_disk: bool) -> None:
        """`append_all`'s `adopt`, once the views hold the events (an adopted file's row is dated by its page's)."""
        self.follow(files=False)
        try:
            if self.views.checkpoint() < self.log.head():
                return  # the views could not follow: `behind` says why
            record_adopted(self.views, {path: document for path, document in adopt.items() if from_disk or (
                (self.root / path).is_file() and (self.root / path).read_bytes() == document)})
        except storage_exceptions() as exc:
            self._fell_behind(exc)

    def admit(self, event: Event, allow_secret: bool = False) -> Event:
        """The event as it may be appended: refused when it holds a secret (unless allowed) or when the trust
        rules forbid it (a held page)."""
        event = secrets.checked(event, allow_secret)
        trust.admit(self, event)
        return event

    def follow(self, *, force: bool | frozenset[str] = False, files: bool = True, progress=None) -> FileReport:
        """Refreshes after a committed append; a storage failure, or a file something else stands in the way of,
        leaves the events standing and sets `behind`."""
        try:
            return self.refresh(force=force, files=files, progress=progress)
        except (*storage_exceptions(), InTheWay) as exc:
            self._fell_behind(exc)
            return FileReport()

    def _fell_behind(self, exc: BaseException) -> None:
        why = exc if isinstance(exc, InTheWay) else self.ws.damage(exc) or storage_failure(exc)
        try:
            views_followed = self.views.checkpoint() >= self.log.head()
        except storage_exceptions():
            views_followed = False
        self.behind = (f"recorded, but the files are behind the log ({why}); they are written at the next command "
                       "that can" if views_followed else
                       f"recorded, but the views and files are behind the log ({why}); they catch up at the next command")

    def refuse_folder_gone(self, touches: Iterable[str]) -> None:
        """Refuses a write into a page folder (mind/, a pages layer's) gone with the pages it held (moved aside: a
        backup, an editor's move): written, it would make the folder again with this page alone, and the next `mem
        adopt` or `mem watch` take the others for deleted (nc31a); the write is not recorded to wait unwritten
        (nc33a: it was, a pages layer's, and said nothing)."""
        from .materialize import FoldersGone

        gone = FoldersGone(self.views, self.root)
        folder = next((found for path in touches if (found := gone.holds(path)) is not None), None)
        if folder is None:
            return
        pages = [path for path in self.views.paths() if path.startswith(folder) and path != LOG_PATH]
        raise InvalidInput(f"{folder} is gone, with its {len(pages)} page(s) (moved aside?): put it back, or `mem "
                           f"replay` writes it again from the log (`mkdir {folder.rstrip('/')}` then `mem adopt` "
                           "records their deletion); then write again")

    def hand_edited_message(self, paths: list[str], *, tools: bool = False) -> str:
        """Why a write touching these hand-edited files is refused, and what can be done about each (a file mindlog
        never wrote is said to be made by hand, not edited since it wrote it)."""
        how = {path: "is on disk, made by hand" if written_hash(self.views, path) is None
               else "was edited by hand since mindlog wrote it" for path in paths}
        said = "; ".join(f"{path} {how[path]}: {self.keep_hint(path, tools=tools)}" for path in paths)
        return f"{said}; then call again" if tools else said

    def moved_hint(self, path: str, *, tools: bool = False) -> str | None:
        """Where to copy a hand edit left in a file whose layer a contract change moved away (`mem adopt` cannot
        take it where it is: no layer's page is there any more), or that its layer was dropped (the edit has nowhere
        to go); None when the file's layer did neither."""
        moved = self.views.moved_away(path) if self.views.contract is not None and path != MIND_PATH else None
        if moved is None:
            return None
        layer, now = moved
        if now is None:
            return (f"layer {layer} was dropped from the hub's contract, so the edit has no layer to go to: it stays "
                    f"on disk only (the layer's last text is in the log: `mem history {shlex.quote(path)}`)")
        spec = self.views.contract.layers[layer]
        adopt = "call the adopt tool" if tools else "`mem adopt`"
        return f"layer {layer} moved to {spec.path}: copy the edit to {now}, then {adopt}"

    def _always_edited(self) -> bool:
        """Whether mind.md on disk has other `## Always` lines than mindlog last wrote there (a hand edit of mind.md
        elsewhere is of the catalog, which `mem adopt` does not take)."""
        try:
            text = (self.root / MIND_PATH).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return True
        return always_lines(text) != always_lines(self.views.written.text(MIND_PATH) or "")

    def redacted_under(self, path: str) -> str | None:
        """The reason of a redaction that changed `path` while a hand edit kept the file from being rewritten (see
        redact.mark_redacted_under), as long as mindlog has not written the file since: the edit was made on text
        that is redacted now and may hold it, so adopting it would record that text again. None otherwise."""
        mark = self.log.state(REDACTED_UNDER + path)
        if not mark:
            return None
        written, _, reason = mark.partition(" ")
        return reason if self.views.written.hashes([path]).get(path) == written else None

    def redacted_under_hint(self, path: str, *, tools: bool = False) -> str | None:
        """What to do with a hand edit made on redacted text (redacted_under), or None."""
        reason = self.redacted_under(path)
        if reason is None:
            return None
        said = f"the edit was made on text redacted since ({reason}) and may hold it"
        if tools:
            return (f"{said}, so the adopt tool does not take it; a person must take that text out of the file, or "
                    "delete the file (it is written again from the log)")
        shared = self.views.shared_target(path) if self.views.contract and not slug_of(path) else None
        quoted = shlex.quote(path)
        write = (f"mem page write {shared[1]} --layer {shared[0]} --file {quoted}" if shared and shared[1] else
                 f"mem page write {slug_of(path)} --file {quoted}" if slug_of(path) else None)
        drop = f"`mem show {quoted} > {quoted}` drops the edit"
        if write is None:  # no page: mind.md, mind/log.md, an entries layer's file, a file of the agent's own
            return f"{said}, so `mem adopt` does not take it: {drop}"
        return f"{said}, so `mem adopt` does not take it: take that text out and `{write}`, or {drop}"

    def not_adoptable(self, paths) -> dict[str, str]:
        """Of these hand-edited files that a pull or refresh left unwritten, those `mem adopt` cannot take, each with
        what becomes of the edit: a file whose layer moved away or was dropped (moved_hint), and a file derived from
        the log alone (mind/log.md, an entries layer's file), which only its deletion lets be written again."""
        from .materialize import FoldersGone

        hints, gone = {}, FoldersGone(self.views, self.root)
        for path in paths:
            hint = (self._folder_gone_hint(path, gone) or self.moved_hint(path) or self.redacted_under_hint(path)
                    or self._before_mindlog(path))
            target = self._layer_file(path)
            if hint is None and path == MIND_PATH and self._kept_aside_refusal() is not None:
                hint = self.keep_hint(path)  # not "`mem adopt` keeps the edit", which it refuses (nc27a)
            elif hint is None and target is not None and target[1] is None:
                hint = self.entries_file_hint(path, target[0])
            elif hint is None and target is not None and not self.produces(target[0]):
                hint = self.consumed_page_hint(path, target[0])
            elif hint is None and self._derived(path):
                hint = "it is derived from the log and cannot be adopted: delete it to have it written again"
            if hint is not None:
                hints[path] = hint
        return hints

    @staticmethod
    def _folder_gone_hint(path: str, gone) -> str | None:
        folder = gone.holds(path) if not (gone.root / path).exists() else None
        if folder is None:
            return None
        return (f"{FOLDER_GONE} {folder} is gone, with the pages mindlog wrote there (moved aside?): put it back, or "
                "`mem replay` writes it again from the log")

    def _before_mindlog(self, path: str) -> str | None:
        """What `mem adopt` does with the wiki's own mind/log.md or mind.md, from before `mem init`: deleted or
        overwritten, as the hint for a log mindlog wrote says, its history was lost (nc25a); "a newer version waits"
        said of a log that held nothing (nc31b)."""
        if path == MIND_PATH and written_hash(self.views, MIND_PATH) is None and self._kept_aside_refusal() is None:
            return (f"it is from before mindlog: `mem adopt` keeps it whole as {KEPT_ASIDE}{MIND_PATH} and takes its "
                    "`## Always` lines")
        if path == LOG_PATH and written_hash(self.views, LOG_PATH) is None:
            from .adopt import log_restore_refusal

            refusal = log_restore_refusal(self)
            return (f"it is from before mindlog, and `mem adopt` cannot keep it ({refusal})" if refusal else
                    "it is from before mindlog: `mem adopt` keeps its entries, below those written since")
        return None

    def _kept_aside_refusal(self) -> MemError | None:
        """Why `mem adopt` could not keep the wiki's own mind.md, from before `mem init`, as imported/mind.md (a
        secret in it), or None: the hint for it and for the pages waiting on it says so instead of "adopt", which
        would only be refused in turn (nc25a)."""
        if written_hash(self.views, MIND_PATH) is not None:
            return None
        try:
            self.admit(self.adf_writer.file_write(KEPT_ASIDE + MIND_PATH, (self.root / MIND_PATH).read_bytes(),
                                                  "text/markdown"))
        except MemError as exc:
            return exc
        except OSError:
            return None
        return None

    def entries_file_hint(self, path: str, layer: str) -> str:
        """What to do about the file of an entries layer edited by hand: its text is rendered from the layer's
        entries, which an edit does not make; a consumer cannot add one (nc26b: it was told to, and that deleting
        the file wrote it again, which only the layer's next entry does)."""
        add, quoted = "`mem entry add` adds one; " if self.produces(layer) else "", shlex.quote(path)
        return (f"the entries of layer {layer} are rendered from its events, which an edit does not make: {add}"
                f"`mem show {quoted} > {quoted}` puts the file back")

    def consumed_page_hint(self, path: str, layer: str) -> str:
        """What to do about a shared page edited by hand in a layer this agent consumes without producing it: `mem
        adopt` refuses to make the edit a version (nc28b: it was told `mem adopt` keeps the edit)."""
        quoted = shlex.quote(path)
        return (f"this agent does not produce layer {layer}, so `mem adopt` cannot keep the edit: "
                f"`mem show {quoted} > {quoted}` puts the file back")

    def _layer_file(self, path: str) -> tuple[str, str | None] | None:
        """(layer, slug or None for an entries layer) of a file a layer of the contract places, or None (mind.md and
        mind/log.md are the agent's own)."""
        return self.views.shared_target(path) if self.views.contract and path not in (MIND_PATH, LOG_PATH) else None

    def _derived(self, path: str) -> bool:
        """mind/log.md, or the file of an entries layer."""
        if path == LOG_PATH:
            return True
        target = self._layer_file(path)
        return target is not None and target[1] is None

    def _adopt_refusal(self, path: str) -> MemError | None:
        """Why `mem adopt` would refuse the wiki page `path` as it is on disk (no frontmatter, a secret, a hold), or
        None: told instead of "adopt it", which would only be refused in turn (an agent called adopt in a loop)."""
        try:
            self.admit(self.writer.page_write(slug_of(path), (self.root / path).read_bytes()))
        except MemError as exc:
            return exc
        except OSError:
            return None
        return None

    def keep_hint(self, path: str, *, tools: bool = False) -> str:
        """What a user can do about a hand-edited file, which depends on what the file is; `tools`: in the words
        of an MCP client, which has the adopt tool but no --force (a person in a shell has)."""
        target = self._layer_file(path)
        moved = self.moved_hint(path, tools=tools) if target is None else None
        if moved is not None:
            return moved
        if (redacted := self.redacted_under_hint(path, tools=tools)) is not None:
            return redacted
        if tools:
            if path == MIND_PATH and not self._always_edited():
                return (f"only lines outside `## Always` changed, which the adopt tool does not take ({CATALOG_EDIT}); "
                        "a person must put the file back in a shell (`mem show mind.md > mind.md`)")
            if path == MIND_PATH and (refusal := self._kept_aside_refusal()) is not None:
                return (f"the adopt tool cannot keep it as {KEPT_ASIDE}{MIND_PATH} "
                        f"({secrets.without_advice(refusal)}); a person must take that out of the file in a shell, "
                        "then call the adopt tool")
            if path == MIND_PATH:
                return "call the adopt tool to record its `## Always` lines"
            if path == LOG_PATH:
                before = self._before_mindlog(path)
                return (before.replace("`mem adopt`", "the adopt tool") if before
                        else "it is derived from the log and cannot be adopted; a person must delete the file in a "
                             "shell (it is written again at the next change)")
            if slug_of(path) and (refusal := self._adopt_refusal(path)) is not None:
                return (f"the adopt tool cannot take it ({secrets.without_advice(refusal)}); a person must fix or "
                        "delete the file in a shell (deleted, it is written again from the log)")
            if slug_of(path) or (target is not None and target[1] is not None):
                return "call the adopt tool to keep the edit as a new version"
            quoted = shlex.quote(path)
            return (f"it cannot be adopted; a person must put the file back in a shell (`mem show {quoted} > {quoted}`)"
                    if target is not None else
                    "it cannot be adopted; a person must delete the file in a shell (it is written again from the log)")
        if path == MIND_PATH and not self._always_edited():
            return (f"only lines outside `## Always` changed, which `mem adopt` does not take ({CATALOG_EDIT}): "
                    "`mem show mind.md > mind.md` puts the file back, or pass --force to overwrite it")
        if path == MIND_PATH and (refusal := self._kept_aside_refusal()) is not None:
            allowed = (" (`mem adopt --allow-secret` keeps it as it is)" if isinstance(refusal, secrets.SecretFound)
                       else "")
            return (f"`mem adopt` cannot keep it as {KEPT_ASIDE}{MIND_PATH} ({secrets.without_advice(refusal)})"
                    f"{allowed}: take that out of the file, then `mem adopt`")
        if path == MIND_PATH:
            return "`mem adopt` records its `## Always` lines, or pass --force to overwrite it"
        if path == LOG_PATH:
            return self._before_mindlog(path) or (  # the way back, for `mem adopt` has no --force (nc30b)
                "it is derived from the log and cannot be adopted: `mem show mind/log.md > mind/log.md` puts mindlog's "
                "version back (a write's --force overwrites it)")
        if slug_of(path) and (refusal := self._adopt_refusal(path)) is not None:
            allowed = " (`mem adopt --allow-secret` takes it as it is)" if isinstance(refusal, secrets.SecretFound) else ""
            return (f"`mem adopt` cannot take it ({secrets.without_advice(refusal)}){allowed}: fix the file, or pass "
                    "--force to overwrite it")
        if slug_of(path):
            return (f"`mem adopt` keeps the edit (or `mem page write {slug_of(path)} --file {path}`), "
                    "or pass --force to overwrite it")
        if target is not None and target[1] is not None:
            if not self.produces(target[0]):
                return self.consumed_page_hint(path, target[0])
            return "`mem adopt` keeps the edit as a new version of the shared page"
        if target is not None:
            return self.entries_file_hint(path, target[0])
        return "pass --force to overwrite it"

    # --- the wiki -----------------------------------------------------------------------------

    @contextmanager
    def at_head(self):
        """The lock, with the views caught up with the log: a page read inside is the version an append made
        inside supersedes (its parent), not one another process superseded since this one last read the views."""
        with self.lock():
            if self.views.checkpoint() < self.log.head() or self.moved_elsewhere():
                self.refresh(files=False)
            yield

    def write_page(self, slug: str, document: bytes, note: str = "", *, force: bool = False,
                   allow_secret: bool = False, if_version: str | None = None) -> "Event | Unchanged":
        """The page's next version, or `Unchanged` when the document is the current version (nothing recorded;
        `force` records it all the same). `if_version`: the version the document was made from (its seq or id),
        refused unless it is still the current one; without it the write follows whatever came before (last
        writer wins)."""
        with self.at_head():
            if if_version is not None:
                self._refuse_unless_head(slug, if_version)
            event = self.writer.page_write(slug, document, note)
            path = page_path(event.body.slug)
            if not force and (unchanged := self._unchanged(event, path)) is not None:
                return unchanged
            return self.append(event, touches=[path, MIND_PATH, LOG_PATH], adopt={path: document}, force=force,
                               allow_secret=allow_secret)

    def _unchanged(self, event: Event, path: str) -> Unchanged | None:
        """The page's current version when `event` would record it again (same frontmatter and text, one parent)
        and its file holds what mindlog wrote: a second version saying nothing new, and a line in mind/log.md."""
        body = event.body
        if event.kind != "page.update" or len(body.parents) != 1:
            return None
        head = self.log.get(body.parents[0])
        if head is None or head.kind not in ("page.ingest", "page.update") or head.body.slug != body.slug or \
                head.body.text != body.text or head.body.frontmatter != body.frontmatter:
            return None
        written = self.views.written.hashes({path}).get(path)
        if written is None or file_hash(self.root / path) != written or path in dict(self.views.written.dirty()):
            return None  # the file is not the current version as mindlog wrote it: the write puts it there
        return Unchanged(version=head, path=path)

    def _refuse_unless_head(self, slug: str, expected: str) -> None:
        """`expected` 0: the page must have no current version (never written, or deleted): a write that creates it
        only if no other came first (nc26b: there was no way to say so)."""
        slug = validate.slug(slug)
        head = self.views.page_head(slug)
        if expected.strip() == "0":
            if head is not None:
                raise Stale(f"mind/{slug}.md exists (its current version is seq {head[0]}), and --if-version 0 writes "
                            f"it only if it does not: nothing was written; `mem show {slug}` has it")
            return
        if head is None:
            ever = self.views.page_version_seqs(slug, 1 << 62)
            became = f"`mem history {slug}` says what became of it" if ever else "it never existed"
            raise Stale(f"mind/{slug}.md has no current version, not {expected} (the version the write was made "
                        f"from): nothing was written; {became} (--if-version 0 writes a page only if it has none)")
        if expected.strip() not in (str(head[0]), head[1]):
            self._refuse_unless_version(slug, expected.strip())
            raise Stale(f"mind/{slug}.md was written since version {expected} that this write was made from: its "
                        f"current version is seq {head[0]} (id {head[1]}); nothing was written: `mem show {slug}` "
                        f"has it to redo the change on, with --if-version {head[0]}")

    def _refuse_unless_version(self, slug: str, expected: str) -> None:
        """Refuses an `--if-version` that names no version of the page: no seq or event id, a seq past the log's
        head, an event that is no version of it (each was said to be a version written over since)."""
        if expected.isascii() and expected.isdigit():
            seq = seq_number(expected)
            if seq > self.log.head():
                raise InvalidInput(f"--if-version {expected}: seq {expected} is past the log's head "
                                   f"({self.log.head()})")
            event = self.log.get_by_seq(seq)
        elif is_uuid(expected):
            event = self.log.get(expected)
        else:
            raise InvalidInput(f"--if-version takes a version's seq or event id (as `mem history {slug}` prints "
                               f"them), not {expected!r:.80}")
        body = event.body if event is not None and event.layer == MIND else None
        if slug not in (getattr(body, "slug", None), getattr(body, "new", None), getattr(body, "old", None)):
            raise InvalidInput(f"--if-version {expected}: that is no version of mind/{slug}.md (`mem history {slug}` "
                               "lists them)")

    def delete_page(self, slug: str, note: str = "", *, force: bool = False, allow_secret: bool = False) -> Event:
        with self.at_head():
            event = self.writer.page_delete(slug, note)
            return self.append(event, touches=[page_path(event.body.slug), MIND_PATH, LOG_PATH], force=force,
                               allow_secret=allow_secret)

    def rename_page(self, old: str, new: str, note: str = "", *, force: bool = False,
                    allow_secret: bool = False) -> Event:
        with self.at_head():
            event = self.writer.page_rename(old, new, note)
            touches = [page_path(event.body.old), page_path(event.body.new), MIND_PATH, LOG_PATH]
            return self.append(event, touches=touches, force=force, allow_secret=allow_secret)

    def release_page(self, slug: str, note: str, *, allow_secret: bool = False) -> Event:
        event = self.writer.page_release(slug, note)
        trust.check_release(self, event.body.slug)
        return self.append(event, touches=[LOG_PATH], allow_secret=allow_secret)

    def always_add(self, line: str, *, position: int | None = None, force: bool = False,
                   allow_secret: bool = False) -> Event:
        return self.append(self.writer.always_add(line, position), touches=[MIND_PATH], force=force,
                           allow_secret=allow_secret)

    def always_remove(self, number: int, *, force: bool = False, if_line: str | None = None) -> Event:
        """Removes `## Always` line `number`, read under the lock; with `if_line`, only if that line still reads so
        (nc34a: two removals of line 1 at once, and an add at line 1 between them, removed a line neither had seen)."""
        with self.at_head():
            if if_line is not None:
                lines = self.views.always()
                now = lines[number - 1] if 0 < number <= len(lines) else None
                if now != if_line:
                    where = (f"it is line {lines.index(if_line) + 1} now" if if_line in lines else
                             "no line reads it now")
                    there = (f"line {number} of `## Always` is {now!r} now" if now is not None else
                             f"`## Always` has no line {number} now ({len(lines)} lines)")  # nc36a
                    raise Stale(f"{there}, not {if_line!r} ({where}): nothing was removed")
            return self.append(self.writer.always_remove(number), touches=[MIND_PATH], force=force)

    def always(self, as_of: int | None = None) -> list[str]:
        """The `## Always` lines now, or as mind.md had them at a seq."""
        if as_of is None:
            return self.views.always()
        return always_lines(self.show(MIND_PATH, as_of) or "") or []

    # --- the loop, files, messages, config ---------------------------------------------------

    def loop_append(self, role: str, content: list, loop: str = "main", model=None, tokens=None, *,
                    allow_secret: bool = False) -> Event:
        """A message of the loop; one with no content, or only blank text, is refused (an ADF import keeps what
        its file holds: it goes through the writer directly)."""
        if isinstance(content, list) and not content:
            raise InvalidInput("a loop message needs some content: its list of blocks is empty")
        if isinstance(content, list) and all(isinstance(block, dict) and block.get("type") == "text"
                                             and not str(block.get("text", "")).strip() for block in content):
            raise InvalidInput("a loop message needs some content: its text is empty")
        return self.append(self.adf_writer.loop_append(role, content, loop, model, tokens), allow_secret=allow_secret)

    def loop_compact(self, summary: str, preserve: int = 0, loop: str = "main", *,
                     allow_secret: bool = False) -> Compaction:
        if preserve < 0:
            raise below_zero("preserve", preserve)
        live = len(self.loop(loop))
        if live <= preserve:
            raise InvalidInput(f"loop {loop!r} has {live} messages; with --preserve {preserve} there is nothing "
                               "to compact", for_tools=f"loop {loop!r} has {live} messages; with preserve {preserve} "
                               "there is nothing to compact")
        event = self.append(self.adf_writer.loop_compact(summary, preserve, loop), allow_secret=allow_secret)
        return Compaction(event=event, archived=audit.archived_by(self.views, event.seq))

    def loop_clear(self, start: int | None = None, end: int | None = None, loop: str = "main") -> Compaction:
        live = self.loop(loop)
        if not live[start:end]:
            raise InvalidInput(f"loop {loop!r} has {len(live)} messages; rows[{'' if start is None else start}:"
                               f"{'' if end is None else end}] selects none, so there is nothing to clear")
        event = self.append(self.adf_writer.loop_clear(start, end, loop))
        return Compaction(event=event, archived=audit.archived_by(self.views, event.seq))

    def file_write(self, path: str, content: bytes, mime_type=None, protection: str = "none", *,
                   allow_secret: bool = False) -> Event:
        local_layers.refuse_layer_path(path, self.views.contract)
        return self.append(self.adf_writer.file_write(path, content, mime_type, protection), allow_secret=allow_secret)

    def file_delete(self, path: str) -> Event:
        return self.append(self.adf_writer.file_delete(path))

    def file_rename(self, old: str, new: str, *, allow_secret: bool = False) -> Event:
        """Moves a file: its write at the new path and its delete, appended in one transaction (the log
        has no rename kind for files). Refused like a write of `new` and a delete of `old` would be.
        Returns the delete (its seq the rename's last)."""
        current = self.views.file(file_path(old))
        if current is None:
            raise NotFound(f"there is no file {old}")
        if self.views.file(file_path(new)) is not None:
            raise InvalidInput(f"{new} exists already")
        _path, content, mime_type, _size, protection = current[:5]
        events = [secrets.checked(self.adf_writer.file_write(new, bytes(content), mime_type, protection),
                                  allow_secret),
                  self.adf_writer.file_delete(old)]
        with self.lock():
            for event, seq in zip(events, self.log.append(events)):
                event.seq = seq
            self.follow(files=not self.defer_files)
        return events[-1]

    def message(self, box: str, message: dict, *, allow_secret: bool = False) -> Event:
        return self.append(self.adf_writer.message(box, message), allow_secret=allow_secret)

    def config_set(self, key: str, value, *, allow_secret: bool = False) -> Event:
        """Sets a config key; `layers.<name>` declares a local layer, checked as `mem layer add` checks it, under the
        lock against the layers as they are then (nc34a: two at once both passed, two layers on one file)."""
        with self.at_head():
            event = self.adf_writer.config_set(key, value)
            if key.startswith("layers."):
                spec = local_layers.checked_spec(key, value, self.views.contract)
                local_layers.refuse_own_files(key.removeprefix("layers."), spec, self.views.file_paths())
                event = self.adf_writer.config_set(key, spec)
            return self.append(event, allow_secret=allow_secret)

    def swap_views(self, views: Views) -> None:
        """Points every part at a new views database (after a replay)."""
        self.views = views
        self.writer.state = views
        self.adf_writer.files = views
        self.shared_writer.state = views
        self._views_file = _file_identity(self.ws.views_path)

    def views_replaced(self) -> bool:
        """Whether another views file has been renamed into place (a replay in another process) since these views
        were opened."""
        found = _file_identity(self.ws.views_path)
        return found is not None and found != self._views_file

    def _reopen_replaced_views(self) -> None:
        """A replay in another process renamed a new views file into place: this process's connection still
        reads, and would write, the old one, deleted (a `mem pull --follow` went on folding into it, and
        `mem status` found the real views behind and the files "edited by hand"). Called under the lock,
        before anything is read or written: the views are opened again from the file now in place."""
        if not self.views_replaced():
            return
        self.views.close()
        self.swap_views(self._open_views(rebuild_damaged=False))

    # --- shared layers ------------------------------------------------------------------------

    @property
    def contract_path(self) -> Path:
        return self.ws.mem_dir / "contract.json"

    def hub_contract(self):
        """The hub's contract as last pulled (None before any pull)."""
        try:
            data = msgspec.json.decode(self.contract_path.read_bytes())
        except FileNotFoundError:
            return None
        except msgspec.DecodeError as exc:
            data = exc
        if not (isinstance(data, dict) and isinstance(data.get("layers"), dict)):  # it read as no layer at all
            why = data if isinstance(data, Exception) else "it holds no `layers` object"
            raise InvalidInput(f"{self.contract_path} is damaged: {why} (remove it: the next `mem pull` fetches the "
                               "hub's contract again)")
        return lenient_contract(data["layers"])

    def load_contract(self, hub=None):
        """The hub's contract (as last pulled) with the local layers the views' config declares."""
        return local_layers.merged(hub if hub is not None else self.hub_contract(), self.views.config(),
                                   self.config.agent)

    def declare_layer(self, name: str, path: str, format: str = "entries") -> Event:
        """A local layer (no hub needed): its declaration is a config event."""
        local_layers.check_name(name)  # before the key is made of it: `Bad Name` is no layer name, not a config key
        if name not in self.local_layers():
            others = next((row[4] for row in self.log.read_rows(layers=[name]) if row[4] != self.config.agent), None)
            if others is not None:  # nc33a: the new local layer showed the team's pages, and wrote over them
                raise InvalidInput(f"the log holds other agents' events of layer {name!r} ({others}'s among them), "
                                   "from a hub that shares or shared it: a local layer of that name would take them "
                                   "in; choose another name")
        return self.config_set(f"layers.{name}", {"path": path, "format": format})

    def set_contract(self, contract) -> bool:
        """Keeps the hub's contract for rendering shared layers; True when what this workspace renders changed. It
        is kept even when it does not (a change to a layer a local one shadows: `not_taken` reads it). One that
        moves, drops or adds a layer's file is recorded in the log first (projections.placements: the past keeps
        its places)."""
        encoded = msgspec.json.encode(contract)
        try:
            kept = self.contract_path.read_bytes()
        except FileNotFoundError:
            kept = None
        if kept == encoded and self.load_contract(contract) == self.views.contract:
            return False
        with self.lock():
            previous = self.hub_contract()
            recorded = previous is not None and placement(previous) != placement(contract)
            if recorded:
                self.log.append([self.adf_writer.contract_taken(contract, previous)])
            write_atomic(self.contract_path, [encoded])
            self.log.set_state(CONTRACT_STATE, encoded.decode())
            changed = self.load_contract(contract) != self.views.contract
            if changed or recorded:
                self.views.set_contract(contract)
                self.refresh()
        return changed

    def layer_spec(self, layer: str, *, private: bool = False):
        """The contract's spec of `layer`, refusing a name this workspace does not know (a typo would
        otherwise read as an empty layer). With `private`, mind, loop and agent are known too (spec None)."""
        if private and layer in PRIVATE_LAYERS:
            return None
        contract = self.views.contract
        spec = contract.layers.get(layer) if contract is not None else None
        if spec is not None:
            return spec
        if contract is None and not private:
            raise InvalidInput(**for_each(f"there is no layer {layer!r}: no contract is known yet (",
                                          "`mem pull` fetches the hub's; `mem layer add NAME PATH` declares a local "
                                          "layer)", "call sync to fetch the hub's, once a person has added a "
                                          "remote; or a person declares a local layer with `mem layer add NAME PATH`)"))
        not_taken = self.not_taken().get(layer)
        if not_taken is not None:
            raise InvalidInput(not_taken)
        known = [*(sorted(PRIVATE_LAYERS) if private else ()), *(contract.layers if contract else ())]
        if self.hub_contract() is None:  # local layers alone: there is no contract to speak of
            raise InvalidInput(f"there is no layer {layer!r} declared here (`mem layer list`) (layers: {', '.join(known)})")
        placed = self.views.last_placed(layer)
        if placed is not None and placed[1] is not None:  # nc34b: it said to pull, as if the hub might have it
            raise InvalidInput(**for_each(
                f"layer {layer!r} was dropped from the hub's contract at seq {placed[1] + 1} (layers now: "
                f"{', '.join(known)}): it takes no writes", " (`mem pull` takes it again if the hub has it back)",
                " (sync takes it again if the hub has it back)"))
        raise InvalidInput(**for_each(f"layer {layer!r} is not in the contract as last pulled (layers: "
                                      f"{', '.join(known)})", "; `mem pull` fetches the hub's, if it has changed since",
                                      "; sync fetches the hub's, if it has changed since"))

    def logged_layer(self, layer: str) -> None:
        """Refuses a layer to read the log by that the contract does not name and the log holds nothing of (a
        typo); a layer dropped from the contract is read as it was."""
        if layer in PRIVATE_LAYERS or self.views.shared.holds(layer):
            return
        contract = self.views.contract
        if contract is None or layer not in contract.layers:
            not_taken = self.not_taken().get(layer)
            if not_taken is not None:
                raise InvalidInput(not_taken)
            known = [*sorted(PRIVATE_LAYERS), *sorted(set(contract.layers if contract else ())
                                                      | set(self.views.shared.held_layers()))]
            raise InvalidInput(f"layer {layer!r} is not in the contract, nor in the log (layers: {', '.join(known)})")

    def shared_layer(self, layer: str, format: str, allow_secret: bool = False, *, produce: bool = True):
        spec = self.layer_spec(layer)
        contract = self.views.contract
        if spec.format != format:
            raise InvalidInput(f"layer {layer!r} holds {spec.format}, not {format}")
        if produce and not produces(contract, self.config.agent, layer):
            raise InvalidInput(f"agent {self.config.agent!r} does not produce layer {layer!r} under the contract")
        if allow_secret and spec.scan_secrets:
            raise InvalidInput(f"the hub scans layer {layer!r} for secrets (scan_secrets in the contract): "
                               "--allow-secret cannot put one there")
        return spec

    def entry_add(self, layer: str, text: str, reverses: str | None = None, *, allow_secret: bool = False) -> Event:
        spec = self.shared_layer(layer, "entries", allow_secret)
        return self.append(self.shared_writer.entry(layer, text, reverses), touches=[spec.path],
                           allow_secret=allow_secret)

    def shared_page_path(self, layer: str, slug: str) -> str:
        return f"{self.views.contract.layers[layer].path}{slug}.md"

    def page_file(self, layer: str, slug: str) -> str:
        """The file a page is written to: the wiki's in mind/, a pages layer's where the contract (or the config,
        for a local layer) places it."""
        return page_path(slug) if layer == MIND else self.shared_page_path(layer, slug)

    def materialised_from(self, layer: str, slug: str) -> list[str] | None:
        """When the page's file was changed by hand: the version that file showed before the edit
        ([] when mindlog never wrote it). None when the file is as mindlog wrote it."""
        path = self.shared_page_path(layer, slug)
        on_disk = (self.root / path).exists()
        if on_disk and not hand_edited(self.views, self.root, {path}):
            return None
        written = written_hash(self.views, path)
        if written is None:
            return [] if on_disk else None
        found = self.views.shared.version_rendered_as(layer, slug, written)
        return [found] if found else []

    def shared_page_write(self, layer: str, slug: str, document: bytes, note: str = "", *,
                          allow_secret: bool = False) -> Event:
        """Writes a shared page; from a hand-edited file, its parent is the version the file showed,
        so a teammate's version that arrived meanwhile stays a head (a conflict), never lost."""
        with self.at_head():  # nc34a: two writes at once both named the version before them, forking the page
            event = self.shared_page_writing(layer, slug, document, note, allow_secret=allow_secret)
            path = self.shared_page_path(layer, event.body.slug)
            return self.append(event, touches=[path], adopt={path: document}, allow_secret=allow_secret)

    def shared_page_writing(self, layer: str, slug: str, document: bytes, note: str = "", *,
                            allow_secret: bool = False) -> Event:
        """The event `shared_page_write` appends, made and checked against the contract."""
        self.shared_layer(layer, "pages", allow_secret)
        slug = validate.slug(slug)
        return self.shared_writer.page_write(layer, slug, document, note, self.materialised_from(layer, slug))

    def shared_page_delete(self, layer: str, slug: str, note: str = "", *, by_hand: bool = False,
                           allow_secret: bool = False) -> Event:
        """Deletes a shared page; `by_hand` (its file was deleted) supersedes only the version the
        file showed, so a teammate's newer version is kept as a conflict."""
        with self.at_head():
            event = self.shared_page_deleting(layer, slug, note, by_hand=by_hand, allow_secret=allow_secret)
            return self.append(event, touches=[self.shared_page_path(layer, event.body.slug)], force=by_hand,
                               allow_secret=allow_secret)

    def shared_page_deleting(self, layer: str, slug: str, note: str = "", *, by_hand: bool = False,
                             allow_secret: bool = False) -> Event:
        """The event `shared_page_delete` appends, made and checked against the contract."""
        self.shared_layer(layer, "pages", allow_secret)
        slug = validate.slug(slug)
        parents = self.materialised_from(layer, slug) if by_hand else None
        return self.shared_writer.page_delete(layer, slug, note, parents)

    def shared_page_rename(self, layer: str, old: str, new: str, note: str = "", *,
                           allow_secret: bool = False) -> Event:
        with self.at_head():
            self.shared_layer(layer, "pages", allow_secret)
            events = self.shared_writer.page_rename(layer, old, new, note)
            touches = [self.shared_page_path(layer, e.body.slug) for e in events]
            return self.append_all(events, touches=touches, allow_secret=allow_secret)[-1]

    def release_shared_page(self, layer: str, slug: str, note: str, *, allow_secret: bool = False) -> Event:
        """Lifts the hold of a shared page: a version with its text, without `governance: hold`."""
        with self.at_head():
            self.shared_layer(layer, "pages", allow_secret)
            event = self.shared_writer.page_release(layer, slug, note)
            return self.append(event, touches=[self.shared_page_path(layer, event.body.slug)],
                               allow_secret=allow_secret)

    def shared_pages(self, layer: str, as_of: int | None = None) -> list[SharedPage]:
        """The live pages of a pages layer, now or as of a seq."""
        self.shared_layer(layer, "pages", produce=False)
        return self.views.shared.pages(layer, self.views.checkpoint() if as_of is None else as_of)

    def resolve(self, layer: str, slug: str, document: bytes, *, allow_secret: bool = False) -> Event:
        with self.at_head():
            spec = self.shared_layer(layer, "pages", allow_secret)
            event = self.shared_writer.resolve(layer, slug, document, f"{spec.path}{slug}.md")
            path = f"{spec.path}{event.body.slug}.md"
            return self.append(event, touches=[path], adopt={path: document}, allow_secret=allow_secret)

    # --- point in time ------------------------------------------------------------------------

    def seq_at(self, at_ms: int | None = None, seq: int | None = None) -> int:
        """The seq that a (time, seq) pair names; the head when neither is given."""
        if seq is not None:
            if seq < 1:
                raise InvalidInput(f"seq {seq} is before the first event (seqs start at 1)")
            if seq > self.log.head():
                raise InvalidInput(f"seq {seq} is past the log head ({self.log.head()})")
            return min(seq, self.views.checkpoint())
        if at_ms is not None:
            return min(self.log.seq_at(at_ms), self.views.checkpoint())
        return self.views.checkpoint()

    def relative(self, path: str) -> str:
        """A path as typed at a prompt, as the workspace names its files: `./mind.md`, `mind/../mind.md` and an absolute
        path into the workspace are mind.md (shell completion writes them so); one that leads out of it is refused."""
        if os.path.isabs(path):
            normal = Path(os.path.normpath(path))
            for root in (self.root, self.root.resolve()):
                if normal.is_relative_to(root):
                    return normal.relative_to(root).as_posix()
            raise UnsafePath(f"{path} is not in the workspace {self.root}: give a path inside it, like mind/deploy.md")
        normal = posixpath.normpath(path) if path.strip() else path
        if normal == ".." or normal.startswith("../"):
            raise UnsafePath(f"{path} leads out of the workspace {self.root}: give a path inside it, like mind/deploy.md")
        return normal

    def named_file(self, path: str, *seqs: int) -> str:
        """The file a name given by a user or a tool names: a path as `relative` reads it; a page's bare slug
        (`deploy` is mind/deploy.md), a shared page's LAYER/SLUG (`drafts/launch`, as `mem conflicts` names it); a bare `x.md` that is no file at the root at any of `seqs`, the page
        `mem page write x.md` writes, mind/x.md: a page is shown by the names it is written by; a file of adf_files
        by the name it has but for letter case or Unicode normalization (one name on macOS), when no file has the
        name as typed."""
        if not path.strip():
            raise InvalidInput("give a file: mind.md, mind/log.md, a page's path or its slug, or another file's path")
        if path.endswith("/"):
            raise InvalidInput(f"{path} is a folder: give a file in it (`mem file list` and `mem page list` name them)")
        path = self.relative(path)
        if path == "mind":
            return MIND_PATH
        if "/" not in path and "." not in path or path.startswith("mind/") and "." not in path[5:] and "/" not in path[5:]:
            return f"mind/{path.removeprefix('mind/')}.md"
        layer, _, slug = path.partition("/")
        placed = self.views.last_placed(layer, seqs[0] if seqs else None) if "." not in path and slug \
            and "/" not in slug else None  # a layer dropped since too (nc32b: "drafts/plan never existed")
        if placed is not None and placed[0].format == "pages":  # `drafts/launch`, as conflicts say
            return self.views.shared_path(layer, slug, placed[1]) or path
        if "/" in path:  # `notes/café.md` typed in NFC for the file written in NFD: rendered only when a twin exists
            twin = self.views.file_twin(path) if seqs and not slug_of(path) and path != LOG_PATH else None
            return twin if twin and not any(self.show(path, s) is not None for s in seqs) else path
        if not path.endswith(".md") or path == MIND_PATH or any(self.show(path, s) is not None
                                                                 for s in (*seqs, self.checkpoint())):
            return path  # a root file then, or now (not yet then: said of the name asked for, nc19b)
        return f"mind/{path}"

    def show(self, path: str, as_of: int) -> str | None:
        """Any file as of a seq: the wiki, a layer's file, or one of adf_files (which stay off the disk)."""
        from .audit import file_text

        return file_text(self.views, path, as_of)

    def checkout(self, target: Path, as_of: int, *, force: bool = False) -> Checkout:
        """Writes every file as of a seq into `target`: never inside a workspace (a watcher there
        would record the old files as new edits, and a link may lead there), never into a non-empty directory unless
        `force`, never through a link below `target` that leads out of it (into another workspace). What was in
        the directory already and that moment does not hold is left there, and told (`Checkout.left`): a checkout
        deletes nothing."""
        target = Path(target).resolve()
        around = Workspace.around(target)
        if around is not None:
            raise InvalidInput(f"{target} is inside the workspace {around.root}; check out into a new directory")
        unfit = _not_for_a_checkout(target, self.root)  # first: "pass --force" would lead to this (nc33b)
        if unfit is not None:
            raise InvalidInput(f"{target} is {unfit}; check out into a directory of its own")
        if not force and target.is_dir() and any(target.iterdir()):
            raise InvalidInput(f"{target} is not empty; pick a new directory or pass --force to write into it")
        if target.exists() and not target.is_dir():
            raise InvalidInput(f"{target} is a file, not a directory")
        paths, folders = self.views.paths(as_of), {}
        try:
            files = [(path, validate.inside_workspace(target, path, folders)) for path in paths]
        except UnsafePath as exc:
            raise UnsafePath(f"{target}: {str(exc).replace('the workspace', 'the directory')}; nothing written") from None
        there, more_left = _files_under(target) if target.is_dir() else ([], False)
        left = sorted(set(there) - set(paths))
        for path, file in files:  # before anything is written: a checkout cut short halfway is no moment
            try:
                refuse_in_the_way(target, path)
            except InTheWay:
                stands = "a directory stands where the checkout writes a file" if file.is_dir() else \
                    "a file stands where the checkout needs a folder"
                raise InvalidInput(f"{file}: {stands}; nothing written") from None
        try:
            for path, file in files:
                write_atomic(file, self.views.file_chunks(path, as_of))
        except (NotADirectoryError, FileExistsError) as exc:
            raise InvalidInput(f"{exc.filename}: a file stands where a directory must be") from None
        except IsADirectoryError as exc:
            raise InvalidInput(f"{exc.filename2 or exc.filename}: a directory stands where the checkout writes a file"
                               ) from None
        except OSError as exc:
            raise StorageFailure(f"{target}: the checkout cannot be written there ({exc.strerror or exc})") from None
        return Checkout(written=paths, left=left, more_left=more_left)

    # --- reads: what the CLI prints ---------------------------------------------------------------

    def head(self) -> int:
        return self.log.head()

    def first_recorded_at(self) -> int | None:
        """When the log's first event was recorded (ms), or None while the log is empty."""
        return self.log.recorded_at(1) if self.log.head() else None

    def past_instant(self, at: str) -> int:
        """`eventstore.instants.past_instant` of a typed moment, no later than this log's newest recorded time
        counting as past, though a clock set back since is behind it."""
        head = self.log.head()
        return past_instant(at, latest_ms=self.log.recorded_at(head) if head else None)

    def moment(self, at: str) -> Moment:
        """What a typed moment (`--at`, a tool's `at`) means: its instant and the seq then. A moment before
        the first event is refused: that is no memory, not an empty one."""
        at_ms = self.past_instant(at)
        first = self.first_recorded_at()
        if first is None or at_ms < first:
            since = f"its first event is at {format_local(first)}" if first is not None else "its log is empty"
            raise InvalidInput(f"{at!r} ({format_local(at_ms)}) is before {self.called} existed ({since})")
        return Moment(at_ms=at_ms, seq=self.seq_at(at_ms))

    def checkpoint(self) -> int:
        """The seq the views (and the files, unless deferred) have caught up to."""
        return self.views.checkpoint()

    # --- reads for the web view -----------------------------------------------------------------

    def recorded_at(self, seq: int) -> int | None:
        """When this log recorded the event at `seq` (ms), None past the head."""
        return self.log.recorded_at(seq)

    def event_rows(self, after: int, until: int, **filters):
        """Raw rows of the log between two seqs (the log's own filters: kinds, layers, agent, order, limit)."""
        return self.log.read_rows(after, until, **filters)

    def activity(self):
        """The per-bucket event counts, caught up with the views first. On storage this process cannot write,
        a copy in memory of what the views counted is caught up instead (the views cannot take a row)."""
        if not read_only(self.views.db):
            self.views.activity.catch_up(self.log, self.checkpoint(), self.views.transaction)
            return self.views.activity
        if getattr(self, "_activity_apart", None) is None:
            self._activity_apart = Activity.copied(self.views.db)
        self._activity_apart.catch_up(self.log, self.checkpoint(), lambda: self._activity_apart.db)
        return self._activity_apart

    def page_text(self, slug: str, as_of: int | None = None) -> str | None:
        """A wiki page's file as of a seq."""
        return self.views.page(slug, as_of)

    def shared_listing(self, as_of: int, layers: set[str] | None = None) -> list[str]:
        """The shared files with a version by `as_of` (in `layers` only, when given)."""
        return self.views.shared_listing(as_of, layers)

    def contract_as_of(self, as_of: int):
        """The contract then: the hub's this agent had taken, with the local layers declared by `as_of`."""
        return self.views.contract_at(as_of)

    def layer_of(self, path: str, as_of: int | None = None, since_start: bool = False) -> str:
        """The shared layer a file belongs to as of a seq (now: None), placed by the contract in force then ("" for
        the agent's own files); `since_start`: the layer whose file was last at `path` by then (`Views.tenure`: a
        moved layer's old path is still its file's, for its history)."""
        if not self.views.contract:
            return ""
        if since_start and as_of is not None:
            held = self.views.tenure(path, as_of)
            return held[0] if held else ""
        target = self.views.shared_target(path, as_of)
        return target[0] if target else ""

    def path_changed(self, event: Event) -> str | None:
        """The file an event changed, when it names one."""
        body = event.body
        if isinstance(body, (AlwaysAdd, AlwaysRemove)):
            return MIND_PATH
        slug = getattr(body, "new", None) or getattr(body, "slug", None)
        if event.layer == MIND:
            return page_path(slug) if slug else None
        shared = self.views.shared_path(event.layer, slug, event.seq)
        return shared if shared is not None else getattr(body, "path", None)

    def file_text(self, path: str, as_of: int | None = None) -> str | None:
        """Any file's text as of a seq: the wiki's, a shared layer's, or one in adf_files."""
        return audit.file_text(self.views, path, as_of)

    def binary_file(self, path: str, as_of: int | None = None) -> bytes | None:
        """The bytes of one of adf_files as of a seq when they are no UTF-8 text (which `file_text` shows as a
        placeholder, `<100 bytes of image/png>`), else None."""
        row = None if self.views.file_text(path, as_of) is not None else self.views.file(path, as_of)
        if row is None:
            return None
        try:
            bytes(row[1]).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(row[1])
        return None

    def events(self, *, kinds=None, layers=None, since_ms: int | None = None, limit: int | None = None) -> list[Event]:
        """Events oldest first, filtered; with `limit`, the newest `limit` of them."""
        for layer in layers or ():
            self.logged_layer(layer)
        for kind in kinds or ():
            if kind not in KINDS:
                raise NotFound(f"there is no event kind {kind!r} (kinds: {', '.join(sorted(KINDS))})")
        if limit is not None and limit < 0:
            raise below_zero("n", limit)
        found = list(self.log.read(kinds=kinds, layers=layers, since_ms=since_ms, limit=limit,
                                   newest_first=limit is not None))
        return sorted(found, key=lambda e: e.seq)

    def verify(self, progress=None, cursors: dict[str, int] | None = None) -> VerifyReport:
        """The log's own checks, then the log against the views' anchor and the given cursors."""
        from .integrity import verify

        return verify(self, progress=progress, cursors=cursors)

    def catalog(self, as_of: int | None = None) -> list[CatalogPage]:
        return [CatalogPage(slug=s, title=t, hook=h) for s, t, h in self.views.catalog(as_of)]

    def loop(self, loop: str | None = "main", as_of: int | None = None) -> list[audit.LoopMessage]:
        """The live loop (main, or one that ever had a message; a mistyped name is refused)."""
        if loop not in (None, "main") and loop not in (names := self.views.loop_names()):
            raise NotFound(f"there is no loop {loop!r} (loops: {', '.join(sorted({'main', *names}))})")
        if as_of is not None and loop not in (None, "main") and (began := self.views.loop_began(loop)) > as_of:
            raise NotFound(f"loop {loop!r} did not exist then: its first message is seq {began}, after seq {as_of}")
        return audit.loop_rows(self.views, loop, as_of)

    def messages(self, box: str, as_of: int | None = None) -> list[dict]:
        """The inbox's or the outbox's messages as of a seq, in the order they came (adf_inbox's or adf_outbox's
        columns)."""
        if box not in adf.MESSAGE_COLUMNS:
            raise InvalidInput(f"there is no box {box!r}: inbox or outbox")
        return [dict(zip(adf.MESSAGE_COLUMNS[box], row)) for row in self.views.messages(box, as_of)]

    def files(self, as_of: int | None = None) -> list[tuple]:
        """adf_files rows (path, content, mime_type, size, protection, authorized, created_at, updated_at)."""
        return self.views.adf_files(as_of)

    def file_paths(self, as_of: int | None = None) -> list[str]:
        """The paths of the agent's own files in adf_files (not the wiki's, nor a layer's) as of a seq."""
        return self.views.file_paths(as_of)

    def agent_config(self, as_of: int | None = None) -> dict:
        return self.views.config(as_of)

    def audit_rows(self, source: str | None = None, as_of: int | None = None) -> list[audit.AuditRow]:
        return audit.audit_rows(self.views, source, as_of)

    def audit_read(self, seq: int, loop: str | None = None) -> audit.AuditHit:
        return audit.audit_read(self.views, self.log, seq, loop)

    def cite(self, citation: str, as_of: int | None = None) -> audit.Citation:
        return audit.cite(self.views, self.log, citation, as_of)

    def believed(self, as_of: int, last: int = 10, **trust_options) -> audit.Believed:
        if last < 0:
            raise below_zero("last", last)
        return audit.believed(self.views, as_of, last, **trust_options)

    def event(self, seq: int) -> Event | None:
        return self.log.get_by_seq(seq)

    def search(self, query: str, *, within: set[str] | None = None, **filters) -> list:
        """`within`: the only layers searched, those a reader may see (a hub token's), taken as they are (a layer
        shared once is searched as of then, though the contract now drops it); an empty set finds nothing. Filtered
        in the query, before the limit: hits in other layers would otherwise push the reader's out."""
        from . import search

        for layer in filters.get("layers") or ():
            self.logged_layer(layer)
        if filters.get("limit", 1) < 1:  # 0 said "no matches", as if nothing matched
            raise InvalidInput(f"-n must be 1 or more (how many hits to show), not {filters['limit']}",
                               for_tools=f"n must be 1 or more (how many hits to show), not {filters['limit']}")
        if within is not None:
            filters["layers"] = sorted(within)
            filters["limit"] = filters.get("limit", 10) if within else 0
        return search.search(self.views, query, self_agent=self.config.agent, **filters)

    def local_layers(self) -> set[str]:
        """The names of the layers this agent declared for itself: never pushed, never taken from a hub."""
        return self.views.local_layers()

    def once_local(self) -> dict[str, list[tuple[int, int]]]:
        """The layers this agent declared for itself and then un-declared by redacting the declaration, each with the
        seq spans (declaration, redaction) in which it was the agent's own: what it wrote to the layer then stays its
        own for good, never pushed, though a hub layer of that name is now taken (a push that went by the
        declarations in force shipped those entries)."""
        spans: dict[str, list[tuple[int, int]]] = {}
        prefix = CONFIG_KEY_PREFIXES[0]
        for event in self.log.read(kinds=["config.set"], layers=[AGENT], agent=self.config.agent):
            key = event.body.kept.get("key") if type(event.body) is Redacted else None
            if isinstance(key, str) and key.startswith(prefix):
                redaction = self.log.get(event.body.by)
                ended = redaction.seq if redaction is not None and redaction.seq is not None else self.log.head() + 1
                spans.setdefault(key.removeprefix(prefix), []).append((event.seq, ended))
        return spans

    def not_taken(self) -> dict[str, str]:
        """The hub's layers (as last pulled) a local layer shadows, each with why (`local_layers.shadowed`): this
        agent neither renders nor takes them."""
        hub = self.hub_contract()
        if hub is None:
            return {}
        return local_layers.shadowed(hub.layers, local_layers.declared(self.views.config(), self.config.agent))

    def blocked(self) -> dict[str, str]:
        """The agent's own files at a path where the contract places a layer's file (`Views.blocked`), each with what
        that means and how to let the layer's file in, in the words of who reads this memory (`told`: nc36b, the MCP
        sync tool's warnings named `mem file delete`)."""
        contract, said = self.views.contract, {}
        for path, layer in self.views.blocked().items():
            folder = contract.layers[layer].path if contract and layer in contract.layers else path
            where = (f"layer {layer!r} is placed at {path}, where this agent's own file is" if folder == path else
                     f"layer {layer!r} has its folder {folder} where this agent's own file {path} is")  # nc36b: it
            quoted = shlex.quote(path)  # named a page the layer does not have
            said[path] = (f"{where}: the layer's file is not written there and view of /memories/{path} shows the "
                          "agent's file, until the delete tool removes it (to keep it, rename it first to a path "
                          "outside the layer)" if self.told == "tools" else
                          f"{where}: the layer's file is not written there and `mem show {quoted}` answers the agent's "
                          f"file, until `mem file delete {quoted}` (to keep it, first `mem show {quoted} | mem file "
                          "write OTHER-PATH --file -`)")
        return said

    def layers(self) -> list[dict]:
        """Every layer this workspace renders: the hub's (as last pulled) and its own (`local`); then the hub's
        layers a local one shadows (`not_taken`: why), which it does not."""
        local, agent = self.local_layers(), self.config.agent
        contract, hub, not_taken = self.views.contract, self.hub_contract(), self.not_taken()
        rendered = [{"layer": name, "path": spec.path, "format": spec.format, "local": name in local,
                     "produces": produces(contract, agent, name), "consumes": consumes(contract, agent, name)}
                    for name, spec in sorted((contract.layers if contract else {}).items())]
        return rendered + [{"layer": name, "path": hub.layers[name].path, "format": hub.layers[name].format,
                            "local": False, "produces": False, "consumes": False, "not_taken": why}
                           for name, why in not_taken.items()]

    def entries(self, layer: str, as_of: int | None = None) -> list:
        self.shared_layer(layer, "entries", produce=False)
        return self.views.shared.entries(layer, self.views.checkpoint() if as_of is None else as_of)

    def produces(self, layer: str) -> bool:
        """Whether this agent produces `layer` under the hub's contract as last pulled."""
        contract = self.views.contract
        return contract is not None and produces(contract, self.config.agent, layer)

    def not_consumed(self, layer: str) -> str | None:
        """Why this workspace holds only the agent's own events of `layer` (it does not consume it under the contract
        as last pulled), or None: a listing of it is then no picture of what the hub holds."""
        contract = self.views.contract
        if contract is None or layer not in contract.layers or consumes(contract, self.config.agent, layer):
            return None
        return (f"agent {self.config.agent!r} does not consume layer {layer!r} under the contract as last pulled: its "
                "pulls bring none of the layer's new events, so what is here is what this agent wrote and what it "
                "pulled before, not what the hub holds")

    def conflicts(self) -> list:
        """The conflicts open now, in the layers placed now: one left in a layer the contract dropped since is no
        one's to resolve (its past stays in the log, and `--seq` reads it)."""
        placed = set(self.views.contract.layers if self.views.contract else ()) | set(self.local_layers())
        return [c for c in self.views.shared.conflicts(self.views.checkpoint()) if c.layer in placed]

    def status(self):
        from .status import workspace_status

        return workspace_status(self)
