"""`mem status`: how the views and the files on disk stand against the log."""

from collections import Counter

import msgspec

from eventstore.backends import shown
from eventstore.workspace import log_damaged

from .materialize import FoldersGone, InTheWay, hand_edited, in_the_way, stale_temp_files, untracked
from .replay import leftovers, lock_free


class WorkspaceStatus(msgspec.Struct):
    """`clean`: every file is what the log says (the views caught up, nothing edited by hand, left to write,
    missing or untracked). It is about the workspace's files alone: what waits to be pushed or pulled, and
    conflicts, are said apart (sync.status). `leftovers`: what a replay or check cut off left in .mem/, which the
    next command that takes the projector lock removes."""

    workspace: str
    agent: str
    head: int
    checkpoint: int
    behind: int
    hand_edited: list[str]
    pending: list[str]
    missing: list[str]
    untracked: list[str]
    clean: bool
    blocked: dict[str, str] = {}
    """The agent's own files where the contract places a layer's file (Memory.blocked): path -> what that means."""
    unplaced: list[str] = []
    """Layers the log holds events of while no contract is known to place their files (`unplaced`)."""
    leftovers: list[str] = []
    redaction_cut_off: bool = False
    """A redaction committed and the rewrite of the files it changed was cut off: the files not written since may still
    hold what it removed, until the next command that writes files (Memory.redaction_cut_off)."""
    in_the_way: list[str] = []
    """Why files cannot be written or read where they go: a file stands where their folder goes (nc33a: `mem status`
    failed with it, saying nothing else)."""
    folders_gone: dict[str, int] = {}
    """Page folders moved aside as a whole (materialize.FoldersGone) -> how many files mindlog wrote there are due or
    missing: not listed as missing one by one (deleted by hand), as `mem adopt` does not take them for deleted."""
    temporary: list[str] = []
    """Temporary files a command stopped mid-write left beside the files (`.NAME.mem-tmp-PID`), which the next
    command that writes files removes."""


def _owed(memory, path: str) -> bool:
    """Whether a file the views mark due has anything due: one on disk is written or removed, one that is neither on
    disk nor in the views (a page renamed away while a killed replay had it due: nc24b) has nothing left to do."""
    if (memory.root / path).exists():
        return True
    target = memory.views.shared_target(path) if memory.views.contract else None
    if target is not None and target[1] is None:  # an entries layer's file: there as long as its layer is
        return True
    return memory.views.file_chunks(path) is not None


def workspace_status(memory) -> WorkspaceStatus:
    checkpoint, head = memory.witnesses()  # views another log gave, or edited outside mem: said, not counted "behind"
    if head and memory.log.recorded_at(head) is None:
        raise log_damaged(shown(memory.config.log or memory.ws.log_path), f"its head, seq {head}, holds no event")
    blocked_by: dict[str, InTheWay] = {}
    if head > checkpoint and not any(memory.views.written.hashes().values()):
        edited, loose = [], []  # views lost (or rebuilt from nothing): they know no file, so none is judged yet
    else:
        edited, loose = hand_edited(memory.views, memory.root, in_the_way=blocked_by), untracked(memory.views,
                                                                                                memory.root)
    pending = [p for p, _hash in memory.views.written.dirty() if p not in edited and p not in blocked_by
               and _owed(memory, p)]
    missing = [p for p in memory.views.paths() if not (memory.root / p).exists() and p not in pending
               and p not in blocked_by]
    gone, folders_gone = FoldersGone(memory.views, memory.root), {}
    for path in [*pending, *missing]:
        folder = gone.holds(path)
        if folder is not None:
            folders_gone[folder] = folders_gone.get(folder, 0) + 1
    if folders_gone:
        pending, missing = ([p for p in paths if gone.holds(p) is None] for paths in (pending, missing))
    nowhere = unplaced(memory)
    return WorkspaceStatus(workspace=str(memory.root), agent=memory.config.agent, head=head, checkpoint=checkpoint,
                           behind=head - checkpoint, hand_edited=edited, pending=pending, missing=missing,
                           untracked=loose, blocked=memory.blocked(), unplaced=nowhere, folders_gone=folders_gone,
                           in_the_way=_in_the_way(memory.root, blocked_by),
                           clean=head == checkpoint and not (edited or pending or missing or loose or nowhere
                                                             or folders_gone or blocked_by),
                           leftovers=[str(path.relative_to(memory.root)) for path in leftovers(memory.ws)],
                           redaction_cut_off=bool(pending or head > checkpoint) and memory.redaction_cut_off(),
                           temporary=[str(path.relative_to(memory.root)) for path in stale_temp_files(
                               memory.views, memory.root)] if lock_free(memory.ws) else [])


def _in_the_way(root, blocked: dict[str, InTheWay]) -> list[str]:
    """One line per thing in the way, however many files it keeps from their place (a file where a folder of 10,000
    pages goes is one line)."""
    kept_out = Counter(found.blocking for found in blocked.values())
    first: dict = {}
    for path, found in blocked.items():
        first.setdefault(found.blocking, (path, found))
    return sorted(str(found) if kept_out[blocking] == 1 else
                  str(in_the_way(root / path, NotADirectoryError(), kept_out[blocking]))
                  for blocking, (path, found) in first.items())


def unplaced(memory) -> list[str]:
    """The hub's layers the log holds events of when no hub contract is known here (a workspace made again on a log
    that recorded none: `Memory.set_contract` records each since), whose files therefore are not written."""
    if memory.hub_contract() is not None:
        return []
    return sorted(set(memory.views.shared.held_layers()) - memory.local_layers())
