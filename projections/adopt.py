"""Turning direct edits into events: agents that write `mind/<slug>.md` or `mind.md` in place (as ADF
agents do with fs_write) get their edits into the log instead of losing them to the next write.

What can be adopted is: a page edited, created or deleted by hand (in the wiki, or in a shared
`pages` layer the agent produces, whose new version names as parent the version the file showed),
and `## Always` lines changed in mind.md (its catalog is derived from the pages, so catalog edits are not). Anything that cannot be
adopted — an edit that breaks the page contract, a hand edit of mind/log.md — is left on disk and
reported, never overwritten.
"""

import msgspec

from eventstore.errors import MemError

from .materialize import hand_edited, untracked, written_hash
from .render import always_lines
from .views import LOG_PATH, MIND_PATH, slug_of


class AdoptReport(msgspec.Struct):
    adopted: list[str] = []
    refused: dict[str, str] = {}


def adopt(memory, *, allow_secret: bool = False, progress=None) -> AdoptReport:
    """Adopts every direct edit, under the projector's lock: no write can be half done (its event in the
    views, its file not yet on disk) while the files are compared with the views. `progress(n, total)`
    hears of each file adopted or left; `allow_secret` writes what the secret scanner flags."""
    with memory.lock():
        memory.refresh()
        return _adopt(memory, allow_secret, progress or (lambda _n, total=None: None))


def _adopt(memory, allow_secret: bool, progress) -> AdoptReport:
    report = AdoptReport(adopted=[], refused={})
    root = memory.root
    views = memory.views
    edited = set(hand_edited(views, root)) | set(untracked(views, root))
    missing = [p for p in views.paths() if slug_of(p) and not (root / p).exists()]
    shared_missing = [p for p in views.shared_paths() if views.shared_target(p)[1] is not None
                      and not (root / p).exists() and written_hash(views, p) is not None]
    progress(0, total=len(edited) + len(missing) + len(shared_missing))
    for path in sorted(edited):
        progress(1)
        shared = views.shared_target(path) if views.contract else None
        try:
            if shared is not None and shared[1] is None:
                report.refused[path] = (f"the entries of layer {shared[0]} are rendered from events; add one with "
                                        "`mem entry add`, and delete the file to have it written again")
            elif shared is not None:
                memory.shared_page_write(shared[0], shared[1], (root / path).read_bytes(), "edited in place",
                                         allow_secret=allow_secret)
                report.adopted.append(path)
            elif path == MIND_PATH:
                _adopt_always(memory, (root / path).read_text(encoding="utf-8", errors="replace"), report, allow_secret)
            elif path == LOG_PATH:
                report.refused[path] = "mind/log.md is derived from the log; write a page or a lint entry instead"
            elif slug_of(path):
                memory.write_page(slug_of(path), (root / path).read_bytes(), "edited in place",
                                  allow_secret=allow_secret)
                report.adopted.append(path)
            else:
                report.refused[path] = "not a page of the wiki"
        except MemError as exc:
            report.refused[path] = str(exc)
    for path in missing:
        progress(1)
        try:
            memory.delete_page(slug_of(path), "deleted in place", force=True)
            report.adopted.append(path)
        except MemError as exc:
            report.refused[path] = str(exc)
    for path in shared_missing:
        progress(1)
        layer, slug = views.shared_target(path)
        try:
            memory.shared_page_delete(layer, slug, "deleted in place", by_hand=True)
            report.adopted.append(path)
        except MemError as exc:
            report.refused[path] = str(exc)
    return report


def _adopt_always(memory, text: str, report: AdoptReport, allow_secret: bool) -> None:
    wanted = always_lines(text)
    if wanted is None:
        report.refused[MIND_PATH] = "mind.md has no `## Always` section to adopt"
        return
    current = memory.always()
    for number in range(len(current), 0, -1):
        if current[number - 1] not in wanted:
            memory.always_remove(number, force=True)
    have = memory.always()
    for line in wanted:
        if line and line not in have:
            memory.always_add(line, force=True, allow_secret=allow_secret)
            have.append(line)
    memory.refresh(force=True)  # mind.md is rendered again from what was adopted
    report.adopted.append(MIND_PATH)
