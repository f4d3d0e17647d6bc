"""An agent's memory: the write side, the log and the projections wired together.

This is the library the CLI is a thin layer over: every method validates, appends one event,
then brings the views and the files up to date.
"""

import fcntl
from contextlib import contextmanager
from pathlib import Path

import msgspec

from eventstore.envelope import Event
from eventstore import secrets, validate
from eventstore.errors import HandEdited, InvalidInput
from eventstore.layers import lenient_contract, produces
from eventstore.sqlite import SQLiteLog
from eventstore.workspace import Workspace
from eventstore.writer import AdfWriter, SharedWriter, Writer

from . import local_layers, trust
from .fold import catch_up
from .materialize import FileReport, hand_edited, materialize, remove_stale_temp_files, write_atomic
from .views import LOG_PATH, MIND_PATH, Views, page_path


class Memory:
    def __init__(self, workspace: Workspace):
        self.ws = workspace
        self.config = workspace.config()
        self.log = SQLiteLog(workspace.log_path, synchronous=self.config.synchronous)
        self.views = Views(workspace.views_path)
        self.writer = Writer(self.config.agent, self.views)
        self.adf_writer = AdfWriter(self.config.agent, self.views)
        self.shared_writer = SharedWriter(self.config.agent, self.views)
        self.views.contract = self.load_contract()
        self.last_report = FileReport()

    @classmethod
    def open(cls, root: str | Path | None = None) -> "Memory":
        return cls(Workspace.find(root))

    @classmethod
    def init(cls, root: str | Path, agent: str = "agent") -> "Memory":
        memory = cls(Workspace.init(root, agent))
        memory.refresh()
        return memory

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
        """One projector at a time per workspace (appends need no lock: SQLite serialises them)."""
        self.ws.mem_dir.mkdir(exist_ok=True)
        with open(self.ws.lock_path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def refresh(self, *, force: bool = False, progress=None) -> FileReport:
        """Catches the views up with the log and writes what changed to the workspace. A redaction is
        never folded: the views are rebuilt from the log instead, which no longer holds what it removed."""
        with self.lock():
            remove_stale_temp_files(self.views, self.root)
            head = self.log.head()
            if next(self.log.read_rows(self.views.checkpoint(), head, kinds=["redaction"], limit=1), None) is None:
                catch_up(self.log, self.views, upto=head, progress=progress)
                local_layers.adopt(self.views, self.load_contract())
                self.last_report = materialize(self.views, self.root, force=force)
                return self.last_report
        from .replay import replay

        self.last_report = replay(self, force=force, keep_hand_edits=True, progress=progress).files
        return self.last_report

    def append(self, event: Event, *, touches: list[str] = (), adopt: dict[str, bytes] | None = None,
               force: bool = False, allow_secret: bool = False) -> int:
        """Appends one event, refusing first if it holds a secret (unless allowed), or if a file it would
        rewrite is unsafe or was edited by hand."""
        event = secrets.checked(event, allow_secret)
        for path in touches:
            validate.inside_workspace(self.root, path)
        trust.admit(self, event)
        if not force:
            edited = [p for p in hand_edited(self.views, self.root, set(touches))
                      if not (adopt and p in adopt and (self.root / p).read_bytes() == adopt[p])]
            if edited:
                raise HandEdited(
                    f"{', '.join(edited)} was edited by hand since mindlog wrote it; keep the edit with "
                    "`mem page write SLUG --file mind/SLUG.md`, or pass --force to overwrite it")
        seq = self.log.append([event])[0]
        self.refresh(force=force)
        return seq

    # --- the wiki -----------------------------------------------------------------------------

    def write_page(self, slug: str, document: bytes, note: str = "", *, force: bool = False,
                   allow_secret: bool = False) -> int:
        event = self.writer.page_write(slug, document, note)
        path = page_path(event.body.slug)
        return self.append(event, touches=[path, MIND_PATH, LOG_PATH], adopt={path: document}, force=force,
                           allow_secret=allow_secret)

    def delete_page(self, slug: str, note: str = "", *, force: bool = False, allow_secret: bool = False) -> int:
        event = self.writer.page_delete(slug, note)
        return self.append(event, touches=[page_path(event.body.slug), MIND_PATH, LOG_PATH], force=force,
                           allow_secret=allow_secret)

    def rename_page(self, old: str, new: str, note: str = "", *, force: bool = False,
                    allow_secret: bool = False) -> int:
        event = self.writer.page_rename(old, new, note)
        touches = [page_path(event.body.old), page_path(event.body.new), MIND_PATH, LOG_PATH]
        return self.append(event, touches=touches, force=force, allow_secret=allow_secret)

    def release_page(self, slug: str, note: str, *, allow_secret: bool = False) -> int:
        event = self.writer.page_release(slug, note)
        trust.check_release(self, event.body.slug)
        return self.append(event, touches=[LOG_PATH], allow_secret=allow_secret)

    def always_add(self, line: str, *, force: bool = False, allow_secret: bool = False) -> int:
        return self.append(self.writer.always_add(line), touches=[MIND_PATH], force=force, allow_secret=allow_secret)

    def always_remove(self, number: int, *, force: bool = False) -> int:
        return self.append(self.writer.always_remove(number), touches=[MIND_PATH], force=force)

    def always(self) -> list[str]:
        return self.views.always()

    # --- the loop, files, messages, config ---------------------------------------------------

    def loop_append(self, role: str, content: list, loop: str = "main", model=None, tokens=None, *,
                    allow_secret: bool = False) -> int:
        return self.append(self.adf_writer.loop_append(role, content, loop, model, tokens), allow_secret=allow_secret)

    def loop_compact(self, summary: str, preserve: int = 0, loop: str = "main", *, allow_secret: bool = False) -> int:
        return self.append(self.adf_writer.loop_compact(summary, preserve, loop), allow_secret=allow_secret)

    def loop_clear(self, start: int | None = None, end: int | None = None, loop: str = "main") -> int:
        return self.append(self.adf_writer.loop_clear(start, end, loop))

    def file_write(self, path: str, content: bytes, mime_type=None, protection: str = "none", *,
                   allow_secret: bool = False) -> int:
        local_layers.refuse_layer_path(path, self.views.contract)
        return self.append(self.adf_writer.file_write(path, content, mime_type, protection), allow_secret=allow_secret)

    def file_delete(self, path: str) -> int:
        return self.append(self.adf_writer.file_delete(path))

    def message(self, box: str, message: dict, *, allow_secret: bool = False) -> int:
        return self.append(self.adf_writer.message(box, message), allow_secret=allow_secret)

    def config_set(self, key: str, value, *, allow_secret: bool = False) -> int:
        return self.append(self.adf_writer.config_set(key, value), allow_secret=allow_secret)

    def swap_views(self, views: Views) -> None:
        """Points every part at a new views database (after a replay)."""
        views.contract = self.load_contract(views=views)
        self.views = views
        self.writer.state = views
        self.adf_writer.files = views
        self.shared_writer.state = views

    # --- shared layers ------------------------------------------------------------------------

    @property
    def contract_path(self) -> Path:
        return self.ws.mem_dir / "contract.json"

    def load_contract(self, hub=None, views: Views | None = None):
        """The hub's contract (as last pulled) with the local layers declared in `views` (these views)."""
        if hub is None:
            try:
                data = msgspec.json.decode(self.contract_path.read_bytes())
                hub = lenient_contract(data.get("layers") if isinstance(data, dict) else None)
            except FileNotFoundError:
                pass
        return local_layers.merged(hub, (views or self.views).config(), self.config.agent)

    def declare_layer(self, name: str, path: str, format: str = "entries") -> int:
        """A local layer (no hub needed): its declaration is a config event."""
        spec = local_layers.check(name, path, format, self.views.contract)
        return self.config_set(f"layers.{name}", spec)

    def set_contract(self, contract) -> bool:
        """Keeps the hub's contract for rendering shared layers; True when it changed."""
        if self.load_contract(contract) == self.views.contract:
            return False
        write_atomic(self.contract_path, [msgspec.json.encode(contract)])
        with self.lock():
            local_layers.adopt(self.views, self.load_contract(contract))
        self.refresh()
        return True

    def shared_layer(self, layer: str, format: str, allow_secret: bool = False):
        contract = self.views.contract
        if contract is None:
            raise InvalidInput("no contract is known yet: `mem pull` fetches it from the hub")
        spec = contract.layers.get(layer)
        if spec is None:
            raise InvalidInput(f"layer {layer!r} is not in the contract (layers: {', '.join(contract.layers)})")
        if spec.format != format:
            raise InvalidInput(f"layer {layer!r} holds {spec.format}, not {format}")
        if not produces(contract, self.config.agent, layer):
            raise InvalidInput(f"agent {self.config.agent!r} does not produce layer {layer!r} under the contract")
        if allow_secret and spec.scan_secrets:
            raise InvalidInput(f"the hub scans layer {layer!r} for secrets (scan_secrets in the contract): "
                               "--allow-secret cannot put one there")
        return spec

    def entry_add(self, layer: str, text: str, reverses: str | None = None, *, allow_secret: bool = False) -> int:
        spec = self.shared_layer(layer, "entries", allow_secret)
        return self.append(self.shared_writer.entry(layer, text, reverses), touches=[spec.path],
                           allow_secret=allow_secret)

    def shared_page_write(self, layer: str, slug: str, document: bytes, *, allow_secret: bool = False) -> int:
        spec = self.shared_layer(layer, "pages", allow_secret)
        event = self.shared_writer.page_write(layer, slug, document)
        path = f"{spec.path}{event.body.slug}.md"
        return self.append(event, touches=[path], adopt={path: document}, allow_secret=allow_secret)

    def shared_page_delete(self, layer: str, slug: str) -> int:
        spec = self.shared_layer(layer, "pages")
        event = self.shared_writer.page_delete(layer, slug)
        return self.append(event, touches=[f"{spec.path}{event.body.slug}.md"])

    def resolve(self, layer: str, slug: str, document: bytes, *, allow_secret: bool = False) -> int:
        spec = self.shared_layer(layer, "pages", allow_secret)
        event = self.shared_writer.resolve(layer, slug, document)
        path = f"{spec.path}{event.body.slug}.md"
        return self.append(event, touches=[path], adopt={path: document}, allow_secret=allow_secret)

    # --- point in time ------------------------------------------------------------------------

    def seq_at(self, at_ms: int | None = None, seq: int | None = None) -> int:
        """The seq that a (time, seq) pair names; the head when neither is given."""
        if seq is not None:
            return min(seq, self.views.checkpoint())
        if at_ms is not None:
            return min(self.log.seq_at(at_ms), self.views.checkpoint())
        return self.views.checkpoint()

    def show(self, path: str, as_of: int) -> str | None:
        """Any file as of a seq: the wiki, a layer's file, or one of adf_files (which stay off the disk)."""
        from .audit import file_text

        return file_text(self.views, path, as_of)

    def checkout(self, target: Path, as_of: int) -> list[str]:
        """Writes every file as of a seq into `target` (which must be outside this workspace's views)."""
        written = []
        for path in self.views.paths(as_of):
            write_atomic(Path(target) / path, self.views.file_chunks(path, as_of))
            written.append(path)
        return written
