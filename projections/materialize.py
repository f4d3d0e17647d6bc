"""Writing views out as files: atomically, only when bytes change, never over a hand edit."""

import contextlib
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import msgspec

from eventstore import validate
from eventstore.errors import UnsafePath

from .views import LOG_PATH, Views


class FileReport(msgspec.Struct):
    written: list[str] = []
    removed: list[str] = []
    refused: list[str] = []  # edited by hand: left as they are
    gone: list[str] = []  # due in a page folder moved aside (FoldersGone): not written until it is back

    @property
    def unwritten(self) -> list[str]:
        return [*self.refused, *self.gone]


class InTheWay(UnsafePath):
    """Something else holds a view's path: a directory where the file goes, or a file where one of its folders
    goes (open() says only `[Errno 21] Is a directory`)."""


def in_the_way(path: Path, error: OSError, files: int = 0) -> InTheWay:
    """`files`: how many files go under a file standing where their folder goes, said instead of `path`'s name."""
    if isinstance(error, IsADirectoryError):
        found = InTheWay(f"{path} is a directory where mindlog writes a file; move it away (`mem replay` then "
                         "writes the file)")
        found.blocking = path
        return found
    blocking = next((parent for parent in path.parents if parent.is_file()), path.parent)
    found = InTheWay(f"{blocking} is a file where mindlog needs a folder (for "
                     f"{f'{files} files' if files > 1 else path.name}); move it away (`mem replay` then writes the "
                     "files)")
    found.blocking = blocking
    return found


def refuse_in_the_way(root: Path, path: str) -> None:
    """Refuses, before anything is recorded, a write whose file could not be written: `in_the_way`'s two cases,
    for a file mindlog has not written yet too (one it wrote is caught by its hash as the write checks it)."""
    target = root / path
    if target.is_dir() and not target.is_symlink():
        raise in_the_way(target, IsADirectoryError())
    for parent in target.parents:
        if parent == root:
            break
        if parent.is_file():
            raise in_the_way(target, NotADirectoryError())


def file_hash(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        return None
    except (IsADirectoryError, NotADirectoryError) as error:
        raise in_the_way(path, error) from None


def stat_key(target: Path) -> tuple | None:
    """The file's inode, size and times: what changes when anything writes it (None: no file)."""
    try:
        stat = os.stat(target)
    except FileNotFoundError:
        return None
    except NotADirectoryError as error:
        raise in_the_way(target, error) from None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def disk_hash(target: Path, seen: dict | None = None, key: tuple | None = None) -> str | None:
    """`file_hash`, kept in `seen` (when given) with the file's inode, size and times: asked again while those
    have not changed, the hash is not read again (a replay checks every file before it swaps the views in, and
    once more as it writes them: forty megabytes of mind/log.md on a large log). `key`: its `stat_key`, when the
    caller has it already."""
    if seen is None:
        return file_hash(target)
    key = key or stat_key(target)
    if key is None:
        return None
    known = seen.get(target)
    if known is not None and known[0] == key:
        return known[1]
    digest = file_hash(target)
    seen[target] = (key, digest)
    return digest


def _write_temp(target: Path, chunks, sync: bool = True) -> tuple[Path, str]:
    """A temporary file beside `target` holding the chunks, fsynced unless the caller syncs it later."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.mem-tmp-{os.getpid()}"
    digest = hashlib.sha256()
    with _removed_if_stopped(lambda: [tmp]), open(tmp, "wb") as f:
        for chunk in chunks:
            data = chunk.encode("utf-8") if isinstance(chunk, str) else chunk
            digest.update(data)
            f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return tmp, digest.hexdigest()


@contextlib.contextmanager
def _removed_if_stopped(temporary):
    """The temporary files `temporary()` names are removed when what writes them stops on an error or Ctrl-C (a
    kill leaves them to `remove_stale_temp_files`); one renamed into place already is gone from its name."""
    try:
        yield
    except BaseException:
        for tmp in temporary():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _land(views: Views, staged: list[tuple], records: list[tuple], report: "FileReport") -> None:
    """Makes staged temporary files durable, then renames each over its target (to be recorded). The
    fsyncs run concurrently, so the file system commits them together: a catch-up that rewrites
    thousands of pages pays a few journal commits instead of one per page. A target written meanwhile (a hand
    edit since it was checked, during the fsyncs) is left as it is, and reported: renaming over it would lose
    that edit. Before any rename the new hashes are committed as landing (WrittenFiles.land): a process stopped
    between a rename and its record left a file that is mindlog's, whatever the views say by then."""
    if staged:
        views.written.land([(path, new_hash) for _tmp, _target, path, new_hash, *_rest in staged])
    if len(staged) > 1:
        with ThreadPoolExecutor(min(32, len(staged)), thread_name_prefix="fsync") as pool:
            list(pool.map(_fsync, [tmp for tmp, *_rest in staged]))
    elif staged:
        _fsync(staged[0][0])
    for tmp, target, path, new_hash, content, checked in staged:
        if stat_key(target) != checked:
            tmp.unlink()
            report.written.remove(path)
            report.refused.append(path)
            continue
        os.replace(tmp, target)
        records.append((target, path, new_hash, content))


def stale_temp_files(views: Views, root: Path) -> list[Path]:
    """Temporary files beside the files mindlog writes: left by a process stopped mid-write when no process holds
    the projector lock."""
    folders = {"mind", ""} | {os.path.dirname(path) for path in views.written.hashes()}  # strings: one per file
    return sorted(leftover for folder in map(root.joinpath, folders) for leftover in folder.glob(".*.mem-tmp-*"))


def remove_stale_temp_files(views: Views, root: Path) -> None:
    """Temporary files left by a process killed mid-write (the caller holds the projector lock)."""
    for leftover in stale_temp_files(views, root):
        leftover.unlink(missing_ok=True)


def write_atomic(target: Path, chunks) -> str:
    """Writes chunks (str or bytes) to a temporary file, fsyncs it, and renames it over `target`."""
    tmp, digest = _write_temp(target, chunks)
    os.replace(tmp, target)
    return digest


def hand_edited(views: Views, root: Path, paths=None, in_the_way: dict[str, InTheWay] | None = None) -> list[str]:
    """Files whose bytes on disk are not what mindlog last wrote there. With `in_the_way`, a file something stands in
    the way of (a file where its folder goes) is noted there, path -> InTheWay, not raised (`mem status` says it)."""
    found = []
    landings = views.written.landings()
    for path, written in views.written.hashes(paths).items():
        try:
            on_disk = file_hash(root / path)
        except InTheWay as exc:
            if in_the_way is None:
                raise
            in_the_way[path] = exc
            continue
        if on_disk is None or on_disk == written or on_disk == landings.get(path):
            continue
        chunks = views.file_chunks(path)
        if chunks is not None and _hash_chunks(chunks) == on_disk:
            continue  # written, but the process stopped before recording it
        found.append(path)
    return sorted(found)


def _hash_chunks(chunks) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.encode("utf-8"))
    return digest.hexdigest()


def written_hash(views: Views, path: str) -> str | None:
    """The sha256 of the bytes mindlog last wrote at `path` (None if it never wrote there)."""
    return views.written.hashes().get(path)


def record_adopted(views: Views, files: dict[str, bytes]) -> None:
    """The files' bytes were just recorded as versions: they are no longer hand edits, so the next
    materialisation may replace them (with the winner, if the new version is not it), and they are the base a
    later hand edit of a file was made on (`WrittenFiles.text`), not the file written before them. One transaction
    for them all (one each was a tenth of adopting 10,000 pages)."""
    if not files:
        return
    meta = views.wiki_files_meta(list(files))
    with views.transaction():
        for path, content in files.items():
            views.written.record(path, hashlib.sha256(content).hexdigest(), (content, len(content), *meta[path]))
        views.written.mark_dirty(list(files))


def page_folders(views: Views) -> list[str]:
    """The folders of pages: mind/, and each shared pages layer's (each ends in '/')."""
    return ["mind/"] + [spec.path for spec in (views.contract.layers.values() if views.contract else ())
                        if spec.format == "pages"]


class FoldersGone:
    """The page folders moved aside as a whole (a backup, an editor's move): gone from disk while pages mindlog
    wrote were in them (mind/log.md is no page: a mind/ that held it alone is made again). A file is not written into
    one: written, it would make the folder again holding that file alone, and the next `mem adopt` take the others
    for deleted (nc31a); `mem replay` writes them all again."""

    def __init__(self, views: Views, root: Path):
        self.views, self.root = views, root
        self.folders: list[str] | None = None
        self.gone: dict[str, bool] = {}

    def holds(self, path: str) -> str | None:
        """The folder gone that `path` is in, or None."""
        if self.folders is None:
            self.folders = page_folders(self.views)
        folder = next((f for f in self.folders if path.startswith(f)), None)
        if folder is None:
            return None
        if folder not in self.gone:
            self.gone[folder] = not (self.root / folder).is_dir() and self.views.written.any_under(folder, LOG_PATH)
        return folder if self.gone[folder] else None


def untracked(views: Views, root: Path) -> list[str]:
    """Files nobody asked mindlog to write: in mind/, and pages in the shared pages layers' folders."""
    known = views.written.hashes()
    found = []
    for folder in page_folders(views):
        if not (root / folder).is_dir():
            continue
        for entry in sorted((root / folder).iterdir()):
            rel = f"{folder}{entry.name}"
            if entry.name.startswith(".") or rel in known or (folder != "mind/" and not entry.name.endswith(".md")):
                continue
            found.append(rel)
    return found


class Prechecks:
    """What a replay's dry run (`materialize(dry_run=True, settle=True)`) reads of the files, worked out on a
    thread of its own while the rebuild finishes (its history writer's last batches, the merge): the hashes of the
    files on disk (`paths`, into `seen`) and of mind/log.md as the rebuilt views render it, rendered as the fold
    handed its entries to the writer (`bulk.LogBlocks`, from `bulk.build`'s `folded`). Nothing is written, and the
    dry run still renders and checks every file itself; a file changed on disk meanwhile is hashed again there
    (`disk_hash`). Beside it, another thread syncs the new views file (`sync`) as far as it is written, so that the
    replay's own fsync before the swap finds little left to write."""

    def __init__(self, root: Path, paths, seen: dict, sync: Path | None = None):
        self.root, self.paths, self.seen, self.sync = root, list(paths), seen, sync
        self.rendered: dict[str, str] = {}
        self.threads: list[threading.Thread] = []

    def start(self, log_blocks) -> None:
        """Begins, with mind/log.md's blocks (bulk.LogBlocks, closed when done)."""
        self.threads.append(threading.Thread(target=self._hash, args=(log_blocks,), name="prechecks", daemon=True))
        if self.sync is not None:
            self.threads.append(threading.Thread(target=self._sync, name="prechecks-sync", daemon=True))
        for thread in self.threads:
            thread.start()

    def _hash(self, log_blocks) -> None:
        try:
            folders = {}
            for path in self.paths:
                try:
                    disk_hash(validate.inside_workspace(self.root, path, folders), self.seen)
                except (UnsafePath, OSError):
                    continue
            digest = hashlib.sha256()
            for chunk in log_blocks.encoded():
                digest.update(chunk)
            self.rendered[LOG_PATH] = digest.hexdigest()
        finally:
            log_blocks.close()

    def _sync(self) -> None:
        with contextlib.suppress(OSError):  # the replay syncs it again, and reports what fails there
            _fsync(self.sync)

    def join(self) -> dict[str, str]:
        """The rendered files' hashes worked out ({} when the checks never started: a build in another process),
        once the files are hashed (the sync may go on)."""
        if self.threads:
            self.threads[0].join()
        return self.rendered

    def finish(self) -> None:
        """Waits for the sync too."""
        for thread in self.threads:
            thread.join()


HEADS_KEPT_FROM = 64
"""Files to bring up to date from which the shared pages' heads are read at once (SharedViews.heads_kept)."""


def materialize(views: Views, root: Path, *, force: bool | frozenset[str] = False, dry_run: bool = False,
                seen: dict | None = None, settle: bool = False, rendered: dict[str, str] | None = None,
                into_gone: bool = False) -> FileReport:
    """Brings every dirty file on disk (and its adf_files row) up to date with the views.

    A file whose disk bytes differ both from what was last written and from the new text was
    edited by hand: it is left alone (and reported) unless `force` (True, or a set that holds its path: what a
    write was told to overwrite, never another file edited by hand that happens to be due too). `dry_run` only
    lists what would be refused, rendering only the files edited by hand (a replay asks before it swaps the views in).
    `seen`: the hashes of the files on disk, kept from one call to the next (`disk_hash`). `settle` (with
    `dry_run`): every file on disk is rendered, and those whose bytes are already the views' are recorded as
    written, there and then (a replay, in its new views before it swaps them in, written without a journal:
    after the swap only the files that change are left to write, and forty megabytes of adf_files rows of an
    unchanged mind/log.md do not go through the write-ahead log). Recording a file as written is safe before
    anything is written only because nothing is to be written for it. `rendered` (with `dry_run`): the hashes
    of files as these views render them, known already (`Prechecks`): mind/log.md is not rendered again.
    A page folder moved aside is not made again (`FoldersGone`) unless `into_gone` (a replay writes every file).
    """
    report = FileReport(written=[], removed=[], refused=[])
    staged = []  # (temporary file, target, path, hash, content) of files written: landed together at the end
    records = []  # (target, path, hash, content) of every file brought up to date: recorded together at the end
    folders, gone = {}, FoldersGone(views, root)
    dirty = views.written.dirty()
    landings = views.written.landings()  # files renamed into place by a process stopped before it recorded them
    ahead = {} if dry_run else views.entries_ahead(path for path, _written in dirty)
    with _removed_if_stopped(lambda: [tmp for tmp, *_rest in staged]):
        with views.shared.heads_kept() if len(dirty) >= HEADS_KEPT_FROM else contextlib.nullcontext():
            for path, written in [*(file for file in dirty if file[0] not in ahead),  # the others rendered meanwhile
                                  *(file for file in dirty if file[0] in ahead)]:
                try:
                    target = validate.inside_workspace(root, path, folders)
                except UnsafePath:
                    report.refused.append(path)
                    continue
                checked = stat_key(target)
                on_disk = disk_hash(target, seen, checked) if checked is not None else None
                if on_disk is None and not (dry_run or into_gone) and gone.holds(path) is not None:
                    report.gone.append(path)
                    continue
                edited = on_disk is not None and on_disk != written and on_disk != landings.get(path) and not (
                    force is True or force and path in force)
                if dry_run and (on_disk is None or not (settle or edited)):
                    continue  # nothing on disk: nothing to refuse, nothing already there to settle
                apart = ahead[path].result() if path in ahead else None
                chunks = views.entries_file(path, apart) if apart is not None else views.file_chunks(path)
                if chunks is None:
                    if on_disk is not None:
                        if edited:
                            report.refused.append(path)
                            continue
                        if not dry_run:
                            target.unlink()
                        report.removed.append(path)
                    new_hash = None
                elif path == LOG_PATH:
                    new_hash = _materialize_stream(views, target, chunks, on_disk, edited, dry_run,
                                                   report, path, settle, (rendered or {}).get(path))
                else:
                    content = "".join(chunks).encode("utf-8")
                    new_hash = hashlib.sha256(content).hexdigest()
                    if on_disk != new_hash:
                        if edited:
                            report.refused.append(path)
                            continue
                        report.written.append(path)
                        if not dry_run:
                            tmp = _write_temp(target, [content], sync=False)[0]
                            staged.append((tmp, target, path, new_hash, content, checked))
                            continue
                settled = settle and on_disk == new_hash and path not in report.refused
                if (dry_run and not settled) or path in report.refused:
                    continue
                records.append((target, path, new_hash, content if chunks is not None and path != LOG_PATH else None))
        wait(ahead.values())  # a file refused before its text was needed: no thread reads on while these are recorded
        for paths in (report.written, report.removed, report.refused, report.gone):
            paths.sort()  # in the order of `dirty`, as if the files rendered ahead had not waited
        _land(views, staged, records, report)
    if records:
        _record(views, records)
    return report


def _materialize_stream(views: Views, target: Path, chunks, on_disk, refuse: bool, dry_run: bool, report, path,
                        settle: bool = False, known: str | None = None) -> str:
    """A file too large to hold in memory (mind/log.md): rendered once into a temporary file (a dry run only
    hashes it, and only when it must know: `refuse`, `settle`; `known`: its hash, worked out already)."""
    if dry_run:
        if not refuse and not settle:  # nothing to decide: only an edited file could be refused
            report.written.append(path)
            return None
        new_hash = known or _hash_chunks(chunks)
        if on_disk != new_hash:
            (report.refused if refuse else report.written).append(path)
        return new_hash
    tmp, new_hash = _write_temp(target, chunks, sync=False)  # synced only if it is kept
    if on_disk == new_hash:
        tmp.unlink()
    elif refuse:
        tmp.unlink()
        report.refused.append(path)
    else:
        with _removed_if_stopped(lambda: [tmp]):
            _fsync(tmp)
            views.written.land([(path, new_hash)])
            os.replace(tmp, target)
        report.written.append(path)
    return new_hash


def _record(views: Views, records: list[tuple]) -> None:
    """Records what was written (target, path, hash or None for removed, content), and each file's adf_files
    row (a large file streamed from disk), in one transaction: a file written but not yet recorded when the
    process stops is told from a hand edit by its bytes (see `hand_edited`)."""
    with views.transaction():
        metas = views.wiki_files_meta([path for _target, path, new_hash, _content in records if new_hash is not None])
        for target, path, new_hash, content in records:
            if new_hash is None:
                views.written.record(path, None)
            else:
                size = len(content) if content is not None else target.stat().st_size
                views.written.record(path, new_hash, (content, size, *metas[path]), target)
