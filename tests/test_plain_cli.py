"""What agents meet at the CLI's edges: typed moments, one-line errors, help on every option, --version."""

import datetime as dt
import json
import time
from pathlib import Path

import pytest
import typer.main

from conftest import PAGE, log_rows, run_mem
from eventstore.errors import InvalidInput
from eventstore.instants import parse_instant


@pytest.fixture
def paris(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


NOW = int(dt.datetime(2026, 11, 30, 10, 30, tzinfo=dt.timezone.utc).timestamp() * 1000)  # 11:30 in Paris


def utc(*parts) -> int:
    return int(dt.datetime(*parts, tzinfo=dt.timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("typed, meant", [
    ("now", utc(2026, 11, 30, 10, 30)),
    ("2h ago", utc(2026, 11, 30, 8, 30)),
    ("90 minutes ago", utc(2026, 11, 30, 9, 0)),
    ("3 days ago", utc(2026, 11, 27, 10, 30)),
    ("14:00", utc(2026, 11, 30, 13, 0)),
    ("9:05", utc(2026, 11, 30, 8, 5)),
    ("today", utc(2026, 11, 29, 23, 0)),
    ("yesterday", utc(2026, 11, 28, 23, 0)),
    ("yesterday 14:00", utc(2026, 11, 29, 13, 0)),
    ("Yesterday  14:00:30", utc(2026, 11, 29, 13, 0, 30)),
    ("2026-11-29", utc(2026, 11, 28, 23, 0)),
    ("2026-11-29T14:02", utc(2026, 11, 29, 13, 2)),
    ("2026-11-29T14:02:00+01:00", utc(2026, 11, 29, 13, 2)),
    ("2026-11-29T14:02:00Z", utc(2026, 11, 29, 14, 2)),
    ("2026-07-01T12:00", utc(2026, 7, 1, 10, 0)),  # summer time: the offset of that day, not today's
])
def test_each_typed_moment_resolves_in_the_local_timezone(paris, typed, meant):
    assert parse_instant(typed, now_ms=NOW) == meant


@pytest.mark.parametrize("typed", ["25:00", "tomorrow", "2 parsecs ago", "yesterday at noon", ""])
def test_what_is_not_a_moment_is_refused(paris, typed):
    with pytest.raises(InvalidInput):
        parse_instant(typed, now_ms=NOW)


def test_at_prints_the_instant_and_refuses_a_moment_before_the_workspace(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy-procedure", "-f", page, check=True)
    env = {"TZ": "Europe/Paris", "MEM_PLAIN": "1"}

    now = run_mem("-w", workspace, "show", "deploy-procedure", "--at", "now", env=env, check=True)
    assert now.stdout == PAGE
    said = now.stderr.decode().strip()
    assert said.startswith("as of ") and said.endswith(f"(seq {len(log_rows(workspace))})")
    assert said[6:35].endswith(("+01:00", "+02:00"))  # the local time it understood, with its offset

    before = run_mem("-w", workspace, "show", "mind.md", "--at", "2h ago", env=env)
    assert before.returncode == 1 and before.stdout == b""
    assert before.stderr.decode().startswith("error: '2h ago' (")
    assert "before this workspace existed" in before.stderr.decode()
    assert before.stderr.count(b"\n") == 1


def test_the_instant_said_keeps_its_milliseconds(workspace):
    """Regression: the "as of" line and the refusal of a moment before the first event printed the instant to the
    second, so a moment 1 ms before the first event was refused as before an event at the same instant, and two
    seqs a few milliseconds apart printed the same "as of"."""
    run_mem("-w", workspace, "always", "add", "one", check=True)
    first = log_rows(workspace)[0][3]  # recorded_at, in ms
    env = {"TZ": "UTC", "MEM_PLAIN": "1"}

    def typed(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")

    at_first = run_mem("-w", workspace, "always", "list", "--at", typed(first), env=env, check=True)
    assert at_first.stderr.decode() == f"as of {typed(first)} (seq 1)\n"
    early = run_mem("-w", workspace, "always", "list", "--at", typed(first - 1), env=env)
    assert early.returncode == 1 and early.stderr.decode() == (
        f"error: {typed(first - 1)!r} ({typed(first - 1)}) is before this workspace existed "
        f"(its first event is at {typed(first)})\n")


def test_show_finds_a_page_by_its_slug(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy-procedure", "-f", page, check=True)
    by_slug = run_mem("-w", workspace, "show", "deploy-procedure", check=True).stdout
    assert by_slug == run_mem("-w", workspace, "show", "mind/deploy-procedure.md", check=True).stdout == PAGE
    missing = run_mem("-w", workspace, "show", "no-such-page")
    assert missing.returncode == 1 and missing.stderr == b"error: mind/no-such-page.md does not exist\n"


@pytest.mark.parametrize("args, says", [
    (["show"], "error: Missing argument 'path'."),
    (["show", "--bogus", "mind.md"], "error: No such option: --bogus"),
    (["no-such-command"], "error: No such command 'no-such-command'."),
    (["show", "mind.md", "--seq", "x"], "error: "),
    (["show", "mind.md", "--at", "someday"], "error: 'someday' is not a time mindlog understands"),
])
def test_errors_are_one_plain_line_when_stderr_is_not_a_terminal(workspace, args, says):
    before = log_rows(workspace)
    result = run_mem("-w", workspace, *args)
    err = result.stderr.decode()
    assert result.returncode != 0 and result.stdout == b""
    assert err.startswith(says) and err.count("\n") == 1, err
    assert not any(box in err for box in "╭│╰"), err
    assert log_rows(workspace) == before


@pytest.mark.parametrize("group", ["hub", "page"])
def test_a_group_given_no_command_prints_its_help_and_no_empty_error(workspace, group):
    """Regression (nc26b): `mem hub` printed its help, then `error: ` with nothing after it."""
    result = run_mem("-w", workspace, group)
    assert result.returncode == 2 and result.stderr == b""
    assert f"Usage: mem {group} [OPTIONS] COMMAND" in result.stdout.decode()


def test_version():
    from importlib.metadata import version

    result = run_mem("--version", check=True)
    assert result.stdout.decode() == f"mem {version('mindlog')}\n"


def every_command():
    from cli.app import app, register_commands

    register_commands()
    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def test_every_option_of_every_command_has_a_help_line():
    commands = every_command()
    assert len(commands) > 40
    missing = [f"mem {' '.join(path)} {param.opts[0]}" for path, command in commands for param in command.params
               if param.param_type_name == "option" and not (param.help or "").strip()]
    assert missing == []


def test_no_help_line_loses_words_to_rich_markup():
    """Help is rendered as rich markup: `[redacted: REASON]` in --reason's help was taken for a style tag and
    printed as `()`. Every help line must read the same once rendered (a literal bracket written `\\[`)."""
    from rich.text import Text

    lost = [f"mem {' '.join(path)} {param.opts[0]}" for path, command in every_command() for param in command.params
            if param.param_type_name == "option" and param.help
            and Text.from_markup(param.help).plain != param.help.replace("\\[", "[")]
    assert lost == []


@pytest.mark.parametrize("path", [["page", "write"], ["show"], ["status"], ["loop", "append"], ["remote", "add"]])
def test_help_shows_no_placeholder_on_flags(path):
    env = {"MEM_PLAIN": "0", "COLUMNS": "200", "TERM": "dumb", "FORCE_COLOR": "0"}
    text = run_mem(*path, "--help", env=env, check=True).stdout.decode()
    assert "--help" in text and "<bool>" not in text
    assert "<str>" in text or path == ["status"]


def test_plain_help_is_rendered_for_every_command_without_error():
    commands = every_command()
    for path, _command in commands[:: max(1, len(commands) // 12)]:
        result = run_mem(*path, "--help", env={"COLUMNS": "120"})
        assert result.returncode == 0 and b"Usage:" in result.stdout, (path, result.stderr)


def test_help_in_a_pipe_shows_every_option_name_whole(monkeypatch):
    """Regression (nc27b): help written to a pipe was 80 columns wide, and `mem serve --help | less` cut option
    names (`--admin-token-fi…`); a pipe gets 120 unless COLUMNS says otherwise."""
    monkeypatch.delenv("COLUMNS", raising=False)
    helped = run_mem("serve", "--help", check=True).stdout.decode()
    assert "--admin-token-file" in helped and "…" not in helped
    assert max(map(len, helped.splitlines())) == 120
    assert max(map(len, run_mem("serve", "--help", env={"COLUMNS": "90"}).stdout.decode().splitlines())) == 90


def test_config_show_has_json(workspace):
    as_json = json.loads(run_mem("-w", workspace, "config", "show", "--json", check=True).stdout)
    text = run_mem("-w", workspace, "config", "show", check=True).stdout.decode().splitlines()
    assert text == [f"{key} = {json.dumps(value)}" for key, value in as_json.items()]


def test_command_modules_name_every_command_outside_app():
    """`mem` imports a command's module only when it runs: the table must name each one's module."""
    from cli import app as app_module

    app_module.register_commands()
    app = app_module.app
    found = {info.name or info.callback.__name__.lower().replace("_", "-"): info.callback.__module__
             for info in app.registered_commands}
    found.update({info.name: info.typer_instance.registered_commands[0].callback.__module__
                  for info in app.registered_groups if info.typer_instance.registered_commands})
    outside = {name: module.removeprefix("cli.") for name, module in found.items() if module != "cli.app"}
    assert outside == app_module.COMMAND_MODULES


def imported_by(*args) -> set[str]:
    """The modules a real `mem` process imported to run one command."""
    code = ("import sys\nfrom cli.app import main\nsys.argv = ['mem', *sys.argv[1:]]\ntry:\n    main()\n"
            "except SystemExit:\n    pass\nprint(' '.join(sorted(sys.modules)), file=sys.stderr)")
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, timeout=60)
    return set(result.stderr.decode().splitlines()[-1].split())


def test_a_command_imports_its_own_module_only(workspace):
    shown = imported_by("-w", workspace, "show", "mind.md")
    assert not {"cli.sync_commands", "cli.recall_commands", "cli.adf_commands", "cli.ui_commands"} & shown
    assert "regex" not in shown  # 15 ms of every command's start, for `mem redact --match` alone
    assert "cli.recall_commands" in imported_by("-w", workspace, "search", "staging")


def test_a_page_write_with_plain_frontmatter_needs_no_yaml_parser(workspace, tmp_path):
    page = tmp_path / "page.md"
    page.write_bytes(PAGE)
    written = imported_by("-w", workspace, "page", "write", "deploy", "--file", page)
    assert "yaml" not in written and "cli.sync_commands" not in written
    assert "deploy" in run_mem("-w", workspace, "page", "list", check=True).stdout.decode()


def test_options_taking_several_values_are_read_without_pydantic(workspace):
    """Typer checks an option's value with a pydantic TypeAdapter, and importing pydantic cost `mem log --kind`
    more than the rest of the command: a list of plain values is converted as a plain value is (cli.typer_tuning)."""
    run_mem("-w", workspace, "always", "add", "Staging first.", check=True)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    listed = ("-w", workspace, "log", "--kind", "page.ingest", "--kind", "always.add", "--layer", "mind", "--json")
    assert not [name for name in imported_by(*listed) if name.startswith("pydantic")]
    kinds = [event["body"]["kind"] for event in json.loads(run_mem(*listed, check=True).stdout)]
    assert sorted(kinds) == ["always.add", "page.ingest"]
    assert [e["body"]["kind"] for e in json.loads(run_mem("-w", workspace, "log", "--kind", "always.add", "--json",
                                                  check=True).stdout)] == ["always.add"]
    refused = run_mem("-w", workspace, "log", "--kind", "nope", "--kind", "always.add")
    assert refused.returncode == 1 and refused.stderr.decode().startswith("error: there is no event kind 'nope'")


def test_root_help_lists_every_command_with_its_help_line():
    from cli.app import COMMAND_MODULES

    text = run_mem("--help", env={"MEM_PLAIN": "1", "COLUMNS": "200"}, check=True).stdout.decode()
    listed = {line.split()[1]: line for line in text.splitlines() if line.startswith("│ ") and len(line.split()) > 3}
    for name in [*COMMAND_MODULES, "status", "show", "page", "always"]:
        assert name in listed and len(listed[name].split()) > 3, name
    assert "Lift a page's" in run_mem("page", "--help", env={"COLUMNS": "200"}, check=True).stdout.decode()


def test_json_exits_as_the_text_does(workspace):
    """A script reading --json learns failure from the exit code too: `replay --check` that finds a
    difference and `adopt` that leaves a file exit 1 with --json as without."""
    run_mem("-w", workspace, "always", "add", "one", check=True)
    with open(workspace / "mind/log.md", "a") as log:
        log.write("written by hand\n")
    for args in (["replay", "--check"], ["adopt"]):
        text, as_json = run_mem("-w", workspace, *args), run_mem("-w", workspace, *args, "--json")
        assert text.returncode == as_json.returncode == 1, (args, text, as_json)


def test_an_argument_that_is_not_utf8_is_one_error_line(workspace):
    """Bytes that are not UTF-8 on the command line (a Latin-1 terminal, a mangled script) reach Python
    surrogate-escaped and used to fail deep in the encoder with a traceback, a write or a search alike."""
    import os
    import subprocess

    from conftest import mem_command

    env = {**os.environ, "MEM_WORKSPACE": str(workspace)}
    before = log_rows(workspace)
    for args in ([b"always", b"add", b"caf\xe9"], [b"search", b"\xff"], [b"page", b"write", b"\xff", b"-f", b"-"]):
        result = subprocess.run([*mem_command(), *args], capture_output=True, env=env, input=PAGE, timeout=60)
        err = result.stderr.decode()
        assert result.returncode == 2 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: the argument b'") and \
            "is not valid UTF-8" in err, err
    assert log_rows(workspace) == before


def test_ctrl_c_under_a_command_is_one_error_line_and_exit_130(workspace):
    """Ctrl-C under a one-shot command (here one waiting for its text on stdin) used to exit 130 without
    a word (typer's own KeyboardInterrupt handling); a one-shot `mem pull` even exited 0."""
    import signal
    import subprocess

    from conftest import mem_command

    before = log_rows(workspace)
    writer = subprocess.Popen([*mem_command(), "-w", workspace, "loop", "append", "--role", "user", "--file", "-"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(3)
        writer.send_signal(signal.SIGINT)
        _out, err = writer.communicate(timeout=30)
    finally:
        writer.kill()
    assert writer.returncode == 130, err
    assert err.decode() == ("error: interrupted; what was recorded stays recorded, and the views and files catch "
                            "up at the next command\n")
    assert log_rows(workspace) == before


def test_a_progress_bars_rate_is_the_items_since_it_began_not_a_bursts_speed():
    """Regression: a catch-up's views bar read `22897/22897 4,231,452/s`: the fold reports the views in a burst,
    and rich's speed is measured between its last updates. The rate is the items done since the bar began."""
    import time

    from rich.progress import Progress

    from cli.output import _rate_column

    with Progress(disable=True) as progress:
        task = progress.add_task("views", total=20_000)
        time.sleep(0.25)
        progress.advance(task, 19_000)
        progress.advance(task, 1_000)
        shown = str(_rate_column().render(progress.tasks[0]))
    rate = int(shown.removesuffix("/s").replace(",", ""))
    assert 20_000 / 10 <= rate <= 20_000 / 0.25, shown


def test_a_ctrl_c_once_the_command_has_ended_is_not_a_death_by_the_signal(workspace):
    """Regression: SIGINT just after `mem push` had printed `pushed 20000 events` killed `mem` by the signal while
    the interpreter shut down (exit -2, no line said why), though nothing was lost. Once a command has ended, Ctrl-C
    is ignored: here a SIGINT sent as the interpreter shuts down (an exit hook) leaves the command's exit code."""
    import signal
    import subprocess
    import sys

    late = ("import atexit, os, signal, sys, time\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))\n"
            f"sys.argv = ['mem', '-w', {str(workspace)!r}, 'log']\n"
            "from cli.app import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", late], capture_output=True, timeout=60)
    assert done.returncode == 0 and b"KeyboardInterrupt" not in done.stderr, done.stderr
    assert done.returncode != -signal.SIGINT


def test_a_directory_that_is_no_workspace_is_refused_with_the_way_to_make_one(tmp_path):
    """Regression (nc15a): `--workspace DIR` naming no workspace said to "pass --workspace", which it had."""
    given = tmp_path / "not a workspace"
    refused = run_mem("log", "--workspace", given)
    assert refused.returncode == 1 and refused.stderr.decode() == (
        f"error: no mindlog workspace at or above {given}; `mem init --workspace '{given}'` makes one there\n")
    bare = run_mem("log", cwd=tmp_path)
    assert bare.returncode == 1 and bare.stderr.decode() == (
        f"error: no mindlog workspace at or above {tmp_path}; run `mem init` or pass --workspace\n")
    a_file = tmp_path / "f"
    a_file.write_text("")  # the init it named was refused: "is a file; a workspace is a directory" (nc21a)
    refused = run_mem("status", "--workspace", a_file)
    assert refused.returncode == 1 and refused.stderr.decode() == (
        f"error: {a_file} is a file; a workspace is a directory (`mem init --workspace DIR`)\n")


def test_a_workspace_path_through_dotdot_names_the_directory_it_reads_as(workspace, tmp_path):
    """Regression (nc19b): the parents of `ws/../elsewhere` included `ws`, so `-w ../elsewhere` from inside a workspace
    (or MEM_WORKSPACE so, or an absolute path through `..`) wrote into that workspace and exited 0."""
    import os
    import subprocess

    from conftest import mem_command

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = run_mem("-w", workspace, "log", "--json", check=True).stdout
    env = {key: value for key, value in os.environ.items() if key != "MEM_WORKSPACE"}
    for args, extra in ((("-w", "../elsewhere"), {}), (("-w", f"{workspace}/../elsewhere"), {}),
                        ((), {"MEM_WORKSPACE": "../elsewhere"})):
        refused = subprocess.run([*mem_command(), *args, "always", "add", "x"], cwd=workspace, capture_output=True,
                                 env={**env, **extra}, timeout=120)
        assert refused.returncode == 1 and refused.stderr.decode().startswith(
            f"error: no mindlog workspace at or above {elsewhere};"), (args, extra, refused.stderr)
    assert run_mem("-w", workspace, "log", "--json", check=True).stdout == before
    made = run_mem("init", "-w", "../made", cwd=workspace)
    assert made.returncode == 0 and b"inside" not in made.stderr, made.stderr
    assert (tmp_path / "made" / ".mem").is_dir() and not (workspace / "made").exists()


def test_a_workspace_path_through_a_link_and_dotdot_is_where_the_file_system_says(tmp_path):
    """Regression (nc20b): `..` taken out as text read `link/..` as the folder holding the link, not the parent of
    where the link leads, as the file system (and `cat link/../.mem/config.json`) reads it."""
    for name in ("ws", "ws2"):
        run_mem("init", "-w", tmp_path / name, "--agent", name, check=True)
    (tmp_path / "ws2" / "l").symlink_to(tmp_path / "ws" / "mind")
    run_mem("-w", tmp_path / "ws2" / "l" / "..", "always", "add", "through the link", check=True)
    assert "through the link" in (tmp_path / "ws" / "mind.md").read_text()
    assert "through the link" not in (tmp_path / "ws2" / "mind.md").read_text()


def test_a_ctrl_c_while_the_commands_are_imported_is_one_line(workspace):
    """Regression (nc21a): a Ctrl-C in the few hundred ms `mem` spends importing its commands was a KeyboardInterrupt
    traceback. Here the SIGINT comes as typer is imported, through the entry point `mem` is installed with."""
    import signal
    import subprocess
    import sys

    early = ("import os, signal, sys\n"
             "class Interrupts:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'typer':\n"
             "            os.kill(os.getpid(), signal.SIGINT)\n"
             "sys.meta_path.insert(0, Interrupts())\n"
             f"sys.argv = ['mem', '-w', {str(workspace)!r}, 'status']\n"
             "from cli import main\nmain()\n")
    before = log_rows(workspace)
    done = subprocess.run([sys.executable, "-c", early], capture_output=True, timeout=60)
    assert done.returncode == 130 and done.stderr == (
        b"error: interrupted before the command began; nothing was recorded\n"), done.stderr
    assert done.returncode != -signal.SIGINT and log_rows(workspace) == before
    project = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert [line for line in project.splitlines() if line.startswith("mem = ")] == ['mem = "cli:main"']


def test_dash_h_is_help_as_dash_dash_help_is_for_every_command():
    """Regression (nc35b): `mem push -h` said `No such option: -h`; a newcomer tries -h first."""
    for path in ([], ["push"], ["page", "write"], ["hub", "agent", "add"], ["loop", "clear"]):
        short, long = (run_mem(*path, flag, env={"COLUMNS": "120"}) for flag in ("-h", "--help"))
        assert short.returncode == 0 and short.stdout == long.stdout and b"Usage: mem" in short.stdout, (path, short)
