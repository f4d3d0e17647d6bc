"""A file's history: the seqs at which its text changed, read from the log and the version views."""

import difflib

import msgspec

from eventstore.errors import NotFound
from eventstore.instants import format_instant
from eventstore.kinds import (ADF, WIKI_KINDS, ContractChange, PageDelete, PageIngest, PageRename, PageUpdate,
                              kinds_naming)
from eventstore.layers import MIND
from eventstore.redaction import Redacted, stand_in
from eventstore.writer import renamed_from

from .views import LOG_PATH, MIND_PATH, page_path, slug_of

FILE_KINDS = sorted(kinds_naming(ADF, "path"))


class Version(msgspec.Struct, omit_defaults=True):
    path: str
    seq: int
    recorded_at: str
    agent: str
    made_at: str
    """When its agent made it (the event's `ts`): for a version pulled from a hub, not when this workspace recorded it
    (nc34b: an agent that caught up later read every version as written at its pull)."""
    kind: str
    deleted: bool
    shown: bool = True  # False: a shared page's version the file did not show (a conflict's other side kept it)
    note: str = ""  # why the version was written, as its event says (`mem page write --note`, a resolve's)
    change: str = ""  # what the version did to the file beyond its text (`described`): "renamed to PATH", ...


def _candidates(memory, path: str, upto: int):
    """The events that may have changed `path` (no layer's file: see `_layer_file_history`) up to seq `upto`,
    oldest first: a superset, narrowed by comparing texts after. A page's are its rows in the version table, so
    it reads no more of the log than the page's own events."""
    views = memory.views
    if path in (MIND_PATH, LOG_PATH):
        return memory.log.read(kinds=sorted(WIKI_KINDS), layers=[MIND], upto=upto)
    slug = slug_of(path)
    if slug is not None:
        return (memory.log.get_by_seq(seq) for seq in views.page_version_seqs(slug, upto))
    return (e for e in memory.log.read(kinds=FILE_KINDS, upto=upto) if folded(e).path == path)


def folded(event):
    """An event's body as the folds read it: a redacted one's stand-in, which keeps its path, slug or names
    (eventstore.redaction.KEPT) and holds `[redacted: reason]` for its content."""
    return stand_in(event.body) if isinstance(event.body, Redacted) else event.body


def history(memory, path: str, upto: int | None = None) -> list[Version]:
    """Every version of `path`, oldest first: the events after which its text differed from before.

    A page renamed into `path` brings the versions it had under its older name (like `git log --follow`), and a
    layer's file the contract moved to `path` those it had at its older path."""
    head = memory.seq_at() if upto is None else upto
    tenure = memory.views.tenure(path, head)
    if tenure is not None:
        versions = _layer_file_history(memory, path, *tenure, head)
        layer, slug = tenure[:2]

        def source(version: Version) -> tuple[str, int] | None:
            if slug is None or not version.note.startswith(renamed_from("")):
                return None
            return _shared_rename_source(memory, layer, slug, version.seq)

        renamed_in = bool(versions) and source(versions[0]) is not None
        followed = _followed(memory, versions, source)
        return followed if renamed_in else _moved_from(memory, path, tenure) + followed
    versions, last = [], None
    for event in _candidates(memory, path, head):
        text = _content(memory, path, event.seq)
        if text != last:
            versions.append(_version(path, event, text is None))
            last = text
    return _followed(memory, versions, lambda v: _wiki_rename_source(memory, path, v))


def _wiki_rename_source(memory, path: str, version: Version) -> tuple[str, int] | None:
    """(the old path, the seq before the rename) when the version renamed a wiki page into `path`."""
    if version.kind not in (PageRename.__struct_config__.tag, Redacted.__struct_config__.tag) or version.deleted \
            or not slug_of(path):  # a redacted rename is followed as the folds follow it (its stand-in keeps names)
        return None
    renamed = folded(memory.log.get_by_seq(version.seq))
    if isinstance(renamed, PageRename) and renamed.new == slug_of(path):
        return page_path(renamed.old), version.seq - 1
    return None


def _followed(memory, versions: list[Version], source) -> list[Version]:
    """The versions, with those the page had under another name spliced in before each version that renamed it
    into this one (`source`: (the old path, the seq before the rename) or None), as `git log --follow` lists
    them: all of them before a first version, those made since the version before otherwise (nc29a: a page
    renamed away and back lost the versions it had under the other name)."""
    followed: list[Version] = []
    for version in versions:
        older = source(version)
        if older is not None:
            since = followed[-1].seq if followed else 0
            followed += [v for v in history(memory, *older) if v.seq > since]
        followed.append(version)
    return followed


def _moved_from(memory, path: str, tenure: tuple) -> list[Version]:
    """The versions a layer's file had at its earlier path, when the contract change that began its `tenure` at
    `path` moved it there (followed as a rename is), or here, when it put back a layer it had dropped; the agent's
    own file's versions there, when its delete let the layer's file in (Views.blocked)."""
    layer, slug, since, _until = tenure
    if since and memory.views.own_file_at(path, since - 1):
        return history(memory, path, since - 1)
    old = memory.views.shared_path(layer, slug, since - 1) if since else None
    if old is None and since:  # dropped from the contract then, and put back: what it had where it was (nc29b)
        placed = memory.views.last_placed(layer, since - 1)
        earlier = memory.views.shared_path(layer, slug, placed[1]) if placed is not None else None
        if earlier is not None and earlier != path:  # put back elsewhere: followed to there, its drop with it (nc33a)
            return history(memory, earlier, placed[1] + 1)
        before = memory.views.tenure(path, since - 1)
        return history(memory, path, since - 1) if before is not None and before[:2] == (layer, slug) else []
    return history(memory, old, since - 1) if old and old != path else []


def _shared_rename_source(memory, layer: str, slug: str | None, seq: int) -> tuple[str, int] | None:
    """(the old path, the seq before the rename) when a shared page's first version is the new name of a rename
    (SharedWriter.page_rename: the old name deleted just before, by the same agent, the new one noted `renamed_from`
    it), so that its history follows it as a wiki page's does."""
    first, before = memory.log.get_by_seq(seq), memory.log.get_by_seq(seq - 1)
    if slug is None or first is None or before is None or not isinstance(deleted := folded(before), PageDelete):
        return None
    written = folded(first)
    if not (isinstance(written, (PageIngest, PageUpdate)) and written.slug == slug and before.layer == first.layer
            == layer and before.agent == first.agent and written.note == renamed_from(deleted.slug)):
        return None
    old = memory.views.shared_path(layer, deleted.slug, before.seq - 1)
    return (old, before.seq - 1) if old else None


def _layer_file_history(memory, path: str, layer: str, slug: str | None, since: int, until: int | None,
                        head: int) -> list[Version]:
    """The versions of a layer's file while it was at `path` (Views.tenure): from the contract change that put
    it there (a version, if it had anything then) to the one that moved or dropped it (`deleted`)."""
    upto = head if until is None else until - 1
    if slug is not None:
        versions = _shared_page_history(memory, path, layer, slug, upto)
    else:  # every entry adds its line: a version each, without rendering the file each time
        versions = [_version(path, memory.log.get_by_seq(seq), False)
                    for seq in memory.views.shared.entry_seqs(layer, upto)]
    if since:
        versions = [v for v in versions if v.seq > since]
        if memory.show(path, since) is not None:
            versions.insert(0, _version(path, memory.log.get_by_seq(since), False))
    if until is not None and memory.show(path, until - 1) is not None:
        versions.append(_version(path, memory.log.get_by_seq(until), True))
    return versions


def by_contract(version: Version) -> bool:
    """Whether the version is a contract change's: a layer's file moved there or away, or its layer dropped."""
    return version.kind == ContractChange.__struct_config__.tag


def moved(memory, version: Version) -> str:
    """What a contract change did to the layer file at the version's path (a version of kind `contract.change`):
    moved it there or away, or dropped its layer. The version's own path, not the one asked about: a history
    follows a layer's file through its moves, and one moved back names versions at the other path (nc29a)."""
    views = memory.views
    layer, slug = views.layer_at(version.path, version.seq - 1 if version.deleted else version.seq)
    other = views.shared_path(layer, slug, version.seq if version.deleted else version.seq - 1)
    if version.deleted:
        return f"moved to {other}" if other else f"layer {layer} dropped from the contract"
    return f"moved from {other}" if other else f"layer {layer} placed here by the contract"


def described(memory, versions: list[Version]) -> list[Version]:
    """The versions with `change` said: a rename (to or from a path: not a deletion), a layer's file moved or its
    layer dropped by a contract change (`moved`), or a deletion."""
    for before, version in zip([None, *versions], versions):
        body = (folded(memory.log.get_by_seq(version.seq))  # a redacted rename's stand-in keeps its names
                if version.kind in (PageRename.__struct_config__.tag, Redacted.__struct_config__.tag) else None)
        if isinstance(body, PageRename) and version.path in (page_path(body.old), page_path(body.new)):
            change = f"renamed to {page_path(body.new)}" if version.deleted else f"renamed from {page_path(body.old)}"
        elif by_contract(version):
            change = moved(memory, version)
        elif before is not None and before.path != version.path and _renamed_in(version):  # a shared page's rename
            change = f"renamed from {before.path}"
        elif version.deleted and (renamed := _shared_rename_target(memory, version)):
            change = f"renamed to {renamed}"
        else:
            change = "deleted" if version.deleted else ""
        version.change = change
    return versions


def _shared_rename_target(memory, version: Version) -> str | None:
    """The path a shared page's deletion renamed it to: the delete half of a rename (SharedWriter.page_rename), the
    new name's version right after it, by the same agent, noted `renamed_from` the old name."""
    if version.kind != PageDelete.__struct_config__.tag:
        return None
    gone, then = memory.log.get_by_seq(version.seq), memory.log.get_by_seq(version.seq + 1)
    written = folded(then) if then is not None else None
    if not (isinstance(written, (PageIngest, PageUpdate)) and then.layer == gone.layer and then.agent == gone.agent
            and written.note == renamed_from(folded(gone).slug)):
        return None
    return f"{version.path.rpartition('/')[0]}/{written.slug}.md"


def _renamed_in(version: Version) -> bool:
    """Whether a shared page's version is the new name's first in a rename (SharedWriter.page_rename's note)."""
    return version.kind != PageRename.__struct_config__.tag and version.note.startswith(renamed_from(""))


def _version(path: str, event, deleted: bool) -> Version:
    return Version(path=path, seq=event.seq, recorded_at=format_instant(event.recorded_at), agent=event.agent,
                   made_at=format_instant(event.ts), kind=event.kind, deleted=deleted,
                   note=getattr(event.body, "note", "") or "")


def _shared_page_history(memory, path: str, layer: str, slug: str, upto: int) -> list[Version]:
    """A shared page's versions (one pass over its version rows): every one of them, those the file did not show
    (a conflict's other side: `shown` False, `mem show` at its seq reads the winner's text) too, so that each agent
    lists the same versions whatever order they reached it in; `deleted` when the file was gone after it."""
    versions, shown = [], None
    for seq, winner in memory.views.shared.winner_at_each_version(layer, slug, upto):
        version = _version(path, memory.log.get_by_seq(seq), winner is None or bool(winner[3]))
        # a deletion shows no text either way: never "the other side of a conflict" (two at once are none, nc30a)
        deletes = version.kind == PageDelete.__struct_config__.tag
        version.shown, shown = (winner and winner[0]) != shown or deletes, winner and winner[0]
        versions.append(version)
    return versions


def _content(memory, path: str, seq: int) -> str | bytes | None:
    """The file's text as of `seq`, or its bytes when it is not text (shown as `<9 bytes of image/png>`, two versions
    of one size would read alike)."""
    text = memory.show(path, seq)
    binary = memory.binary_file(path, seq) if text is not None and text.startswith("<") else None
    return text if binary is None else binary


def diff(memory, path: str, a: int, b: int) -> str:
    """A unified diff of `path` between seqs a and b (missing at one of them, it reads as empty; missing at
    both, it is refused: most likely a mistyped path, which would otherwise diff as nothing changed). A page renamed
    between them is compared with itself under the name it had at each, as `history` follows it (nc29a: two
    versions `mem history` listed from before a rename were "at neither moment")."""
    for known in (max(a, b), memory.seq_at()):  # named as it was at the later moment, or as it is now
        old_path, new_path = (_name_at(memory, path, seq, known) for seq in (a, b))
        old, new = _content(memory, old_path, a), _content(memory, new_path, b)
        if old is not None or new is not None:
            break
    if old is None and new is None:
        raise NotFound(f"{path} exists at neither moment (seq {a}, seq {b})")
    if isinstance(old, bytes) or isinstance(new, bytes):
        sides = [side.encode() if isinstance(side, str) else side or b"" for side in (old, new)]
        return "" if sides[0] == sides[1] else f"Binary files {old_path}@{a} and {new_path}@{b} differ\n"
    if old_path != new_path and old == new:  # renamed and nothing else: said, as git says it, not an empty diff (nc19b)
        return f"rename from {old_path}@{a}\nrename to {new_path}@{b}\n"
    old, new = old or "", new or ""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{old_path}@{a}",
                                        f"{new_path}@{b}"))


def _name_at(memory, path: str, seq: int, upto: int) -> str:
    """The path the file named `path` at seq `upto` had at `seq`: its own, unless it did not exist there then
    and its history (following renames) places it elsewhere: under an older name, or the new name of a rename away
    that it was renamed back from since."""
    if _content(memory, path, seq) is not None:
        return path
    earlier = [version for version in history(memory, path, upto) if version.seq <= seq]
    if not earlier:
        return path
    last = earlier[-1]
    if not last.deleted:
        return last.path
    if by_contract(last):  # a layer's file the contract moved away from `path`: where it was at `seq` (nc30a)
        placed = memory.views.layer_at(last.path, last.seq - 1)
        moved_to = memory.views.shared_path(*placed, seq) if placed else None
        return moved_to if moved_to and _content(memory, moved_to, seq) is not None else path
    body = folded(memory.log.get_by_seq(last.seq)) if last.kind == PageRename.__struct_config__.tag else None
    if isinstance(body, PageRename) and page_path(body.old) == last.path:
        return page_path(body.new) if _content(memory, page_path(body.new), seq) is not None else path
    return path
