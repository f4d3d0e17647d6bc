"""`mem ui` over plain HTTP: every page answers from a real workspace, as of any moment; bad input is refused."""

import httpx
import pytest

from conftest import run_mem
from webui import UiWorkspace


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    workspace = UiWorkspace(tmp_path_factory.mktemp("ui"))
    yield workspace
    workspace.stop()


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
    assert "content/drafts/launch.md" in now  # the shared layer's file as the agent had it


def test_a_moment_given_as_a_time(ui):
    recorded = httpx.get(f"{ui.url}/asof?seq={ui.v1}", timeout=30).text.split("as of seq")[1].split("·")[1].split("<")[0]
    page = get(ui, f"asof?at={recorded.strip()}&page=alpha")
    assert "first version of alpha" in page and f'value="{ui.v1}"' in page


def test_page_history_lists_versions_and_diffs_them(ui):
    page = get(ui, "history?page=alpha")
    assert page.count('name="a"') == 2 and ">first<" in page and ">second<" in page
    assert '<span class="del">-first version of alpha</span>' in page
    assert '<span class="add">+second version of alpha</span>' in page
    reverse = get(ui, f"history?path=mind/alpha.md&a={ui.v2}&b={ui.v1}")
    assert '<span class="add">+first version of alpha</span>' in reverse


def test_timeline_counts_filters_and_shows_an_event(ui):
    page = get(ui, "timeline")
    assert "writer · mind" in page and "reviewer · drafts" in page and "loop.append (1)" in page
    assert "page.update (1)" in get(ui, "timeline?layer=mind") and "page.update (3)" in page
    only = get(ui, "timeline?kind=page.ingest&layer=mind")
    assert f">{ui.v1}</a>" in only and f">{ui.v2}</a>" not in only
    event = get(ui, f"timeline?event={ui.v2}")
    assert "second version of alpha" in event and "digest " in event and 'href="history?path=mind/alpha.md"' in event


def test_conflicts_show_each_head(ui):
    page = get(ui, "conflicts")
    assert "drafts / launch" in page
    assert "the writer&#39;s launch text" in page and "the reviewer&#39;s launch text" in page


def test_search_and_contract(ui):
    assert "Alpha" in get(ui, "search?q=second")
    assert "no matches" in get(ui, f"search?q=second&seq={ui.v1}")
    contract = get(ui, "contract")
    assert "content/drafts/" in contract and "drafts" in contract


@pytest.mark.parametrize("query, status, code", [
    ("asof?seq=abc", 400, "invalid-input"), ("asof?seq=99999", 400, "invalid-input"),
    ("asof?at=yesterday", 400, "invalid-input"), ("asof?seq=1&at=2026-01-01", 400, "invalid-input"),
    ("timeline?event=99999", 404, "not-found")])
def test_bad_moments_are_problems(ui, query, status, code):
    answer = httpx.get(f"{ui.url}/{query}", timeout=30)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("/" + code)


def test_mem_ui_outside_a_workspace_is_one_line(tmp_path):
    result = run_mem("-w", tmp_path / "nowhere", "ui")
    assert result.returncode != 0
    assert result.stderr.decode().startswith("error: ") and b"Traceback" not in result.stderr
