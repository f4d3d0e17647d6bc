"""Turning direct edits into events: agents that write `mind/<slug>.md` or `mind.md` in place (as ADF
agents do with fs_write) get their edits into the log instead of losing them to the next write.

What can be adopted is: a page edited, created or deleted by hand (in the wiki, or in a shared
`pages` layer the agent produces, whose new version names as parent the version the file showed),
and `## Always` lines changed in mind.md (its catalog is derived from the pages, so catalog edits are not). Anything that cannot be
adopted — an edit that breaks the page contract, a hand edit of mind/log.md — is left on disk and
reported, never overwritten.
"""

import shlex
import time
from collections import Counter
from pathlib import Path

import msgspec

from eventstore.envelope import MAX_BODY_BYTES, check_body_size
from eventstore.errors import MemError, TooLarge
from eventstore import secrets, validate
from eventstore.layers import MIND

from .materialize import file_hash, hand_edited, untracked, written_hash
from .merge import three_way
from . import trust
from .render import CATALOG_EDIT, always_lines, log_block, log_entries, log_head, outside_always
from .views import KEPT_ASIDE, LOG_PATH, MIND_PATH, slug_of


class AdoptReport(msgspec.Struct):
    adopted: list[str] = []
    refused: dict[str, str] = {}
    renamed: dict[str, str] = {}  # a page moved by hand (its bytes unchanged): old path -> new path, one rename each
    kept: dict[str, str] = {}  # a file from before mindlog that it renders otherwise -> the file that keeps its text
    deleted: list[str] = []  # those of `adopted` deleted by hand: their adoption is a deletion


def adopt(memory, *, allow_secret: bool = False, progress=None, explain=str) -> AdoptReport:
    """Adopts every direct edit, under the projector's lock: no write can be half done (its event in the
    views, its file not yet on disk) while the files are compared with the views. `progress(n, total)`
    hears of each file adopted or left; `allow_secret` writes what the secret scanner flags; `explain` words
    a refusal (an MCP client is told of tools, not of flags)."""
    with memory.lock():
        memory.refresh()
        return _adopt(memory, allow_secret, progress or (lambda _n, total=None: None), explain)


BATCH = 100
"""Pages adopted per transaction: one append and one rewrite of mind.md and mind/log.md for each batch, not
for each page (3,000 pages adopted one by one took 36-94 s, mostly rewriting the growing index)."""


class _Batch:
    """Events waiting to be appended together, each with the file it adopts; a page refused on its own
    (its contract, a secret, a hold) is reported and never joins the batch."""

    def __init__(self, memory, report: AdoptReport, progress, allow_secret: bool, explain):
        self.memory, self.report, self.progress, self.explain = memory, report, progress, explain
        self.allow_secret = allow_secret
        self.items: list[tuple[str, object, bytes | None]] = []

    def add(self, path: str, make, document: bytes | None = None) -> None:
        try:
            validate.inside_workspace(self.memory.root, path)  # a link left alone, not with the batch (nc17a)
            event = secrets.checked(make(), self.allow_secret)
            try:
                trust.admit(self.memory, event)
            except MemError:
                if not self.items:
                    raise
                self.flush()  # it may name a page of the batch (superseded-by): asked again once that is recorded
                trust.admit(self.memory, event)
        except MemError as exc:
            self.report.refused[path] = self.explain(exc)
            self.progress(1)
            return
        self.items.append((path, event, document))
        if len(self.items) >= BATCH:
            self.flush()

    def flush(self) -> None:
        items, self.items = self.items, []
        if not items:
            return
        touches = [path for path, _event, _document in items]
        if any(event.layer == MIND for _path, event, _document in items):
            touches += [MIND_PATH, LOG_PATH]
        try:
            self.memory.append_all([event for _path, event, _document in items], touches=touches,
                                   adopt={path: doc for path, _event, doc in items if doc is not None},
                                   gone=[path for path, _event, doc in items if doc is None], checked=True,
                                   from_disk=True)
        except MemError as exc:  # the batch as a whole (mind.md edited by hand): each page as it would alone
            for path, _event, _document in items:
                self.report.refused[path] = self.explain(exc)
        else:
            self.report.adopted.extend(touches[:len(items)])
            self.report.deleted.extend(path for path, _event, document in items if document is None)
        self.progress(len(items))


def _adopt(memory, allow_secret: bool, progress, explain) -> AdoptReport:
    report = AdoptReport(adopted=[], refused={})
    root = memory.root
    views = memory.views
    edited = set(hand_edited(views, root)) | set(untracked(views, root))
    for path in sorted(path for path in edited if (root / path).is_dir()):  # `mkdir mind/x.md`: nothing to read
        edited.discard(path)
        report.refused[path] = "a directory, not a page"
    missing = [p for p in views.paths() if slug_of(p) and not (root / p).exists()]
    if missing and not (root / "mind").is_dir():  # moved aside (a backup, an editor's move): no page was deleted
        report.refused["mind/"] = _folder_gone(len(missing), "; `mkdir mind`, then `mem adopt`, records their deletion")
        missing = []
    shared_missing = [p for p in views.shared_paths() if views.shared_target(p)[1] is not None
                      and not (root / p).exists() and written_hash(views, p) is not None]
    for folder in sorted({path.rpartition("/")[0] for path in shared_missing}):
        if not (root / folder).is_dir():  # a pages layer's folder moved aside: its pages were not deleted (nc31a)
            gone = [path for path in shared_missing if path.rpartition("/")[0] == folder]
            report.refused[f"{folder}/"] = _folder_gone(len(gone))
            shared_missing = [path for path in shared_missing if path not in gone]
    progress(0, total=len(edited) + len(missing) + len(shared_missing))
    if LOG_PATH in edited and written_hash(views, LOG_PATH) is None:  # first: the pages adopted next add entries
        edited.discard(LOG_PATH)
        _restore_log(memory, report, allow_secret, explain)
        progress(1)
    if MIND_PATH in edited:  # first: the renames and pages adopted next rewrite mind.md
        progress(1)
        try:
            _adopt_always(memory, (root / MIND_PATH).read_text(encoding="utf-8", errors="replace"), report,
                          allow_secret)
        except MemError as exc:
            report.refused[MIND_PATH] = explain(exc)
    for old, new in _moved(views, root, missing, edited).items():
        edited.discard(new)
        missing.remove(old)
        try:
            event = memory.writer.page_rename(slug_of(old), slug_of(new), "moved in place")
            memory.append_all([event], touches=[old, new, MIND_PATH, LOG_PATH], adopt={new: (root / new).read_bytes()},
                              from_disk=True)
        except MemError as exc:
            report.refused[new] = explain(exc)
        else:
            report.renamed[old] = new
        progress(2)
    batch = _Batch(memory, report, progress, allow_secret, explain=explain)
    for path in sorted(edited - {MIND_PATH}):
        shared = views.shared_target(path) if views.contract else None
        refusal = None
        if shared is not None and shared[1] is None:
            refusal = memory.entries_file_hint(path, shared[0])
        elif path == LOG_PATH:
            refusal = "mind/log.md is derived from the log; write a page or a lint entry instead"
        elif shared is None and not slug_of(path):
            refusal = memory.moved_hint(path) or "not a page of the wiki"
        else:
            refusal = memory.redacted_under_hint(path, tools=explain is not str)
        if refusal is not None:
            report.refused[path] = refusal
            progress(1)
            continue
        document = (root / path).read_bytes()
        if shared is not None:
            note = EDITED if views.shared_document(*shared) is not None else WRITTEN  # a deleted page: anew (nc36a)
            batch.add(path, lambda layer=shared[0], slug=shared[1], document=document, note=note:
                      memory.shared_page_writing(layer, slug, document, note, allow_secret=allow_secret),
                      document)
        else:
            edit, refusal = _onto_current(views, path, document)
            if refusal is not None:
                report.refused[path] = refusal
                progress(1)
                continue
            note = EDITED if views.page_head(slug_of(path)) is not None else WRITTEN
            batch.add(path, lambda slug=slug_of(path), edit=edit, note=note:
                      memory.writer.page_write(slug, edit, note), document)
    batch.flush()
    deletes = _Batch(memory, report, progress, allow_secret, explain=explain)  # no document: a file deleted
    for path in missing:
        deletes.add(path, lambda slug=slug_of(path): memory.writer.page_delete(slug, "deleted in place"))
    for path in shared_missing:
        layer, slug = views.shared_target(path)
        deletes.add(path, lambda layer=layer, slug=slug:
                    memory.shared_page_deleting(layer, slug, "deleted in place", by_hand=True))
    deletes.flush()
    for path in shared_missing:
        if path in report.refused:  # kept for adoption (a hold released, a contract changed), else to be put back
            report.refused[path] += f"; or put the file back: `mem show {shlex.quote(path)} > {shlex.quote(path)}`"
    return report


EDITED, WRITTEN = "edited in place", "written by hand"
"""The note of an adopted page's version: an edit of a page the log has, or a page it never had (nc35b: a wiki kept
by hand before mindlog logged each of its pages as "edited in place")."""


def _folder_gone(pages: int, more: str = "") -> str:
    """Why the pages of a folder gone as a whole are not adopted as deleted (`_adopt`)."""
    return (f"the folder is gone, with its {pages} page(s): not taken as their deletion (put it back, or `mem replay` "
            f"writes it again from the log{more})")


def _moved(views, root, missing: list[str], edited: set[str]) -> dict[str, str]:
    """The wiki pages moved by hand (`mv mind/a.md mind/b.md`): a missing page whose last written bytes are those
    of exactly one new page, and the other way round. A page moved and edited at once is a delete and an ingest."""
    written, pages = views.written.hashes(), set(views.paths())
    new_pages = [path for path in edited if slug_of(path) and path not in pages]  # a name it had once too (nc29a)
    by_hash: dict[str, list[str]] = {}
    for path in new_pages:
        by_hash.setdefault(file_hash(root / path), []).append(path)
    gone: dict[str, list[str]] = {}
    for path in missing:
        gone.setdefault(written.get(path), []).append(path)
    return {olds[0]: by_hash[digest][0] for digest, olds in gone.items()
            if digest is not None and len(olds) == 1 and len(by_hash.get(digest, ())) == 1}


def _onto_current(views, path: str, document: bytes) -> tuple[bytes, str | None]:
    """A wiki page's hand edit as its next version, or why not. The edit was made on the file mindlog last wrote
    there; when the page has a newer version since (a write through `mem mcp` or another command, the file not
    rewritten yet), the edit's changes are applied onto that version, never over it: refused when both changed
    the same lines."""
    base = views.written.text(path)
    current = views.file_text(path) if base is not None else None
    if current is None or base == current:
        return document, None
    try:
        merged = three_way(base, current, document.decode("utf-8"))
    except UnicodeDecodeError:
        return document, None  # refused as a page's write would refuse it
    if merged is None:
        quoted = shlex.quote(path)
        return document, (f"edited by hand on an older version of the page, and the version written since (the file "
                          f"was not rewritten yet) changed the same lines; the edit is left on disk: `mem show {quoted}` "
                          f"has the current version to edit, or `mem page write {slug_of(path)} --file {quoted}` keeps "
                          "this edit over it")
    return merged.encode("utf-8"), None


def _restore_log(memory, report: AdoptReport, allow_secret: bool, explain) -> None:
    """A mind/log.md mindlog never wrote, the wiki's own from before `mem init`: its entries are kept as log.restore
    events (as `mem import adf` keeps an imported one), below every entry written since, and the file is mindlog's
    from then on; where mindlog writes it otherwise (CRLF, bytes not UTF-8, its layout), the file as it was is kept
    too, as imported/mind/log.md. One that cannot be kept so is left where it is, nothing appended
    (`log_restore_refusal`): overwritten, the wiki's history was lost (nc24b, nc27a)."""
    text = (memory.root / LOG_PATH).read_bytes()
    restores, refusal = _log_restores(memory, text)
    if refusal is not None:
        report.refused[LOG_PATH] = f"{refusal}: {LOG_ASIDE}"
        return
    try:
        restored = memory.append_all(restores, touches=[LOG_PATH], adopt={LOG_PATH: text}, force=True,
                                     allow_secret=allow_secret, from_disk=True)
        if memory.show(LOG_PATH, restored[-1].seq if restored else 0).encode() != text:  # CRLF, bytes not UTF-8
            target = KEPT_ASIDE + LOG_PATH
            memory.file_write(target, text, "text/markdown", allow_secret=allow_secret)
            report.kept[LOG_PATH] = target
    except MemError as exc:
        report.refused[LOG_PATH] = explain(exc)
    else:
        report.adopted.append(LOG_PATH)


LOG_ASIDE = "move it aside (mindlog writes its own; the file stays yours), then `mem adopt` again"


def log_restore_refusal(memory) -> str | None:
    """Why `mem adopt` cannot keep the wiki's own mind/log.md as it is on disk (None: it can): told by the hints for
    it and for the files that wait on it, which said adopt keeps it (nc27a)."""
    try:
        text = (memory.root / LOG_PATH).read_bytes()
    except OSError:
        return None
    refusal = _log_restores(memory, text)[1]
    return None if refusal is None else f"{refusal}: {LOG_ASIDE}"


def _log_restores(memory, text: bytes) -> tuple[list, str | None]:
    """The log.restore events of a pre-mindlog mind/log.md, or why it cannot be kept: it is no change log; an entry
    is over one event's limit; or mindlog would write it otherwise, so its bytes must be kept as a file too, and it
    is over a file's limit. All known before anything is appended: the copy refused after the restores, the file
    was rewritten and its bytes were nowhere (nc27a)."""
    decoded = text.decode("utf-8", "replace").replace("\r\n", "\n")
    entries = log_entries(decoded)
    if entries is None:
        return [], ("it is no change log mindlog can read (`# Log`, a blank line, then `## [DATE] kind | title` "
                    "entries), and it was not written by mindlog")
    try:
        restores = memory.writer.log_restores(entries)
        for event in restores:
            check_body_size(event.raw_body())
    except TooLarge:
        return [], f"an entry of it is over {MAX_BODY_BYTES // 2**20} MiB, more than one event holds"
    rendered = log_head() + log_block(["\n".join(entries)] if entries else [])
    current = memory.show(LOG_PATH, memory.views.checkpoint()) or log_head()
    if len(text) > validate.MAX_FILE_BYTES and (rendered.encode() != text or current != log_head()):
        return [], (f"mindlog would write it otherwise (CRLF line ends, bytes that are not UTF-8 or its layout), and "
                    f"at {len(text):,} bytes it is too large to keep as it is too (a file may be at most "
                    f"{validate.MAX_FILE_BYTES:,})")
    return restores, None


MOVED_ALWAYS = "`mem always remove N`, then `mem always add --at M`, moves a line"


def _kept_aside(memory, report: AdoptReport, allow_secret: bool) -> bool:
    """The wiki's own mind.md, from before `mem init`, kept whole as a file (as `mem import adf` keeps an imported
    one that mindlog would render otherwise): mindlog makes all of it but `## Always` from the pages, so whatever
    else it held, overwritten, was lost (nc24b)."""
    target = KEPT_ASIDE + MIND_PATH
    try:
        memory.file_write(target, (memory.root / MIND_PATH).read_bytes(), "text/markdown",  # its bytes as they are
                          allow_secret=allow_secret)
    except MemError as exc:
        allowed = " (`mem adopt --allow-secret` keeps it as it is)" if isinstance(exc, secrets.SecretFound) else ""
        report.refused[MIND_PATH] = (f"it could not be kept as {target} ({secrets.without_advice(exc)}){allowed}, "
                                     "so it is left as it is, and the pages wait for it: take that out of the file, "
                                     "then `mem adopt`")
        return False
    report.kept[MIND_PATH] = target
    return True


def _adopt_always(memory, text: str, report: AdoptReport, allow_secret: bool) -> None:
    wanted = always_lines(text)
    current = memory.always()
    for line in {line for line in wanted or () if line and line not in current}:  # each refused before any is
        memory.admit(memory.writer.always_add(line), allow_secret)  # written: one refused halfway lost the rest (nc25a)
    first = written_hash(memory.views, MIND_PATH) is None  # not mindlog's: the wiki's own
    if first and outside_always(text) != outside_always(memory.show(MIND_PATH, memory.views.checkpoint()) or ""):
        if not _kept_aside(memory, report, allow_secret):
            return
        if wanted is None:
            memory.refresh(force=frozenset({MIND_PATH}))
            report.adopted.append(MIND_PATH)
            return
    if wanted is None:
        report.refused[MIND_PATH] = "mind.md has no `## Always` section to adopt"
        return
    # The edit was made on the mind.md mindlog last wrote: lines written since (an MCP insert) are not its removals.
    base = memory.views.written.text(MIND_PATH) or memory.show(MIND_PATH, memory.views.checkpoint()) or ""
    base_lines = always_lines(base)
    base_lines = current if base_lines is None else base_lines
    wanted = [line for line in wanted if line]
    surplus = Counter(base_lines) - Counter(wanted)  # copies removed: one of a line given twice too (nc21b)
    missing = Counter(wanted) - Counter(base_lines)
    catalog_edited = outside_always(text) != outside_always(base) and MIND_PATH not in report.kept
    if not surplus and not missing and (catalog_edited or wanted != base_lines):  # "adopted" would hide that it is not
        report.refused[MIND_PATH] = (  # kept
            f"only lines outside `## Always` changed, which are not adopted: {CATALOG_EDIT}" if catalog_edited else
            f"its `## Always` lines were only moved, which is not adopted: {MOVED_ALWAYS}") + \
            "; `mem show mind.md > mind.md` puts the file back"
        return
    for number in range(len(current), 0, -1):
        if surplus[current[number - 1]] > 0:
            surplus[current[number - 1]] -= 1
            memory.always_remove(number, force=True)
    have = memory.always()
    for index, line in enumerate(wanted):  # each where the edit put it: after the line before it that is kept
        if missing[line] > 0:
            missing[line] -= 1
            before = next((have.index(kept) + 1 for kept in reversed(wanted[:index]) if kept in have), 0)
            memory.always_add(line, position=before + 1, force=True, allow_secret=allow_secret)
            have.insert(before, line)
    memory.refresh(force=frozenset({MIND_PATH}))  # mind.md is rendered again from what was adopted
    report.adopted.append(MIND_PATH)
    left = [f"the other lines edited: {CATALOG_EDIT}"] if catalog_edited else []
    if base_lines == current and memory.always() != wanted:  # nothing written since: the edit also moved lines
        left.append(f"the lines moved: {MOVED_ALWAYS}")
    if left:
        report.refused[MIND_PATH] = ("its `## Always` lines were adopted, and mind.md rendered again without "
                                     + "; and ".join(left))


def quiet_after_edits(root: Path, quiet_ms: int):
    """Yields once the watch of the files under `root` (but mindlog's own) has begun, so that what was edited before
    is adopted with nothing edited meanwhile missed; then each time they have been quiet for `quiet_ms` after an
    edit, or edits have gone on for ten times that. watchfiles' `debounce` only caps how long a group of changes
    grows; its quiet is 50 ms (nc30b: saves 100 ms apart were adopted one by one whatever --debounce-ms said). It
    hands back what it saw every 100 ms at most, so Ctrl-C stops it at once whatever the quiet."""
    import watchfiles

    begun, first, last = False, None, None
    # Every change comes back, and is filtered here: one that watchfiles' filter drops (a reader of .mem/log.db,
    # polling it) yields nothing there, so the quiet was never seen while another process read the log.
    for changes in watchfiles.watch(root, debounce=100, rust_timeout=100, yield_on_timeout=True, watch_filter=None):
        now = time.monotonic()
        if not begun:
            begun = True
            yield
            continue
        if any("/.mem/" not in path and ".mem-tmp-" not in path for _change, path in changes):
            first, last = first or now, now
        if last is not None and (now - last >= quiet_ms / 1000 or now - first >= 10 * quiet_ms / 1000):
            first = last = None
            yield
