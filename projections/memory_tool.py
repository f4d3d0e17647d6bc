"""Claude's memory-tool commands (view, create, str_replace, insert, delete, rename) over a `/memories`
root mapped onto a workspace, as a library: the MCP server is one thin caller of it.

Paths map onto the workspace the way its files are laid out: `/memories/mind.md` is the index (only
its `## Always` lines can be edited), `/memories/mind/<slug>.md` are wiki pages (the page contract:
frontmatter, slug rules), `/memories/mind/log.md` is derived and read-only, a shared layer's path goes
through the shared writers, and any other path is a file in `adf_files`. Every accepted mutation is
one call of `Memory` (one event; a plain file's rename is its write and its delete in one
transaction), so it is validated and refused exactly as the CLI refuses it, with the same message.
Results and the tool's own errors use the strings of Anthropic's reference implementation.
"""

import functools

from eventstore import validate
from eventstore.errors import InvalidInput, MemError, NotFound, UnsafePath
from eventstore.writer import EMPTY_ALWAYS, file_path

from .views import LOG_PATH, MIND_PATH

ROOT = "/memories"
LINE_NUMBER_WIDTH = 6
MAX_LINES = 999_999
PAGES_HEADING = "\n## Pages"
ALWAYS_HEAD = "# Mind\n\n## Always\n"


class ToolRefusal(MemError):
    """A memory-tool command that cannot be carried out (a missing path, an ambiguous str_replace...)."""

    code = "memory-tool"


def format_size(size: int) -> str:
    """Sizes as the reference implementation prints them: 0B, 512B, 1.5K, 4K."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    scaled = size / (1024 ** i)
    return f"{int(scaled)}{units[i]}" if scaled == int(scaled) else f"{scaled:.1f}{units[i]}"


def numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{str(i + start).rjust(LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(lines))


def lines_in_range(view_range, count: int) -> tuple[int, int]:
    """The first and last line (1-based) a `view_range` [start, end] names in a file of `count` lines (end -1: the
    last line), or a refusal: anything but two integers, a start outside the file, an end before it or past it."""
    if not isinstance(view_range, list) or len(view_range) != 2 or any(type(n) is not int for n in view_range):
        raise InvalidInput(f"Invalid `view_range` parameter: {view_range}. It should be a list of two integers "
                           "[start, end] (1-based, end -1 for the last line).")
    first, end = view_range
    last = count if end == -1 else end
    if not 1 <= first <= count or not first <= last <= count:
        raise InvalidInput(f"Invalid `view_range` parameter: {view_range}. Its start should be within the range "
                           f"[1, {count}] and its end -1 or within [start, {count}].")
    return first, last


class Target:
    """What a /memories path names: kind is root, dir, mind, log, page, shared or file."""

    def __init__(self, path: str, kind: str, rel: str, slug: str | None = None, layer: str | None = None):
        self.path, self.kind, self.rel, self.slug, self.layer = path, kind, rel, slug, layer


def _at_head(method):
    """A read of a file and the write made from it, under the workspace's lock with the views at the log's head: no
    other process's write comes in between, to be replaced unseen by a version made from the one before it."""
    @functools.wraps(method)
    def at_head(self, *args, **options):
        with self.mem.at_head():
            return method(self, *args, **options)
    return at_head


class MemoryTool:
    def __init__(self, memory):
        self.mem = memory

    # --- paths ------------------------------------------------------------------------------

    def resolve(self, path: str) -> Target:
        """Maps a /memories path onto the workspace, refusing traversal with the CLI's own messages."""
        if not isinstance(path, str) or (path != ROOT and not path.startswith(ROOT + "/")):
            raise UnsafePath(f"Path must start with /memories, got: {path}")
        rel = path[len(ROOT) + 1:]  # `/memories//etc/x` keeps its empty segment, for file_path to refuse
        rel = rel[:-1] if rel.endswith("/") else rel
        if not rel:
            return Target(path, "root", "")
        if rel == MIND_PATH:
            return Target(path, "mind", rel)
        if rel == LOG_PATH:
            return Target(path, "log", rel)
        if rel == "mind":
            return Target(path, "dir", rel)
        if rel.startswith("mind/"):
            name = rel[len("mind/"):]
            slug = validate.slug(name)
            if name != f"{slug}.md":
                raise UnsafePath(f"{path} is not a page path: pages are /memories/mind/<slug>.md, "
                                 f"like /memories/mind/{slug}.md")
            return Target(path, "page", rel, slug=slug)
        shared = self.mem.views.shared_target(rel) if self.mem.views.contract else None
        if shared is not None:
            return Target(path, "shared", rel, slug=shared[1], layer=shared[0])
        file_path(rel)
        return Target(path, "dir" if self._is_dir(rel) else "file", rel)

    def _files(self) -> list[tuple[str, int]]:
        """The files outside the wiki and the shared layers, with their sizes."""
        return [(row[0], row[3]) for row in self.mem.views.files()]

    def _listing(self) -> list[tuple[str, int]]:
        """Every file that exists now, with its size: the wiki and shared layers (from the views, which
        may be ahead of the files on disk), and the other files."""
        views = self.mem.views
        rendered = [(path, len(views.file_text(path).encode("utf-8"))) for path in views.paths()]
        return sorted(rendered + self._files())

    def _is_dir(self, rel: str) -> bool:
        return any(p.startswith(rel + "/") for p in self.mem.views.paths() + [p for p, _size in self._files()])

    def _text(self, target: Target) -> str | None:
        """The file's current text, or None when it does not exist."""
        if target.kind in ("root", "dir"):
            return None
        if target.kind == "file":
            row = self.mem.views.file(target.rel)
            if row is None:
                return None
            try:
                return validate.text(bytes(row[1]), target.path, limit=1 << 62)
            except MemError:
                raise ToolRefusal(f"Unsupported file type for {target.path}") from None
        return self.mem.show(target.rel, self.mem.seq_at())

    def _existing_text(self, target: Target) -> str:
        if target.kind in ("root", "dir"):
            raise ToolRefusal(f"The path {target.path} is not a file.")
        text = self._text(target)
        if text is None:  # a conflict a delete won is said too (nc35a)
            raise NotFound(f"The path {target.path} does not exist. Please provide a valid path."
                           + self._conflict_note(target))
        return text

    def _left_note(self, target: Target) -> str:
        """A file written where a layer's file was until a contract change moved or dropped the layer: the agent's own,
        which no other agent gets (nc36b: it answered as a shared write does); "" for any other."""
        moved = self.mem.views.moved_away(target.rel) if target.kind == "file" and self.mem.views.contract else None
        if moved is None:
            return ""
        layer, now = moved
        where = f"it is at /memories/{now} now" if now is not None else "the layer was dropped from the contract"
        return (f"\n\nNote: {target.path} was where layer {layer} kept it until a contract change ({where}): this "
                "file is this agent's own, which no other agent gets.")

    def _conflict_note(self, target: Target, edited: bool = False) -> str:
        """A shared page in conflict, said after what a call answers about it (nc34b: `view` showed the winner alone,
        and an edit, which builds on it, answered as if it had settled the page); "" for any other file."""
        if target.kind != "shared" or target.slug is None:
            return ""
        views = self.mem.views
        heads = views.shared.heads(target.layer, target.slug, views.checkpoint())
        if len(heads) < 2:
            return ""
        by = [head.agent for head in heads]
        agents = ", ".join(f"{by.count(agent)} by {agent}" for agent in sorted(set(by)))
        others = "the other stays a head" if len(heads) == 2 else "the others stay heads"
        if heads[-1].deleted:  # the winner (nc35a: a delete won, and `view` said only "does not exist")
            shown = "the one that wins deletes the file" + (f"; {others} after this write" if edited else "")
        else:
            shown = "the file shows one of them" + (f", which this edit built on: {others}" if edited else "")
        return (f"\n\nNote: {target.path} is in conflict: {len(heads)} versions of it are heads ({agents}), and "
                f"{shown}. The conflicts tool shows each; resolve writes one version over them all.")

    # --- the commands -------------------------------------------------------------------------

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        target = self.resolve(path)
        if target.kind in ("root", "dir"):
            if view_range is not None:
                raise ToolRefusal("The `view_range` parameter is not allowed when `path` points to a directory.")
            return self._view_dir(target)
        text = self._existing_text(target)
        lines = text.split("\n")
        if len(lines) > MAX_LINES:
            raise ToolRefusal(f"File {path} exceeds maximum line limit of 999,999 lines.")
        if view_range is None:
            return f"Here's the content of {path} with line numbers:\n" + numbered(lines, 1) + self._conflict_note(target)
        first, end = lines_in_range(view_range, len(lines))
        return (f"Here's the content of {path} with line numbers:\n" + numbered(lines[first - 1:end], first)
                + self._conflict_note(target))

    def _view_dir(self, target: Target) -> str:
        prefix = target.rel + "/" if target.rel else ""
        files = [(p[len(prefix):], size) for p, size in self._listing() if p.startswith(prefix)]
        sizes: dict[str, int] = {}
        for rel, size in files:
            parts = rel.split("/")
            if any(part.startswith(".") for part in parts):
                continue
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth]) + "/"
                sizes[directory] = sizes.get(directory, 0) + size
            sizes[rel] = size
        shown = sorted(((p, s) for p, s in sizes.items() if p.rstrip("/").count("/") < 2),
                       key=lambda item: item[0].rstrip("/").split("/"))
        base = target.path.rstrip("/") or ROOT
        lines = [f"{format_size(sum(s for _p, s in files))}\t{base}"]
        lines += [f"{format_size(size)}\t{base}/{p}" for p, size in shown]
        return (f"Here're the files and directories up to 2 levels deep in {base}, excluding hidden items:\n"
                + "\n".join(lines))

    @_at_head
    def create(self, path: str, file_text: str) -> str:
        target = self.resolve(path)
        if target.kind == "shared":  # the contract's refusal first: "already exists" sent the agent on to str_replace
            self.mem.shared_layer(target.layer, "entries" if target.slug is None else "pages")  # to be refused (nc23b)
        if target.kind in ("root", "dir") or self._text(target) is not None:
            raise ToolRefusal(f"File {path} already exists")
        self._write(target, None, file_text)
        return (f"File created successfully at: {path}" + self._conflict_note(target, edited=True)
                + self._left_note(target))

    @_at_head
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        target = self.resolve(path)
        text = self._existing_text(target)
        count = text.count(old_str) if old_str else 0
        if count == 0:
            raise ToolRefusal(f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}.")
        if count > 1:
            lines, start = [], 0
            while (found := text.find(old_str, start)) != -1:
                line = text.count("\n", 0, found) + 1
                if not lines or lines[-1] != line:  # a line once, however many times it holds old_str
                    lines.append(line)
                start = found + 1
            raise ToolRefusal(f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: "
                              f"{', '.join(map(str, lines))}. Please ensure it is unique")
        changed = text[:text.find(old_str)].count("\n")
        new_text = text.replace(old_str, new_str)
        if new_text == text:  # said "edited" though nothing was recorded (nc17b)
            return f"No change was made: old_str and new_str are the same, so {path} is as it was and nothing was recorded."
        self._write(target, text, new_text)
        new_lines = (self._text(target) or new_text).split("\n")
        first, last = max(0, changed - 2), min(len(new_lines), changed + 3)
        return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + numbered(new_lines[first:last], first + 1) + self._conflict_note(target, edited=True))

    @_at_head
    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        target = self.resolve(path)
        text = self._existing_text(target)
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        if not 0 <= insert_line <= len(lines):
            raise ToolRefusal(f"Invalid `insert_line` parameter: {insert_line}. "
                              f"It should be within the range [0, {len(lines)}].")
        if target.kind == "mind" and not insert_text.strip():  # no Always line: the edit would change nothing (nc28a)
            raise InvalidInput(EMPTY_ALWAYS)
        lines.insert(insert_line, insert_text.rstrip("\n"))
        self._write(target, text, "\n".join(lines) + "\n")
        return f"The file {path} has been edited." + self._conflict_note(target, edited=True)

    def delete(self, path: str) -> str:
        target = self.resolve(path)
        if target.kind == "root":
            raise ToolRefusal("Cannot delete the /memories directory itself")
        if target.kind == "dir":
            raise ToolRefusal(f"{path} is a directory: delete its files one by one (each delete is one event)")
        if target.kind in ("mind", "log"):
            raise InvalidInput(f"{path} is part of the wiki and cannot be deleted")
        if self._text(target) is None:
            raise NotFound(f"The path {path} does not exist")
        if target.kind == "page":
            self.mem.delete_page(target.slug)
        elif target.kind == "shared":
            if target.slug is None:
                raise InvalidInput(f"{path} holds the entries of layer {target.layer!r}: entries are never deleted; "
                                   "add one that reverses another with the entry_add tool")
            self.mem.shared_page_delete(target.layer, target.slug)
        else:
            self.mem.file_delete(target.rel)
        return f"Successfully deleted {path}"

    def rename(self, old_path: str, new_path: str) -> str:
        old, new = self.resolve(old_path), self.resolve(new_path)
        if old.kind == "root":
            raise ToolRefusal("Cannot rename the /memories directory itself")
        if new.kind in ("root", "dir") or self._text(new) is not None:
            raise ToolRefusal(f"The destination {new_path} already exists")
        if old.kind == "dir":
            raise ToolRefusal(f"{old_path} is a directory: rename its files one by one (each rename is one event)")
        if self._text(old) is None:
            raise NotFound(f"The path {old_path} does not exist")
        if old.kind == "page" and new.kind == "page":
            self.mem.rename_page(old.slug, new.slug)
        elif old.kind == "file" and new.kind == "file":
            self.mem.file_rename(old.rel, new.rel)
        elif old.kind == new.kind == "shared" and old.slug and new.slug and old.layer == new.layer:
            self.mem.shared_page_rename(old.layer, old.slug, new.slug)
        else:
            raise InvalidInput(f"{old_path} cannot become {new_path}: a page is renamed to another page under "
                               "/memories/mind/, a page of a pages layer to another page of that layer, a file to "
                               "another file outside them")
        return f"Successfully renamed {old_path} to {new_path}"

    # --- writing ------------------------------------------------------------------------------

    def _write(self, target: Target, old: str | None, new: str) -> None:
        """One Memory call for the new text of a file (`old` is None for a create)."""
        if target.kind == "page":
            self.mem.write_page(target.slug, new.encode("utf-8"))
        elif target.kind == "mind":
            self._edit_always(target, old, new)
        elif target.kind == "log":
            raise InvalidInput(f"{target.path} is derived from the log: write a page and its entry follows")
        elif target.kind == "shared" and target.slug is None:
            self._add_entry(target, old or "", new)
        elif target.kind == "shared":
            self.mem.shared_page_write(target.layer, target.slug, new.encode("utf-8"))
        else:
            self.mem.file_write(target.rel, new.encode("utf-8"))

    def _edit_always(self, target: Target, old: str, new: str) -> None:
        """mind.md: its `## Always` lines become one always.add (where the edit put it) or one always.remove."""
        cut = new.find(PAGES_HEADING)
        if not new.startswith(ALWAYS_HEAD) or cut < 0 or new[cut:] != old[old.find(PAGES_HEADING):]:
            raise InvalidInput(f"only the `## Always` lines of {target.path} can be edited: its `## Pages` catalog "
                               "is generated from the pages (edit those under /memories/mind/)")
        body = new[len(ALWAYS_HEAD):cut].split("\n")
        if any(line.strip() and not line.startswith("- ") for line in body):
            raise InvalidInput(f"every line of `## Always` in {target.path} is a list item: `- text`")
        wanted = [line[2:].strip() for line in body if line.startswith("- ")]
        current = self.mem.always()
        if wanted == current:
            return
        for i in range(len(wanted) - 1, -1, -1):  # an insert anywhere, as `mem always add --at` (nc21b)
            if wanted[:i] + wanted[i + 1:] == current:
                self.mem.always_add(wanted[i], position=i + 1)
                return
        for i in range(len(current)):
            if current[:i] + current[i + 1:] == wanted:
                self.mem.always_remove(i + 1)
                return
        raise InvalidInput(f"an edit of {target.path} adds one `## Always` line (anywhere in the section) or "
                           "removes one line (one event per call); to change a line, remove it, then add the new one")

    def _add_entry(self, target: Target, old: str, new: str) -> None:
        """An entries layer's file: the edit must add exactly one line, which becomes one typed entry."""
        heading = f"# {target.layer}"
        before, added = ([line for line in text.split("\n") if line.strip() and line.strip() != heading]
                         for text in (old, new))
        for line in before:
            if line not in added:
                added = []
                break
            added.remove(line)
        if len(added) != 1:
            raise InvalidInput(f"{target.path} holds the typed entries of layer {target.layer!r}: an edit adds one "
                               "line `[TYPE] content` (one entry per call) and changes nothing else")
        self.mem.entry_add(target.layer, added[0].strip())
