"""`mem replay`: delete every view and rebuild it from the log, or check that a rebuild agrees."""

import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

import msgspec

from eventstore.errors import HandEdited

from . import bulk
from .materialize import FileReport, Prechecks, file_hash, materialize, remove_stale_temp_files
from .views import Views


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
           progress=None, heads: Iterable[int] | None = None, child=None, expected: int | None = None) -> ReplayReport:
    """Rebuilds the views into a new file, swaps it in, and rewrites the workspace files from it.

    A file edited by hand (its bytes neither what was last written nor what the rebuild says)
    stops the replay before anything changes, unless `force`; with `keep_hand_edits` (a refresh
    that must rebuild) such files are left as they are and reported, as a refresh does. `heads` and
    `child`: a build that follows a log still growing (see `_build`), `expected` the seq it is expected to reach.
    """
    if upto is not None:
        memory.seq_at(seq=upto)
    with memory.lock():
        remove_stale_temp_files(memory.views, memory.root)  # a replay killed while it wrote files left them
        carried = memory.views.written.hashes()
        target = memory.ws.views_path
        rebuilt = Path(f"{target}.rebuild")
        seen = {}  # the files' hashes on disk, read once for both passes
        checks = Prechecks(memory.root, carried, seen, rebuilt)  # begun as the fold ends
        laps = bulk.LAPS
        laps.begin()
        try:
            views = _build(memory, rebuilt, upto, progress, heads, child, folded=checks.start, expected=expected)
            with views.transaction():
                views.written.carry(carried)
            rendered = checks.join()
            laps.lap("prechecks")
            refused = materialize(views, memory.root, force=force, dry_run=True, seen=seen, settle=True,
                                  rendered=rendered).refused
            laps.lap("dry run")
            checkpoint = views.checkpoint()
            views.close()
        finally:
            checks.finish()
        if refused and not keep_hand_edits:
            rebuilt.unlink()
            raise HandEdited(f"{', '.join(refused)} edited by hand; a replay would overwrite it. "
                             "Keep the edit with `mem page write`, or pass --force")
        with open(rebuilt, "rb+") as f:
            os.fsync(f.fileno())
        laps.lap("fsync")
        memory.views.close()
        for stale in (Path(f"{target}-wal"), Path(f"{target}-shm")):
            stale.unlink(missing_ok=True)
        _replace(rebuilt, target)
        memory.swap_views(Views(target, contract=memory.hub_contract(), agent=memory.config.agent))
        laps.lap("swap")
        files = materialize(memory.views, memory.root, force=force, seen=seen)
        laps.lap("materialize")
        laps.dump()
    return ReplayReport(checkpoint=checkpoint, events=memory.log.count(checkpoint), files=files)


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


def check(memory, *, progress=None) -> CheckReport:
    """Rebuilds into a temporary directory, as far as the views have come, and lists every file or view row
    that differs. There is no `upto`: the views and the files hold only their latest state, so a rebuild of
    an earlier moment would differ from them in everything that happened since.

    Views behind the log (a command cut off before it folded what it appended) are caught up first, as the next
    command would: compared where they stood, they were "no differences" at seq 0 after an import cut off, and
    "DIFFERENT" after a redaction cut off (the log had removed bodies the views still held until then)."""
    behind = memory.views.checkpoint()
    if memory.head() != behind:
        memory.refresh(files=False)
    else:
        behind = None
    with tempfile.TemporaryDirectory(prefix="mem-replay-check-") as tmp:
        views = _build(memory, Path(tmp) / "views.db", memory.views.checkpoint(), progress)
        out = Path(tmp) / "files"
        with views.transaction():
            views.written.track(views.paths())
        materialize(views, out)
        differences, waiting = [], []
        current_paths = set(memory.views.paths())
        owed = {path for path, _hash in memory.views.written.dirty()}
        for path in sorted(current_paths | set(views.paths())):
            if file_hash(memory.root / path) != file_hash(out / path):
                if path in owed:
                    waiting.append(path)
                else:
                    differences.append(f"file {path} differs from a rebuild")
        ours, theirs = memory.views.dump(), views.dump()
        for table in ours:
            if ours[table] != theirs[table]:
                differences.append(f"view table {table} differs from a rebuild")
        checkpoint = views.checkpoint()
        views.close()
    return CheckReport(checkpoint=checkpoint, same=not differences, differences=differences, not_yet_written=waiting,
                       caught_up_from=behind)
