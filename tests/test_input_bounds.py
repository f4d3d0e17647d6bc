"""Input that costs more to take than its size says is refused before it is paid for: a page whose YAML
aliases expand it a thousandfold ("billion laughs"), and a `--file` stream that never ends. One `error:` line
each, and the log as it was."""

import os
import sqlite3
import threading

from conftest import PAGE, log_rows, run_mem
from projections.memory import Memory


def alias_bomb(levels: int) -> bytes:
    """A page of a few hundred bytes whose frontmatter, its aliases expanded, holds 9**levels strings."""
    lines = "".join(f"a{i + 1}: &a{i + 1} [{','.join([f'*a{i}'] * 9)}]\n" for i in range(levels))
    return f"---\ntype: note\nx: &a0 [lol]\n{lines}---\n# bomb\n".encode()


ALIAS_REFUSED = "frontmatter uses the YAML alias *a0; aliases are refused"


def test_page_write_refuses_an_alias_bomb_in_one_line(workspace):
    page = alias_bomb(6)  # 315 bytes, 5.5 MB once expanded
    assert len(page) < 400
    before = log_rows(workspace)
    result = run_mem("-w", workspace, "page", "write", "bomb", "--file", "-", input=page)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [f"error: {ALIAS_REFUSED} (a few can expand a small page into "
                                                   "gigabytes): write the value out in full"]
    assert log_rows(workspace) == before


def test_adopt_leaves_a_hand_made_alias_bomb_unread(workspace):
    run_mem("-w", workspace, "page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    (workspace / "mind" / "hand.md").write_bytes(alias_bomb(6))
    before = log_rows(workspace)
    result = run_mem("-w", workspace, "adopt")
    assert ALIAS_REFUSED in result.stdout.decode() + result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()
    assert log_rows(workspace) == before


def test_import_adf_keeps_an_alias_bomb_page_out_of_the_wiki(workspace, tmp_path):
    run_mem("-w", workspace, "page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    adf = tmp_path / "bomb.adf"
    run_mem("-w", workspace, "export", "adf", adf, check=True)
    with sqlite3.connect(adf) as db:
        db.execute("UPDATE adf_files SET content = ? WHERE path = 'mind/deploy.md'", (alias_bomb(5),))
    target = tmp_path / "imported"
    Memory.init(target, "bob").close()
    run_mem("-w", target, "import", "adf", adf, check=True)
    assert "mind/deploy.md does not exist" in run_mem("-w", target, "show", "mind/deploy.md").stderr.decode()


def test_an_alias_free_page_with_stars_and_an_anchor_is_still_taken(workspace):
    page = b'---\ntype: note\ndescription: "we *really* mean it"\nbase: &b {a: 1}\n---\n# ok\n'
    run_mem("-w", workspace, "page", "write", "starred", "--file", "-", input=page, check=True)
    assert b"*really*" in (workspace / "mind" / "starred.md").read_bytes()


def test_a_file_stream_is_read_no_further_than_its_limit(workspace):
    before = log_rows(workspace)
    for args in (("page", "write", "z"), ("file", "write", "z.bin")):
        result = run_mem("-w", workspace, *args, "--file", "/dev/zero")
        limit = 1024 * 1024 * (1 if args[0] == "page" else 8)
        assert result.returncode == 1
        assert result.stderr.decode().splitlines() == [
            f"error: the {args[0]} is more than {limit} bytes; the limit is {limit}"]
    assert log_rows(workspace) == before


def test_a_fifo_that_never_ends_is_refused_at_the_limit(workspace, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    stop = threading.Event()

    def feed():
        with open(fifo, "wb") as pipe:
            try:
                while not stop.is_set():
                    pipe.write(b"y\n" * 65536)
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    before = log_rows(workspace)
    try:
        result = run_mem("-w", workspace, "page", "write", "z", "--file", fifo)
    finally:
        stop.set()
    feeder.join(timeout=30)
    assert result.stderr.decode().splitlines() == ["error: the page is more than 1048576 bytes; the limit is 1048576"]
    assert log_rows(workspace) == before


ODD_PATHS = {"a\nb.txt": "not printable", "a\u202etxt.exe": "not printable", "docs/x.txt ": "ending in a space",
             "CON": "a name Windows keeps for a device", "docs/nul.txt": "a name Windows keeps for a device",
             "y" * 300: "longer than 255 bytes",
             "notes/conin$.md": "a name Windows keeps for a device"}


def test_file_write_refuses_paths_no_filesystem_or_reader_takes(workspace, tmp_path):
    content = tmp_path / "hi.txt"
    content.write_bytes(b"hi\n")
    before = log_rows(workspace)
    for path, said in ODD_PATHS.items():
        result = run_mem("-w", workspace, "file", "write", path, "--file", content)
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 1 and len(lines) == 1 and said in lines[0], (path, lines)
    assert log_rows(workspace) == before
    run_mem("-w", workspace, "file", "write", "Notes v1.2/a b.md", "--file", content, check=True)


def test_import_adf_refuses_an_adf_files_path_a_file_write_refuses(workspace, tmp_path):
    adf = tmp_path / "odd.adf"
    run_mem("-w", workspace, "page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    run_mem("-w", workspace, "export", "adf", adf, check=True)
    with sqlite3.connect(adf) as db:
        db.execute("INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, "
                   "updated_at) SELECT 'a' || char(10) || 'b.txt', content, mime_type, size, 'none', authorized, "
                   "created_at, updated_at FROM adf_files WHERE path = 'mind/deploy.md'")
    target = tmp_path / "imported"
    Memory.init(target, "bob").close()
    before = log_rows(target)
    result = run_mem("-w", target, "import", "adf", adf)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"error: {adf} is not an ADF file mindlog can import: adf_files 'a\\nb.txt': file path 'a\\nb.txt' holds a "
        "character that is not printable (a line break, a control or direction mark)"]
    assert log_rows(target) == before


def test_a_page_is_shown_by_each_name_page_write_takes(workspace):
    page = b"---\ntype: note\n---\n# x\n"
    assert run_mem("-w", workspace, "page", "write", "x.md", "--file", "-", input=page, check=True).stdout == \
        b"ingest mind/x.md (seq 1)\n"
    for name in ("x", "x.md", "mind/x.md"):
        assert run_mem("-w", workspace, "show", name, check=True).stdout == page, name
    assert b"mind/x.md" in run_mem("-w", workspace, "history", "x.md", check=True).stdout
    run_mem("-w", workspace, "file", "write", "x.md", "--file", "-", input=b"a root file\n", check=True)
    assert run_mem("-w", workspace, "show", "x.md", check=True).stdout == b"a root file\n"


def test_only_the_line_fields_of_frontmatter_must_be_one_line(workspace):
    """README: `type`, `title`, `description`, `status`, `stale_after` and `sources` one line; any other key any
    YAML value, written back as one quoted line that cannot end the block or add a key."""
    page = b"---\ntype: note\nsummary: |\n  first\n  ---\n  injected: yes\n---\n# s\n"
    run_mem("-w", workspace, "page", "write", "s", "--file", "-", input=page, check=True)
    written = (workspace / "mind" / "s.md").read_text()
    assert written.startswith('---\ntype: note\nsummary: "first\\n---\\ninjected: yes\\n"\n---\n')
    before = log_rows(workspace)
    refused = run_mem("-w", workspace, "page", "write", "d", "--file", "-",
                      input=b"---\ntype: note\ndescription: |\n  two\n  lines\n---\n# d\n")
    assert refused.stderr.decode().splitlines()[0].startswith("error: frontmatter `description` must be one line")
    assert log_rows(workspace) == before
