"""`mem replay`: delete every view and rebuild it from the log, or check that a rebuild agrees."""

import contextlib
import fcntl
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from eventstore import validate
from eventstore.errors import Damaged, HandEdited, StorageFailure, UnsafePath
from eventstore.sqlite import SQLiteLog
from eventstore.workspace import LOG_AS_IS

from . import bulk
from .materialize import FileReport, Prechecks, file_hash, hand_edited, materialize, remove_stale_temp_files
from .views import Views, rows_digest


class ReplayReport(msgspec.Struct):
    checkpoint: int
    events: int
    files: FileReport | None = None


class CheckReport(msgspec.Struct):
    checkpoint: int
    same: bool
    differences: list[str]
    not_yet_written: list[str] = []  # files whose write the views still owe (a command interrupted): no difference
    caught_up_from: int | None = None  # the views' seq before the check caught them up (a command was cut off)


def _build(memory, path: Path, upto: int | None, progress, heads: Iterable[int] | None = None, child=None,
           folded=None, expected: int | None = None) -> Views:
    """`bulk.build` for a workspace: the contract (with the local layers the rebuilt config declares) places
    the shared layers' files. While the log still grows (a catch-up appending pages, in another thread),
    `heads` are the heads to fold up to one after another, and the build runs in a process of its own (`child`
    when one was started ahead, `bulk.spawn_builder`), which reads the log itself (`bulk.build_apart`): the
    appends keep this process's GIL. `folded`: see `bulk.build` (a build in this process only); `expected`: see
    `bulk.build` (with `heads`)."""
    if heads is not None:
        views = bulk.build_apart(memory.root, path, contract=memory.hub_contract(), agent=memory.config.agent,
                                 upto=upto, heads=heads, progress=progress, child=child, expected=expected)
    else:
        views = bulk.build(memory.log, path, contract=memory.hub_contract(), agent=memory.config.agent,
                           upto=upto, progress=progress, folded=folded)
    views.set_contract(memory.hub_contract())
    return views


def replay(memory, upto: int | None = None, *, force: bool = False, keep_hand_edits: bool = False,
           progress=None, heads: Iterable[int] | None = None, child=None, expected: int | None = None,
           log_as_is: bool = False) -> ReplayReport:
    """Rebuilds the views into a new file, swaps it in, and rewrites the workspace files from it.

    A file edited by hand (its bytes neither what was last written nor what the rebuild says)
    stops the replay before anything changes, unless `force`; with `keep_hand_edits` (a refresh
    that must rebuild) such files are left as they are and reported, as a refresh does. `heads` and
    `child`: a build that follows a log still growing (see `_build`), `expected` the seq it is expected to reach.
    Views the log cannot have given (`Memory.witnesses`: the log lost events at its end, or it is not their log) are
    the only evidence of it: the replay refuses to rebuild over them unless `log_as_is`.
    """
    if upto is not None:
        memory.seq_at(seq=upto)
    with memory.lock():
        if not log_as_is:
            try:
                memory.witnesses(rebuild=True)
            except Damaged as exc:
                raise Damaged(f"{exc}{LOG_AS_IS}") from None
        remove_stale_temp_files(memory.views, memory.root)  # a replay killed while it wrote files left them
        remove_leftovers(memory.ws)
        carried, landings = memory.views.written.hashes(), memory.views.written.landings()
        target = memory.ws.views_path
        rebuilt = _rebuilt(memory.ws)
        seen = {}  # the files' hashes on disk, read once for both passes
        checks = Prechecks(memory.root, carried, seen, rebuilt)  # begun as the fold ends
        laps = bulk.LAPS
        laps.begin()
        counted = None
        try:
            views = _build(memory, rebuilt, upto, progress, heads, child, folded=checks.start, expected=expected)
            with views.transaction():
                views.written.carry(carried)
                views.written.carry_landings(landings)
            rendered = checks.join()
            laps.lap("prechecks")
            refused = materialize(views, memory.root, force=force, dry_run=True, seen=seen, settle=True,
                                  rendered=rendered).refused
            laps.lap("dry run")
            checkpoint = views.checkpoint()
            counted = _counting(memory.log, checkpoint)
            views.close()
        except BaseException:
            _settled(counted)
            remove_leftovers(memory.ws)  # a build that failed (a full disk) keeps no room
            raise
        finally:
            checks.finish()
        try:
            if unsafe := _unsafe(memory.root, refused):  # no --force writes there: not said to be edited by hand
                rebuilt.unlink()  # (nc17a)
                more = f"; and {len(unsafe) - 3} more" if len(unsafe) > 3 else ""
                raise UnsafePath(f"{'; '.join(unsafe[:3])}{more}: a replay writes no file there, --force neither (the "
                                 "views are as they were)")
            if refused and not keep_hand_edits:
                rebuilt.unlink()
                raise HandEdited(f"{memory.hand_edited_message(refused)} (a replay would overwrite "
                                 f"{'it' if len(refused) == 1 else 'them'}; `mem replay --force` does)", refused)
            with open(rebuilt, "rb+") as f:
                os.fsync(f.fileno())
            laps.lap("fsync")
            memory.views.close()
            for stale in (Path(f"{target}-wal"), Path(f"{target}-shm")):
                stale.unlink(missing_ok=True)
            _replace(rebuilt, target)
            memory.swap_views(Views(target, contract=memory.hub_contract(), agent=memory.config.agent))
            laps.lap("swap")
            files = materialize(memory.views, memory.root, force=force, seen=seen, into_gone=True)
        except BaseException:
            _settled(counted)
            raise
        laps.lap("materialize")
        laps.dump()
    return ReplayReport(checkpoint=checkpoint, events=counted(), files=files)


def _settled(counted: Callable[[], int] | None) -> None:
    """Waits for a count begun by `_counting` to end, its answer or failure dropped: a replay that fails or is
    interrupted after it began leaves it reading the log's connection, which the caller closes next (a segfault of an
    interrupted replay, once, under load)."""
    if counted is not None:
        with contextlib.suppress(BaseException):
            counted()


def _counting(log, upto: int) -> Callable[[], int]:
    """`log.count(upto)` begun in a thread now (SQLite counts without the GIL, while the views are swapped in and the
    files written: a million rows take half a second), its answer waited for by the function returned. A log of
    another backend is counted when asked (its connection is not this thread's to share)."""
    if not isinstance(log, SQLiteLog):
        return lambda: log.count(upto)
    found: list = []

    def count() -> None:
        try:
            found.append(log.count(upto))
        except BaseException as exc:  # noqa: BLE001 - raised where it is waited for
            found.append(exc)

    thread = threading.Thread(target=count, name="count", daemon=True)
    thread.start()

    def counted() -> int:
        thread.join()
        if isinstance(found[0], BaseException):
            raise found[0]
        return found[0]
    return counted


def _replace(rebuilt: Path, target: Path) -> threading.Thread | None:
    """`os.replace`, the old file freed in the background (the thread returned): the rename drops its last name,
    and the file system frees its blocks (a 500 MB file: 0.15 s) when that thread closes a descriptor kept open
    for it meanwhile."""
    try:
        old = os.open(target, os.O_RDONLY) if os.name == "posix" else None
    except FileNotFoundError:
        old = None
    os.replace(rebuilt, target)
    if old is None:
        return None
    freeing = threading.Thread(target=os.close, args=(old,), name="free old views", daemon=True)
    freeing.start()
    return freeing


CHECK_PREFIX = "views.db.check-"
"""The scratch directory of `check`, in .mem/ beside the views: a check killed mid-way leaves a whole rebuilt
memory there, where the next command that takes the projector lock (`remove_leftovers`) removes it."""


def _rebuilt(ws) -> Path:
    """Where a replay builds the new views (and `bulk.build` the fold's scratch file, `-fold` after it)."""
    return Path(f"{ws.views_path}.rebuild")

FTS_TABLES = {"search_docs_fts": "search_docs_fts_docsize", "search_history_fts": None}
"""The full-text indexes `check` compares, each with its table of document sizes (search_history_fts keeps none)."""


def remove_leftovers(ws) -> None:
    """What rebuilds killed mid-way left in .mem/ (the caller holds the projector lock): a replay's new views and
    its fold's scratch file with their journals, which only a replay holding that lock writes, and the scratch
    directories of checks no running check holds (`_claim`). On a full disk they hold the room a write needs."""
    for leftover in _rebuild_files(ws):
        leftover.unlink(missing_ok=True)
    for scratch in _check_dirs(ws):
        try:
            held = _claim(scratch, wait=False)
        except OSError:  # removed meanwhile, or no directory
            continue
        if held is not None:
            try:
                shutil.rmtree(scratch, ignore_errors=True)
            finally:
                os.close(held)


def lock_free(ws) -> bool:
    """Whether no process holds the projector lock (none is writing files or views now)."""
    return _free(ws.lock_path)


def leftovers(ws) -> list[Path]:
    """What `remove_leftovers` would remove now, for a command that takes no lock (`mem status`): a replay's files
    while no process holds the projector lock (a running replay holds it throughout), a check's directory while no
    running check holds it."""
    return [*(_rebuild_files(ws) if _free(ws.lock_path) else []), *filter(_free, _check_dirs(ws))]


def _rebuild_files(ws) -> list[Path]:
    rebuilt = _rebuilt(ws)
    return sorted(rebuilt.parent.glob(f"{rebuilt.name}*"))


def _check_dirs(ws) -> list[Path]:
    return sorted(ws.mem_dir.glob(f"{CHECK_PREFIX}*"))


def _free(path: Path) -> bool:
    """Whether no process holds `path`'s lock (a path that is gone, or cannot be opened, holds none)."""
    try:
        held = _claim(path, wait=False)
    except OSError:
        return True
    if held is None:
        return False
    os.close(held)
    return True


def _claim(directory: Path, *, wait: bool = True) -> int | None:
    """A descriptor of `directory` holding its lock (flock, released when the process ends, however it ends), or
    None when another process holds it and `wait` is False."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _scratch(memory) -> Iterator[Path]:
    """A new scratch directory for a check, removed when the check ends. In .mem/ it is made and locked under the
    projector lock, where nothing removes it between the two, and stays locked while the check runs: a replay or
    any command in another process (`remove_leftovers`) leaves it. On storage this process cannot write, a
    temporary directory."""
    try:
        with memory.lock():
            remove_leftovers(memory.ws)
            scratch = Path(tempfile.mkdtemp(prefix=CHECK_PREFIX, dir=memory.ws.mem_dir))
            held = _claim(scratch)
    except (OSError, StorageFailure):
        scratch, held = Path(tempfile.mkdtemp(prefix=f"mem-replay-{CHECK_PREFIX}")), None
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if held is not None:
            os.close(held)


class _Moment(msgspec.Struct):
    """What the check compares of the live views, read in one read transaction: at one seq."""
    checkpoint: int
    tables: dict
    terms: dict
    paths: set
    owed: set
    written: dict


def _file_state(views: Views) -> dict:
    return {path: (written, dirty) for path, written, dirty in
            views.db.execute("SELECT path, written_hash, dirty FROM file_state")}


def _index_terms(db, table: str, sizes: str | None) -> tuple | str:
    """Each term of a full-text index with the number of its documents and occurrences (fts5vocab), hashed, and the
    count and total size of its documents' sizes, or what is wrong with the index: the row tables behind it may be
    intact while it is damaged or emptied. Called in a transaction, whose end drops the vocabulary table again."""
    vocab = f"temp.{table}_terms"
    try:
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {table}, row)")
        return (rows_digest(db.execute(f"SELECT term, doc, cnt FROM {vocab} ORDER BY term")),
                sizes and db.execute(f"SELECT count(*), sum(length(sz)) FROM {sizes}").fetchone())
    except sqlite3.DatabaseError as exc:
        return f"damaged ({' '.join(str(exc).split())})"


def _moment(views: Views) -> _Moment:
    """The live views as they are at one seq (one read transaction: writers go on meanwhile)."""
    views.db.execute("BEGIN")
    try:
        return _Moment(checkpoint=views.checkpoint(), tables=views.digests(),
                       terms={table: _index_terms(views.db, table, sizes) for table, sizes in FTS_TABLES.items()},
                       paths=set(views.paths()), owed={path for path, _hash in views.written.dirty()},
                       written=_file_state(views))
    finally:
        views.db.execute("ROLLBACK")


def check(memory, *, progress=None) -> CheckReport:
    """Rebuilds into a scratch directory, as far as the views have come, and lists every file or view row
    that differs. There is no `upto`: the views and the files hold only their latest state, so a rebuild of
    an earlier moment would differ from them in everything that happened since.

    Views behind the log (a command cut off before it folded what it appended) are caught up first, as the next
    command would: compared where they stood, they were "no differences" at seq 0 after an import cut off, and
    "DIFFERENT" after a redaction cut off (the log had removed bodies the views still held until then).

    The live views are read at one seq, and the rebuild goes to that seq: other processes may write meanwhile
    (a file they rewrote since is no difference). Hand edits are told as such."""
    behind = memory.views.checkpoint()
    if memory.head() != behind:
        memory.refresh(files=False)
    else:
        behind = None
    live = _moment(memory.views)
    with _scratch(memory) as scratch:
        views = _build(memory, scratch / "views.db", live.checkpoint, progress)
        try:
            return _compare(memory, live, views, scratch / "files", behind)
        finally:
            views.close()


def _file_difference(on_disk: Path, rebuilt: Path, path: str, edited: bool) -> str:
    if not on_disk.exists():
        return f"file {path} is missing (`mem replay` writes it)"
    if not rebuilt.exists():
        return f"file {path} is not in a rebuild" + (" (edited by hand)" if edited else "")
    return f"file {path} differs from a rebuild" + (" (edited by hand)" if edited else "")


def _compare(memory, live: _Moment, views: Views, out: Path, behind: int | None) -> CheckReport:
    with views.transaction():
        views.written.track(views.paths())
    materialize(views, out)
    differences, waiting = [], []
    for path in sorted(live.paths | set(views.paths())):
        if file_hash(memory.root / path) != file_hash(out / path):
            if path in live.owed:
                waiting.append(path)
            else:
                differences.append(path)
    moved_on = _file_state(memory.views)  # read after the files: a file rewritten since `live` changed its row
    edited = set(hand_edited(memory.views, memory.root, differences))
    said = [_file_difference(memory.root / path, out / path, path, path in edited) for path in differences
            if path in edited or moved_on.get(path) == live.written.get(path)]
    theirs = views.digests()
    said += [f"view table {table} differs from a rebuild" for table in live.tables if live.tables[table] != theirs[table]]
    views.db.execute("BEGIN")
    try:
        for table, sizes in FTS_TABLES.items():
            ours = live.terms[table]
            if isinstance(ours, str):
                said.append(f"full-text index {table} is {ours}")
            elif ours != _index_terms(views.db, table, sizes):
                said.append(f"full-text index {table} differs from a rebuild")
    finally:
        views.db.execute("ROLLBACK")
    return CheckReport(checkpoint=views.checkpoint(), same=not said, differences=said, not_yet_written=waiting,
                       caught_up_from=behind)


def _unsafe(root: Path, paths: list[str]) -> list[str]:
    """Why each of `paths` that mindlog never writes is so (a link, a linked directory leading out of the workspace)."""
    found, folders = [], {}
    for path in paths:
        try:
            validate.inside_workspace(root, path, folders)
        except UnsafePath as exc:
            found.append(str(exc))
    return found
