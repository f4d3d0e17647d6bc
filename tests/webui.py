"""A workspace for the web UI tests, made by real writes: a page in two versions, a loop message, and a
shared page in conflict (two heads, through a real hub); and `mem ui` serving it."""

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx

from conftest import mem_command
from hubserver import wait_until_answering
from teamhub import Team


def serve_ui(root: Path) -> tuple[subprocess.Popen, str]:
    """`mem ui` on a workspace, answering: its process and its URL."""
    server = subprocess.Popen([*mem_command(), "-w", str(root), "ui"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = server.stdout.readline().decode()
    assert line.startswith("mindlog ui: http://127.0.0.1:"), line + server.stderr.read(2000).decode()
    url = line.split()[-1].rsplit("/", 1)[0]
    wait_until_answering(url + "/asof")
    return server, url


class UiWorkspace:
    def __init__(self, root: Path):
        self.team = team = Team(root, agents=("writer", "reviewer"))
        for agent in ("writer", "reviewer"):
            team.mem(agent, "pull", check=True)
        team.conflict("launch", "Launch", "draft zero", "the {agent}'s launch text")
        team.mem("writer", "loop", "append", "--role", "user", "--text", "remember the launch date", check=True)
        self.v1 = self.write("alpha", "Alpha", "first version of alpha", "first")
        self.v2 = self.write("alpha", "Alpha", "second version of alpha", "second")
        self.root = root / "writer"
        self.server, self.url = serve_ui(self.root)

    def write(self, slug: str, title: str, text: str, note: str) -> int:
        out = self.team.mem("writer", "page", "write", slug, "--note", note, "--file",
                            self.team.page(slug, title, text), check=True).stdout.decode()
        return int(out.rsplit("seq ", 1)[1].rstrip(")\n"))

    def stop(self) -> None:
        self.server.terminate()
        self.server.wait(timeout=10)
        self.team.stop()


BAD_NUMBERS = ["asof?seq=%C2%B2", "asof?seq=%EF%BC%91", "timeline?event=%C2%B2", "timeline?t0=%C2%B2",
               "timeline?t1=%C2%B2", "history?path=mind/alpha.md&a=%C2%B2&b=1", "history?path=mind/alpha.md&a=1&b=%C2%B2",
               "timeline?t0=9223372036854775000", "timeline?t0=253402300800000",
               "history?path=mind/alpha.md&a=0&b=9223372036854775807"]
"""Every numeric parameter of the pages given what is no number (a superscript two, which str.isdigit takes and
int() refuses; a full-width one, which int() took as 1), a time past the last event and past year 9999 (each a
500 and a traceback before), a seq to diff past the head (shown as the head): each a 400 saying what is wrong."""


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium():
    """Debian's chromium under Playwright: yields a maker of fresh pages (each its own cookies) and the
    URLs every page requested, which must all stay on 127.0.0.1."""
    from playwright.sync_api import sync_playwright

    requests = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)

        def new_page():
            context = browser.new_context(viewport={"width": 1100, "height": 640})
            context.set_default_timeout(15_000)
            context.on("request", lambda request: requests.append(request.url))
            return context.new_page()

        yield new_page, requests
        browser.close()
    hosts = {httpx.URL(url).host for url in requests}
    assert hosts == {"127.0.0.1"}, f"requests left 127.0.0.1: {sorted(set(requests))}"


def screenshot(page, folder: Path, name: str) -> None:
    """Into `folder`, or into $MINDLOG_SCREENSHOTS (the README's docs/ when refreshing them)."""
    page.screenshot(path=Path(os.environ.get("MINDLOG_SCREENSHOTS") or folder) / name)
