"""`mem ui` over plain HTTP: every page answers from a real workspace, as of any moment; bad input is refused."""

import os
import re
import sqlite3
from pathlib import Path

import httpx
import pytest

from cli.output import event_count
from conftest import PAGE, run_mem
from webui import BAD_NUMBERS, UiWorkspace, chromium, screenshot


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    workspace = UiWorkspace(tmp_path_factory.mktemp("ui"))
    yield workspace
    workspace.stop()


def open_files(pid: int) -> list[str]:
    """What each descriptor of process `pid` names; one closed between the listing and its reading is skipped (the
    server's threads open and close the views meanwhile: a FileNotFoundError failed a full run)."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except FileNotFoundError:
            continue
    return links


def get(ui, path: str) -> str:
    answer = httpx.get(f"{ui.url}/{path}", timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    return answer.text


def test_as_of_shows_the_page_as_it_was(ui):
    now = get(ui, "asof?page=alpha")
    assert "second version of alpha" in now and "first version" not in now
    then = get(ui, f"asof?seq={ui.v1}&page=alpha")
    assert "first version of alpha" in then and "second version" not in then
    before = get(ui, f"asof?seq={ui.v1 - 1}&page=alpha")
    assert "did not exist" in before and "remember the launch date" in before
    assert 'file=content/drafts/launch.md">content/drafts/launch.md</a>' in now
    shared = get(ui, "asof?file=content/drafts/launch.md")  # the shared layer's file as the agent had it
    assert "s launch text" in shared.split('id="file-text"', 1)[1].split("</pre>", 1)[0]
    assert "draft zero" in get(ui, "asof?seq=1&file=content/drafts/launch.md")


def test_a_moment_given_as_a_time(ui):
    recorded = httpx.get(f"{ui.url}/asof?seq={ui.v1}", timeout=30).text.split("as of seq")[1].split("·")[1].split("<")[0]
    page = get(ui, f"asof?at={recorded.strip()}&page=alpha")
    assert "first version of alpha" in page and f'value="{ui.v1}"' in page


def test_page_history_lists_versions_and_diffs_them(ui):
    page = get(ui, "history?page=alpha")
    picker = page.split('id="version-a"', 1)[1].split("</select>", 1)[0]
    assert picker.count("<option") == 3 and f'value="{ui.v1}" selected' in picker and "first" in picker
    assert ">first<" in page and ">second<" in page
    assert '<span class="del">-first version of alpha</span>' in page
    assert '<span class="add">+second version of alpha</span>' in page
    reverse = get(ui, f"history?path=mind/alpha.md&a={ui.v2}&b={ui.v1}")
    assert '<span class="add">+first version of alpha</span>' in reverse
    across = get(ui, f"history?path=mind/alpha.md&a=0&b={ui.v2}")  # skipping the first version
    assert '<span class="add">+second version of alpha</span>' in across and "-first version" not in across


def test_timeline_counts_filters_and_shows_an_event(ui):
    page = get(ui, "timeline")
    assert "writer · mind" in page and "reviewer · drafts" in page and "loop.append (1)" in page
    assert "page.update (1)" in get(ui, "timeline?layer=mind") and "page.update (3)" in page
    only = get(ui, "timeline?kind=page.ingest&layer=mind")
    assert f">{ui.v1}</a>" in only and f">{ui.v2}</a>" not in only
    event = get(ui, f"timeline?event={ui.v2}")
    assert "second version of alpha" in event and "digest " in event and 'href="history?path=mind/alpha.md"' in event


def test_clicking_an_event_shows_what_it_changed(ui):
    event = get(ui, f"timeline?event={ui.v2}")
    diff = event.split('id="event-diff"', 1)[1].split("</pre>", 1)[0]
    assert '<span class="del">-first version of alpha</span>' in diff
    assert '<span class="add">+second version of alpha</span>' in diff


def test_the_timeline_zooms_into_a_time_range(ui):
    from projections.memory import Memory

    with Memory.open(ui.root) as mem:
        first, at_v2, last = mem.log.recorded_at(1), mem.log.recorded_at(ui.v2), mem.log.recorded_at(mem.head())
    page = get(ui, "timeline")
    zoom = httpx.URL("http://x/" + page.split('id="zoom-in" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&"))
    t0, t1 = int(zoom.params["t0"]), int(zoom.params["t1"])
    assert first < t0 < t1 < last and abs((t1 - t0) - (last - first) / 2) <= 2
    narrow = get(ui, f"timeline?t0={at_v2}&t1={last}&layer=mind")
    assert f">{ui.v2}</a>" in narrow and f">{ui.v1}</a>" not in narrow
    assert 'name="t0" value="%d"' % at_v2 in narrow  # the filters keep the range


def test_the_contract_as_of_a_moment_with_who_produced_what(ui):
    from projections.memory import Memory

    with Memory.open(ui.root) as mem:
        agents = [row[4] for row in mem.log.read_rows(layers=["drafts"])]
    row = get(ui, "contract").split('data-layer="drafts"', 1)[1].split("</tr>", 1)[0]
    for agent in ("writer", "reviewer"):
        n = agents.count(agent)
        assert f"<div>{agent}: {n} event{'s' if n != 1 else ''}</div>" in row
    assert f"writer: {event_count(agents.count('reviewer'))} of others in its log" in row  # it said "1 events"
    before = get(ui, "contract?seq=1")
    assert "no contract is known" in before or "<span class=\"muted\">nothing</span>" in before


def test_a_shared_page_history_is_every_change_of_its_text(ui):
    """The history read from the winner's changes equals the text compared after every event of the layer."""
    from projections import history as histories
    from projections.memory import Memory

    with Memory.open(ui.root) as mem:
        path = "content/drafts/launch.md"
        naive, last = [], None
        for event in mem.log.read(layers=["drafts"]):
            text = mem.show(path, event.seq)
            if text != last:
                naive.append((event.seq, event.agent, text is None))
                last = text
        found = [(v.seq, v.agent, v.deleted) for v in histories.history(mem, path)]
    assert found == naive and len(found) >= 3  # draft zero, then each head winning in turn


def test_a_shared_event_links_to_its_layer_file(ui):
    drafts = get(ui, "timeline?layer=drafts")
    seq = int(drafts.split("event=", 1)[1].split('"', 1)[0].split("&", 1)[0])
    assert 'href="history?path=content/drafts/launch.md"' in get(ui, f"timeline?event={seq}")


def test_a_files_history_takes_file_as_as_of_does_and_its_versions_open_that_file(ui):
    """Regression (nc24b): history took `?path=` where the as-of page takes `?file=` (given `file`, it ignored it and
    showed the empty chooser), and each version of a file that is no wiki page linked to `asof?seq=N` alone, which
    opened the moment but not the file; mind/log.md's versions linked to a page named `log`, a 400."""
    for path in ("content/drafts/launch.md", "mind/log.md"):
        by_file = get(ui, f"history?file={path}")
        assert by_file == get(ui, f"history?path={path}")
        links = re.findall(r'href="(asof\?seq=\d+[^"]*)"', by_file)
        assert links and all(link.endswith(f"&amp;file={path}") for link in links), links
        assert get(ui, links[0].replace("&amp;", "&")).count(path) >= 1


def test_conflicts_show_each_head(ui):
    page = get(ui, "conflicts")
    assert "drafts / launch" in page
    assert "the writer&#39;s launch text" in page and "the reviewer&#39;s launch text" in page


def test_conflicts_as_of_a_moment_are_those_open_then(ui):
    """Regression: the page said "as of seq N" and listed the conflicts open now."""
    from projections.memory import Memory

    with Memory.open(ui.root) as mem:
        drafts = [(row[0], row[4]) for row in mem.log.read_rows(layers=["drafts"])]
    second_head = next(seq for seq, agent in drafts if agent == "reviewer")
    before = get(ui, f"conflicts?seq={second_head - 1}")
    assert "drafts / launch" not in before and f"no open conflicts at seq {second_head - 1}" in before
    assert "drafts / launch" in get(ui, f"conflicts?seq={ui.v1}")


def test_every_link_to_a_file_opens_that_file_whatever_its_name_holds(tmp_path):
    """Regression: paths went into hrefs HTML-escaped but not URL-encoded, so `&`, `#`, `?` or `%` in a
    file's name cut the link short (a 404 for "notes/a'b")."""
    import html

    from markupsafe import escape
    from starlette.testclient import TestClient

    from cli.web.app import create_app

    root, name = tmp_path / "ws", "notes/a'b&c #?%.md"
    run_mem("init", "-w", root, check=True)
    (tmp_path / "x.txt").write_text("hello\n")
    seq = int(run_mem("-w", root, "file", "write", name, "--file", tmp_path / "x.txt", check=True).stdout.split()[-1]
              .rstrip(b")"))
    with TestClient(create_app(root)) as client:
        pages = [client.get(f"/timeline?event={seq}").text, client.get("/asof", params={"file": name}).text]
        links = [html.unescape(href) for page in pages for href in re.findall(r'href="([^"]*notes/[^"]*)"', page)]
        assert len(links) == 4, links  # the event's file; the file's history, its link in the list of files and
        # this moment's link
        for link in links:
            answer = client.get("/" + link)
            assert answer.status_code == 200 and f"<h2>{escape(name)}" in answer.text, (link, answer.text[:300])


def test_search_and_contract(ui):
    found = get(ui, "search?q=second")
    assert "Alpha" in found
    assert "<mark>second</mark>" in found and "**second**" not in found
    assert "no matches" in get(ui, f"search?q=second&seq={ui.v1}")
    contract = get(ui, "contract")
    assert "content/drafts/" in contract and "drafts" in contract


@pytest.mark.parametrize("query, status, code", [
    ("asof?seq=abc", 400, "invalid-input"), ("asof?seq=99999", 400, "invalid-input"),
    ("asof?at=not-a-time", 400, "invalid-input"), ("asof?seq=1&at=2026-01-01", 400, "invalid-input"),
    ("asof?at=2999-01-01", 400, "invalid-input"), ("asof?at=1999-01-01", 400, "invalid-input"),
    ("asof?seq=0", 400, "invalid-input"), ("asof?seq=-1", 400, "invalid-input"),
    ("asof?seq=-99999999999999999999", 400, "invalid-input"),
    ("timeline?event=99999", 404, "not-found"),
    # a mistyped filter was an empty strip, 200 (the hub's pages and the CLI refuse it)
    ("timeline?layer=nosuch", 404, "not-found"), ("timeline?kind=nosuch", 404, "not-found"),
    ("timeline?agent=nosuch", 404, "not-found"),
    ("history?path=memory/nosuch.md", 404, "not-found"),
    ("history?page=nosuch", 404, "not-found"),
    # a page or file that never existed read as one not written yet, and an unsafe slug as a page (200)
    ("asof?page=nosuch", 404, "not-found"), ("asof?file=memory/nosuch.md", 404, "not-found"),
    ("asof?file=content/drafts/nosuch.md", 404, "not-found"),  # a page of a pages layer is no layer's own file
    ("asof?page=../x", 400, "unsafe-path"),
    ("history?page=../x", 400, "unsafe-path"),  # a 404 naming 'mind/../x.md' before
    # past what SQLite's integers hold: an OverflowError and a bare 500 before
    ("timeline?event=99999999999999999999", 400, "invalid-input"),
    ("timeline?t0=99999999999999999999999&t1=1", 400, "invalid-input"),
    ("timeline?t0=1796258970000&t1=1796258960000", 400, "invalid-input")])  # (nc13c) an empty strip, 200
def test_bad_moments_are_problems(ui, query, status, code):
    answer = httpx.get(f"{ui.url}/{query}", timeout=30)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("/" + code)
    if query == "asof?seq=-1":  # "seq must be a whole number, not '-1'" before (nc21a): what the CLI's --seq -1 says
        assert answer.json()["detail"] == "seq -1 is before the first event (seqs start at 1)"
    if "at=" in query and "seq=" not in query and "not-a-time" not in query:
        assert ("in the future" if "2999" in query else "before this workspace existed") in answer.json()["detail"]


@pytest.mark.parametrize("query", BAD_NUMBERS)
def test_what_is_no_number_is_a_problem_saying_so(ui, query):
    answer = httpx.get(f"{ui.url}/{query}", timeout=30)
    assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json", answer.text
    detail = answer.json()["detail"]
    garbled = re.search(r"(\w+)=%", query)
    assert detail.startswith(f"{garbled[1]} must be a whole number, not '") if garbled else \
        "after the last event shown" in detail or "past the log head" in detail, detail


def test_zooming_out_or_moving_stays_within_the_history(ui):
    """Regression: zoom out went on below the first event (to a negative t0, a 400), and "later" at the end
    halved the range instead of keeping it."""
    page = get(ui, "timeline")
    whole = _zoom_range(page, "out")
    assert whole == _zoom_range(page, "earlier") == _zoom_range(page, "later")  # all of it already
    t0, t1 = _zoom_range(page, "in")
    moved = _zoom_range(get(ui, f"timeline?t0={t0}&t1={t1}"), "later")
    assert moved[1] == whole[1] and moved[1] - moved[0] == t1 - t0
    assert _zoom_range(get(ui, f"timeline?t0={t0}&t1={t1}"), "out") == whole


def _zoom_range(page: str, button: str) -> tuple[int, int]:
    link = httpx.URL("http://x/" + page.split(f'id="zoom-{button}" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&"))
    return int(link.params["t0"]), int(link.params["t1"])


def test_the_page_list_flags_a_stale_page_as_search_does(tmp_path):
    """Regression: a page past its stale_after was listed unflagged (search and `mem believed` flag it)."""
    from starlette.testclient import TestClient

    from cli.web.app import create_app

    root = tmp_path / "ws"
    run_mem("init", "-w", root, check=True)
    page = "---\ntype: note\nstale_after: 2020-01-01\n---\n# Rollback\n\nHow to roll back.\n"
    run_mem("page", "write", "rollback", "-f", "-", "-w", root, input=page.encode(), check=True)
    with TestClient(create_app(root)) as client:
        listed = client.get("/asof").text.split('id="pages"', 1)[1].split("</ul>", 1)[0]
        found = client.get("/search?q=rollback").text.split('id="hits"', 1)[1].split("</ol>", 1)[0]
    assert '<span class="tag warn">stale since 2020-01-01</span>' in listed
    assert '<span class="tag warn">stale since 2020-01-01</span>' in found


def test_the_events_list_says_when_it_holds_only_the_newest(tmp_path):
    """Regression: the list showed the newest 100 of the range and nothing said so (the header said 101 events)."""
    from starlette.testclient import TestClient

    from cli.web.app import create_app
    from cli.web.timeline import LISTED
    from projections.memory import Memory

    with Memory.init(tmp_path / "ws", "ada") as mem:
        for i in range(LISTED + 1):
            mem.loop_append("user", [{"type": "text", "text": f"message {i}"}])
    with TestClient(create_app(tmp_path / "ws")) as client:
        page = client.get("/timeline").text
        assert f'id="events-capped" class="muted">the newest {LISTED} of {LISTED + 1} events:' in page
        assert page.split('id="events"', 1)[1].count("<tr>") == LISTED + 1  # the header and LISTED rows


def test_a_token_file_in_a_missing_directory_is_one_line(tmp_path):
    run_mem("init", "-w", tmp_path, check=True)
    result = run_mem("-w", tmp_path, "ui", "--token-file", tmp_path / "nodir" / "t")
    assert result.returncode != 0 and b"Traceback" not in result.stderr and b"Errno" not in result.stderr
    assert result.stderr.decode() == f"error: {tmp_path / 'nodir' / 't'}: there is no directory {tmp_path / 'nodir'} " \
                                      "to make the bearer token in\n"


def test_an_agent_that_never_wrote_here_is_named_with_those_that_did(ui):
    """Regression: `timeline?agent=nosuch` showed an empty strip, as if the agent had been idle."""
    answer = httpx.get(f"{ui.url}/timeline?agent=nosuch", timeout=30)
    assert answer.status_code == 404
    assert answer.json()["detail"] == ("no agent 'nosuch' wrote to this workspace (agents that did: reviewer, "
                                       "writer)")
    assert "reviewer · drafts" in get(ui, "timeline?agent=reviewer")


def test_the_icon_browsers_ask_for_is_served(ui):
    """Regression: `/favicon.ico` was a 404 on every page a browser opened."""
    answer = httpx.get(f"{ui.url}/favicon.ico", timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/vnd.microsoft.icon"
    assert answer.content[:4] == b"\0\0\1\0" and b"PNG" in answer.content[:40]
    linked = get(ui, "asof").split('<link rel="icon" href="', 1)[1].split('"', 1)[0]
    assert httpx.get(f"{ui.url}/{linked}", timeout=30).content == answer.content


def test_mem_ui_outside_a_workspace_is_one_line(tmp_path):
    result = run_mem("-w", tmp_path / "nowhere", "ui")
    assert result.returncode != 0
    assert result.stderr.decode().startswith("error: ") and b"Traceback" not in result.stderr


# --- in a real browser (Playwright driving Debian's chromium) ---------------------------------------

@pytest.fixture(scope="module")
def browser_page(ui, tmp_path_factory):
    with chromium() as (new_page, requests):
        page = new_page()
        page.shots = tmp_path_factory.mktemp("screenshots")
        yield page, requests


def test_moving_the_slider_shows_the_earlier_version(ui, browser_page):
    from playwright.sync_api import expect

    page, requests = browser_page
    page.goto(f"{ui.url}/asof?page=alpha")
    expect(page.locator("#page-text")).to_contain_text("second version of alpha")
    assert int(page.locator("#slider").get_attribute("max")) == ui.v2
    page.locator("#slider").focus()
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(f"**/asof?page=alpha&seq={ui.v1}")
    expect(page.locator("#page-text")).to_contain_text("first version of alpha")
    expect(page.locator("#slider")).to_have_value(str(ui.v1))
    screenshot(page, page.shots, "ui-asof.png")
    page.locator("#slider").focus()
    page.keyboard.press("Home")  # the first event: it offered seq 0, which the server refuses (a raw 400)
    page.wait_for_url("**/asof?page=alpha&seq=1")
    expect(page.locator("#slider")).to_have_value("1")
    assert any(url.endswith("/static/ui.js") for url in requests)


def test_a_link_with_a_moment_opens_that_moment(ui, browser_page):
    from playwright.sync_api import expect

    page, _requests = browser_page
    page.goto(f"{ui.url}/asof?seq={ui.v1}&page=alpha")
    expect(page.locator("#page-text")).to_contain_text("first version of alpha")
    page.locator("#seq").fill(str(ui.v2))
    page.locator("#seq").press("Enter")
    page.wait_for_url(f"**seq={ui.v2}**")
    expect(page.locator("#page-text")).to_contain_text("second version of alpha")
    page.get_by_role("link", name="history", exact=True).click()
    expect(page.locator("#diff")).to_contain_text("+second version of alpha")
    screenshot(page, page.shots, "ui-history.png")


def test_a_conflict_shows_both_heads(ui, browser_page):
    from playwright.sync_api import expect

    page, _requests = browser_page
    page.goto(f"{ui.url}/conflicts")
    heads = page.locator(".conflict .head")
    expect(heads).to_have_count(2)
    expect(heads.filter(has_text="the writer's launch text")).to_have_count(1)
    expect(heads.filter(has_text="the reviewer's launch text")).to_have_count(1)
    screenshot(page, page.shots, "ui-conflicts.png")


def test_clicking_a_timeline_event_shows_its_body(ui, browser_page):
    from playwright.sync_api import expect

    page, _requests = browser_page
    page.goto(f"{ui.url}/timeline")
    page.locator("select[name=layer]").select_option("mind")
    page.wait_for_url("**layer=mind**")
    page.get_by_role("link", name=str(ui.v2), exact=True).click()
    expect(page.locator("#event-body")).to_contain_text("second version of alpha")
    expect(page.locator("#event-diff .add").last).to_have_text("+second version of alpha")
    screenshot(page, page.shots, "ui-timeline.png")


def test_a_damaged_views_database_is_named_as_mem_names_it(tmp_path):
    """Damage deep in the views shows only when a page's query reaches it: the answer names the file."""
    from starlette.testclient import TestClient

    from cli.web.app import create_app
    from conftest import PAGE, damage_table

    root = tmp_path / "ws"
    run_mem("init", "-w", root, check=True)
    run_mem("page", "write", "deploy", "-f", "-", "-w", root, input=PAGE, check=True)
    views = root / ".mem" / "views.db"
    damage_table(views, "pages")
    with TestClient(create_app(root), raise_server_exceptions=False) as client:
        answer = client.get("/asof")
    assert answer.status_code == 503 and answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"].endswith("/damaged") and f"the views database {views} is damaged" in problem["detail"]
    assert "run `mem replay`" in problem["detail"]


@pytest.fixture(scope="module")
def redacted_ui(tmp_path_factory):
    """A workspace where one of two pages was redacted, an `## Always` line added and a file written in
    adf_files, under `mem ui`."""
    from projections.memory import Memory
    from webui import serve_ui

    root = tmp_path_factory.mktemp("redacted") / "ws"
    with Memory.init(root, "writer") as mem:
        kept = mem.write_page("kept", PAGE)
        gone = mem.write_page("gone", PAGE.replace(b"Staging first.", b"the token is in here"))
        always = mem.always_add("Deploys need a second pair of eyes")
        mem.file_write("notes/today.md", b"ship the canary before noon\n")
    assert run_mem("-w", root, "redact", gone.seq, "--reason", "leaked").returncode == 0
    server, url = serve_ui(root)
    yield url, kept.seq, gone.seq, always.seq
    server.terminate()
    server.wait(timeout=10)


def test_a_redacted_event_is_counted_and_listed_under_the_kind_it_was_written_as(redacted_ui):
    url, kept, gone, _always = redacted_ui
    page = httpx.get(f"{url}/timeline", timeout=30).text
    assert "page.ingest (2)" in page  # the counts keep the kind the header holds
    ingests = httpx.get(f"{url}/timeline?kind=page.ingest", timeout=30).text.split('id="events"', 1)[1]
    row = ingests.split(f">{gone}</a>", 1)[1].split("</tr>", 1)[0]
    assert "page.ingest" in row and "redacted" in row and f">{kept}</a>" in ingests
    refused = httpx.get(f"{url}/timeline?kind=redacted", timeout=30)
    assert refused.status_code == 400 and "under the kind it was written as" in refused.text


def test_an_always_line_shows_what_it_changed_in_mind_md(redacted_ui):
    url, _kept, _gone, always = redacted_ui
    event = httpx.get(f"{url}/timeline?event={always}", timeout=30).text
    assert 'href="history?path=mind.md"' in event
    diff = event.split('id="event-diff"', 1)[1].split("</pre>", 1)[0]
    assert '<span class="add">+- Deploys need a second pair of eyes</span>' in diff, diff


def test_the_agents_own_files_are_listed_and_a_search_hit_opens_its_file(redacted_ui):
    url = redacted_ui[0]
    asof = httpx.get(f"{url}/asof", timeout=30).text
    listed = asof.split('id="files"', 1)[1].split("</ul>", 1)[0]
    assert 'file=notes/today.md">notes/today.md</a>' in listed and "mind/kept.md" not in listed
    picker = httpx.get(f"{url}/history", timeout=30).text
    assert "<option>notes/today.md</option>" in picker and "<option>mind.md</option>" in picker
    hits = httpx.get(f"{url}/search?q=canary", timeout=30).text.split('id="hits"', 1)[1]
    link = re.search(r'<a href="([^"]+)">', hits).group(1).replace("&amp;", "&")
    assert link.endswith("&file=notes/today.md"), link
    opened = httpx.get(f"{url}/{link}", timeout=30).text
    assert "ship the canary before noon" in opened.split('id="file-text"', 1)[1].split("</pre>", 1)[0]


def test_the_as_of_page_lists_the_first_shared_files_and_says_how_many_more(tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    import cli.web.app as web_app
    from projections.memory import Memory

    monkeypatch.setattr(web_app, "FILES_LISTED", 2)
    with Memory.init(tmp_path / "ws", "writer") as mem:
        mem.declare_layer("drafts", "notes/drafts/", "pages")
        for slug in ("a", "b", "c"):
            mem.shared_page_write("drafts", slug, PAGE)
    with TestClient(web_app.create_app(tmp_path / "ws")) as client:
        page = client.get("/asof").text
        listed = page.split('id="shared"', 1)[1].split("</ul>", 1)[0]
        assert "notes/drafts/a.md" in listed and "notes/drafts/b.md" in listed and "notes/drafts/c.md" not in listed
        assert "the first 2 of 3 shared files: search or the history page finds the others" in page
        chosen = client.get("/asof", params={"file": "notes/drafts/c.md"}).text  # one not listed still opens
        assert "Staging first." in chosen.split('id="file-text"', 1)[1]


def test_an_event_or_version_after_the_moment_shown_is_refused(ui):
    """The pages as of a moment list the events and versions up to it; one named after it in the URL (`event`, `a`,
    `b`) is a 400 saying so, as one past the head is (on a hub it let an agent dropped from a layer read what the
    layer got after: tests/test_hub_ui.py)."""
    for query, name in ((f"timeline?seq={ui.v1}&event={ui.v2}", "event"),
                        (f"history?seq={ui.v1}&page=alpha&a={ui.v1}&b={ui.v2}", "b"),
                        (f"history?seq={ui.v1}&path=mind/alpha.md&a={ui.v2}&b={ui.v1}", "a")):
        answer = httpx.get(f"{ui.url}/{query}", timeout=30)
        assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json", query
        assert answer.json()["detail"] == (f"{name} {ui.v2} is after the moment shown (seq {ui.v1}): open a later "
                                           "moment to see it"), answer.text
    assert "second version of alpha" in get(ui, f"timeline?seq={ui.v2}&event={ui.v2}")
    assert "+second version of alpha" in get(ui, f"history?seq={ui.v2}&page=alpha&a={ui.v1}&b={ui.v2}")
    assert "did not exist" in get(ui, f"asof?seq={ui.v1 - 1}&page=alpha")  # a page written later: said so


def test_the_history_page_of_a_new_workspace_answers_the_files_it_offers(tmp_path):
    """Regression: on a workspace with no event yet, the file list offered mind.md, and choosing it answered
    `404 there is no file 'mind.md' here` (the as-of page shows it, as `mem init` made it)."""
    from starlette.testclient import TestClient

    from cli.web.app import create_app
    from projections.memory import Memory

    Memory.init(tmp_path / "ws", "writer").close()
    with TestClient(create_app(tmp_path / "ws")) as client:
        offered = client.get("/history").text.split('name="path"', 1)[1].split("</select>", 1)[0]
        paths = re.findall(r"<option>([^<]+)</option>", offered)
        assert paths == ["mind.md", "mind/log.md"], offered
        for path in paths:
            answer = client.get("/history", params={"path": path})
            assert answer.status_code == 200 and "no versions" in answer.text, answer.text
        assert client.get("/history", params={"path": "mind/nosuch.md"}).status_code == 404


def test_mem_ui_and_the_mcp_http_server_limit_what_a_client_may_hold_as_the_hub_does(workspace):
    """Regression (nc15c): `mem ui` and `mem mcp --http` were served by uvicorn's own protocol: no limit on a request's
    head (a 64 MiB header read whole, answered 200), connections that send nothing kept for good, and unreadable
    requests answered in text/plain. They now run on the hub's protocol (sync.server.http_protocol)."""
    from hubserver import assert_heads_too_large_and_unreadable_requests_are_refused
    from test_server_tokens import started, stop

    servers = [started("-w", str(workspace), "ui", "--port", "P"),
               started("mcp", "--http", "127.0.0.1:P", "--workspace", str(workspace))]
    try:
        for _server, port, _lines in servers:
            assert_heads_too_large_and_unreadable_requests_are_refused(port)
    finally:
        for server, _port, _lines in servers:
            stop(server)


def test_views_truncated_under_mem_ui_are_let_go_so_the_next_page_and_every_command_work(tmp_path):
    """Regression (nc17a): with views.db truncated under `mem ui`, every page answered 503 for good and every command
    (`mem replay`, meant to repair it, too) said the database was locked: the server kept the damaged connection, and
    its locks, open."""
    from projections.memory import Memory
    from webui import serve_ui

    root = tmp_path / "ws"
    with Memory.init(root, "writer") as mem:
        for slug in ("one", "two", "three"):
            mem.write_page(slug, PAGE)
    server, url = serve_ui(root)
    try:
        assert httpx.get(f"{url}/asof", timeout=30).status_code == 200
        (root / ".mem" / "views.db").write_bytes(b"")
        answers = [httpx.get(f"{url}/asof", timeout=30).status_code for _ in range(3)]
        assert answers[-1] != 503 or answers[-2] != 503, answers  # a 503 once, not for good
        replayed = run_mem("-w", root, "replay")
        assert replayed.returncode == 0 and b"locked" not in replayed.stderr, replayed.stderr
        assert httpx.get(f"{url}/asof", timeout=30).status_code == 200
    finally:
        server.terminate()
        server.wait(10)


def test_views_found_damaged_in_one_thread_are_let_go_by_every_thread(tmp_path):
    """Regression (flaky test_views_truncated_under_mem_ui...): a server thread that had read the views before they
    were truncated kept its connection open, and a connection to views in WAL mode holds a lock on the file as long as
    it is open: the next thread to open them waited a minute on that lock (and so did `mem replay`). Damage found by one
    thread now closes every idle thread's Memory."""
    import sqlite3
    import threading

    from cli.web.app import Site
    from projections.memory import Memory

    root = tmp_path / "ws"
    with Memory.init(root, "writer") as mem:
        for slug in ("one", "two", "three"):
            mem.write_page(slug, PAGE)
    site = Site(root)
    outcomes = []

    def read():
        try:
            with site.memory() as mem:
                outcomes.append(mem.head())
        except Exception as exc:  # noqa: BLE001 - what the page would answer (a 503) is the outcome
            outcomes.append(type(exc).__name__)

    def in_a_thread():
        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "a page waited on a lock its server holds"

    in_a_thread()  # this thread keeps its Memory, as a server's worker does
    assert outcomes == [3]
    (root / ".mem" / "views.db").write_bytes(b"")
    for _ in range(3):
        in_a_thread()
    assert outcomes[-1] == 3 or outcomes[-2] == 3, outcomes  # a failure once, not for good
    check = sqlite3.connect(root / ".mem" / "views.db", timeout=1)
    try:
        check.execute("BEGIN EXCLUSIVE")  # no connection of the server's left holding its lock
        check.execute("ROLLBACK")
    finally:
        check.close()


def test_mem_ui_shows_the_views_a_replay_put_in_place(tmp_path):
    """Regression (nc20b): `mem ui` reopened the views only when the log had moved on: after a `mem replay` (another
    views file renamed into place) it went on reading the old one, deleted, and kept it open."""
    from projections.memory import Memory
    from webui import serve_ui

    root = tmp_path / "ws"
    with Memory.init(root, "writer") as mem:
        mem.write_page("one", PAGE)
    server, url = serve_ui(root)
    try:
        assert httpx.get(f"{url}/asof", timeout=30).status_code == 200
        views = root / ".mem" / "views.db"
        with sqlite3.connect(views) as db:  # what only the old file says, as a hand on it would
            db.execute("UPDATE pages SET hook = 'only the old views say so'")
        assert "only the old views say so" in httpx.get(f"{url}/asof", timeout=30).text
        run_mem("-w", root, "replay", check=True)
        assert "only the old views say so" not in httpx.get(f"{url}/asof", timeout=30).text
        held = [link for link in open_files(server.pid) if "views.db (deleted)" in link]
        assert held == []
    finally:
        server.terminate()
        server.wait(10)


def test_letting_go_of_every_threads_memory_never_closes_one_a_page_reads(tmp_path):
    """Regression (nc20b): `_let_go` chose the idle Memories under its lock and closed them after it, while a page
    could take one up in between: a connection closed under a read, a 503 ("Cannot operate on a closed database"),
    or SQLite crashing the server. Pages in eight threads read while another thread lets go again and again."""
    import threading

    from cli.web.app import Site
    from projections.memory import Memory

    root = tmp_path / "ws"
    with Memory.init(root, "writer") as mem:
        mem.write_page("one", PAGE)
    site, errors, done = Site(root), [], threading.Event()

    def pages():
        try:
            for _ in range(20):
                with site.memory() as mem:
                    mem.head()
                    mem.show("mind/one.md", mem.checkpoint())
        except Exception as exc:  # noqa: BLE001 - what a page would answer 503 or 500 with
            errors.append(repr(exc))

    def letting_go():
        while not done.is_set():
            site._let_go()

    readers = [threading.Thread(target=pages) for _ in range(8)]
    closer = threading.Thread(target=letting_go)
    closer.start()
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join(120)
    done.set()
    closer.join(30)
    assert errors == []


def test_mem_ui_keeps_its_hold_on_the_views_while_commands_write_them(tmp_path):
    """Regression: a page opening views in a new thread read their header with open() and closed it, which dropped
    every POSIX lock the server held on the file; the next `mem` command to close the views then took itself for
    their last user and deleted their WAL and shared memory under the server's readers. About one page in five
    answered 503 (SQLITE_IOERR_SHORT_READ) while commands wrote, until the server was restarted."""
    from concurrent.futures import ThreadPoolExecutor

    from projections.memory import Memory
    from webui import serve_ui

    root = tmp_path / "ws"
    with Memory.init(root, "writer") as mem:
        mem.write_page("one", PAGE)
    server, url = serve_ui(root)

    def pages(count: int) -> list[int]:
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(lambda _: httpx.get(f"{url}/asof", timeout=30).status_code, range(count)))

    try:
        assert set(pages(16)) == {200}  # pages in several threads, each opening the views
        for line in ("be brief", "cite sources"):
            run_mem("-w", root, "always", "add", line, check=True)
        deleted = [link for link in open_files(server.pid) if "views.db" in link and "(deleted)" in link]
        assert deleted == []
        assert set(pages(40)) == {200}
        assert "cite sources" in httpx.get(f"{url}/asof", timeout=30).text
    finally:
        server.terminate()
        server.wait(10)


def test_the_file_of_a_layer_the_agent_neither_produces_nor_consumes_is_a_404_as_in_the_cli(tmp_path):
    """Regression (nc23b): `mem ui` answered 200 "this file did not exist at seq N" for the file of a layer this agent
    neither produces nor consumes, where `mem show` and the hub's pages say there is none; its own layers' files are
    there from the contract on, empty until their first event."""
    from eventstore.layers import Contract, ContractLayer
    from projections.memory import Memory
    from webui import serve_ui

    root = tmp_path / "ws"
    with Memory.init(root, "alice") as mem:
        mem.write_page("one", PAGE)
        mem.set_contract(Contract(layers={
            "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
            "secret": ContractLayer(path="memory/secret.md", format="entries", producers=["bob"], consumers=["bob"])}))
    server, url = serve_ui(root)
    try:
        assert httpx.get(f"{url}/asof?file=memory/insights.md", timeout=30).status_code == 200
        for path in ("memory/secret.md", "memory/nope.md"):
            answer = httpx.get(f"{url}/asof?file={path}", timeout=30)
            assert answer.status_code == 404 and answer.json()["title"] == f"there is no file {path!r} here", path
    finally:
        server.terminate()
        server.wait(10)


def test_a_renamed_pages_history_opens_each_version_under_the_name_it_had(tmp_path):
    """Regression (nc29a): after a rename, the history page linked each older version to the moment it was made
    under today's name ("this page did not exist"), and any diff of two versions from before the rename was a 404
    ("exists at neither moment"), as `mem diff` between them was; a rename back showed as a whole new file."""
    import html

    from starlette.testclient import TestClient

    from cli.web.app import create_app

    root, page = tmp_path / "ws", tmp_path / "d.md"
    run_mem("init", "-w", root, check=True)
    for text in ("first text", "second text"):
        page.write_bytes(PAGE.replace(b"Staging first.", text.encode()))
        run_mem("-w", root, "page", "write", "deploy-procedure", "--file", page, check=True)
    run_mem("-w", root, "page", "rename", "deploy-procedure", "deploy", check=True)
    diffed = run_mem("-w", root, "diff", "deploy", "--from", "seq:1", "--to", "seq:2", check=True).stdout.decode()
    assert diffed.startswith("--- mind/deploy-procedure.md@1\n+++ mind/deploy-procedure.md@2\n") \
        and "-first text" in diffed and "+second text" in diffed, diffed
    with TestClient(create_app(root)) as client:
        history = client.get("/history?page=deploy").text
        links = [html.unescape(href) for href in re.findall(r'href="(asof\?seq=\d[^"]*)"', history)]
        assert links == ["asof?seq=3&page=deploy", "asof?seq=2&page=deploy-procedure",
                         "asof?seq=1&page=deploy-procedure"], links
        for link, text in zip(links, ("second text", "second text", "first text")):
            assert text in client.get("/" + link).text, link
        assert "(renamed from mind/deploy-procedure.md)" in history
        for a, b in ((1, 2), (0, 1), (0, 2)):
            answer = client.get(f"/history?page=deploy&a={a}&b={b}")
            assert answer.status_code == 200 and f"+{'second' if b == 2 else 'first'} text" in answer.text, (
                a, b, answer.text[:300])
    run_mem("-w", root, "page", "rename", "deploy", "deploy-procedure", check=True)
    back = run_mem("-w", root, "diff", "deploy-procedure", "--from", "seq:3", "--to", "seq:4", check=True)
    assert back.stdout == b"rename from mind/deploy.md@3\nrename to mind/deploy-procedure.md@4\n"


def test_a_contract_another_process_took_places_the_files_the_pages_show(tmp_path):
    """A running `mem ui` shows a layer's file where a contract the agent's own `mem pull` took since places it (the
    MCP server kept the contract it had read: nc34b; the pages read placements from the log, and catch up first)."""
    from teamhub import Team, layer
    from webui import serve_ui

    team = Team(tmp_path, agents=("writer",), contract=layer("insights", "memory/insights.md"))
    server = None
    try:
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-12-01: staging first", check=True)
        team.mem("writer", "sync", check=True)
        server, url = serve_ui(tmp_path / "writer")
        before = httpx.get(f"{url}/asof", timeout=30).text
        team.apply(layer("insights", "memory/moved.md"))
        team.mem("writer", "pull", check=True)
        after = httpx.get(f"{url}/asof", timeout=30).text
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        team.stop()
    assert "memory/insights.md" in before and "memory/moved.md" not in before
    assert "memory/moved.md" in after and "memory/insights.md" not in after, after
