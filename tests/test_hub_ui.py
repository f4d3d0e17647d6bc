"""The hub's pages at /ui of `mem serve`: behind a token, an agent sees the layers it consumes, the
admin every layer; as of a moment they show what each agent had received by then."""

import httpx
import pytest

from hubui import UiHub, hub_pages
from teamhub import CONTRACT as TEAM_CONTRACT
from webui import BAD_NUMBERS, chromium, screenshot


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    made = UiHub(tmp_path_factory.mktemp("hubui"))
    yield made
    made.stop()


def html(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    return answer.text


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer mlg_not-a-token"}, {"Authorization": "Basic x"}])
def test_without_a_known_token_the_pages_are_a_401(hub, headers):
    answer = httpx.get(f"{hub.url}/ui/asof", headers=headers, timeout=30)
    assert answer.status_code == 401 and answer.headers["content-type"].startswith("text/html")
    assert "a token is needed" in answer.text and "reviews" not in answer.text


def test_an_agent_sees_only_the_layers_it_consumes(hub):
    review = hub.position("reviews", "monday")
    for page in ("asof", "timeline", "contract", "search?q=monday", "history"):
        assert "memory/reviews.md" not in html(hub.get(page, "writer")) and "monday" not in \
            html(hub.get(page, "writer")).replace('value="monday"', "")
    assert "content/drafts/launch.md" in html(hub.get("asof", "writer"))
    assert hub.get("asof?file=memory/reviews.md", "writer").status_code == 404
    for page in ("history?path=memory/reviews.md", "timeline?layer=reviews", f"timeline?event={review}"):
        refused = hub.get(page, "writer")
        assert refused.status_code == 404 and refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"].endswith("/not-found")
    for who in ("reviewer", "admin"):
        assert "[DECISION]" in html(hub.get("asof?file=memory/reviews.md", who)) and "monday" in html(hub.get(f"timeline?event={review}", who))
        assert "memory/reviews.md" in html(hub.get("history", who))


def test_a_token_in_the_address_becomes_a_cookie_that_holds_no_token(hub):
    """Regression: the cookie held the token itself, an agent's push and pull credential, and a browser sends a
    host's cookies to every port of it (another server there got it). It holds a session id the pages accept and
    the hub's API refuses."""
    port = httpx.URL(hub.url).port
    with httpx.Client(base_url=hub.url, timeout=30) as client:
        answer = client.get(f"/ui/timeline?token={hub.tokens['writer']}&layer=drafts")
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/timeline?layer=drafts"
        cookie = answer.headers["set-cookie"]
        # one name per port: two hubs on one host shared `mindlog_ui` and logged each other out
        name, _, value = cookie.split(";", 1)[0].partition("=")
        assert name == f"mindlog_session_{port}" and len(value) >= 32 and hub.tokens["writer"] not in cookie
        assert all(part in cookie.lower() for part in ("httponly", "samesite=strict", "path=/ui"))
        assert "writer · drafts" in html(client.get("/ui/timeline?layer=drafts"))
    cookie_only = {"Cookie": f"{name}={value}"}
    assert "writer · drafts" in html(httpx.get(f"{hub.url}/ui/timeline?layer=drafts", headers=cookie_only, timeout=30))
    for headers in ({"Authorization": f"Bearer {value}"}, {"Cookie": f"{name}={value}"},
                    {"Cookie": f"{name}={value}", "Authorization": f"Bearer {value}"}):
        assert httpx.get(f"{hub.url}/v1/contract", headers=headers, timeout=30).status_code == 401
        assert httpx.get(f"{hub.url}/v1/pull?after=0", headers=headers, timeout=30).status_code == 401
        assert httpx.post(f"{hub.url}/v1/push", headers=headers, content=b'{"events": []}', timeout=30
                          ).status_code == 401
    assert httpx.get(f"{hub.url}/v1/contract", headers={"Authorization": f"Bearer {hub.tokens['writer']}"},
                     timeout=30).status_code == 200  # the token itself still is the API's
    stale = httpx.get(f"{hub.url}/ui/asof", headers={"Cookie": f"{name}=mlg_not-a-session"}, timeout=30)
    assert stale.status_code == 401 and "session is not this server" in stale.text


def test_the_mirror_keeps_hub_positions_and_times(hub):
    from eventstore.workspace import Workspace
    from sync.storage import open_storage

    html(hub.get("asof", "admin"))
    storage = open_storage(str(hub.team.db))
    ws = Workspace(hub.team.db.parent / "hub.db.ui")
    log = ws.open_log(ws.config())
    try:
        events = storage.pull(0, ["drafts", "reviews", "briefs", "_contract"], 100)
        assert len(events) == storage.head() >= 4
        for event in events:
            copy = log.get_by_seq(event.seq)
            assert (copy.id, copy.recorded_at, copy.digest) == (event.id, event.recorded_at, event.digest)
    finally:
        log.close()
        storage.close()


def test_as_of_a_moment_each_agent_had_received(hub):
    zero, review, one = (hub.position("drafts", "draft zero"), hub.position("reviews", "monday"),
                         hub.position("drafts", "draft one"))
    page = html(hub.get(f"asof?seq={one}", "admin"))
    received = page.split('id="received"', 1)[1].split("</table>", 1)[0]
    assert f'<td>reviewer</td><td><a href="asof?seq={review}">' in received  # pulled after its own entry
    then = html(hub.get(f"asof?seq={review}&file=content/drafts/launch.md", "admin"))
    assert "draft zero" in then and "draft one" not in then
    assert "<td>reviewer</td>" not in html(hub.get(f"asof?seq={zero}", "writer"))  # an agent sees its own only
    contract = html(hub.get(f"contract?seq={one}", "admin")).split('data-layer="drafts"', 1)[1].split("</tr>", 1)[0]
    assert "<div>writer: 2 events</div>" in contract and f"reviewer: up to seq {review}" in contract
    early = html(hub.get(f"contract?seq={zero}", "admin")).split('data-layer="drafts"', 1)[1].split("</tr>", 1)[0]
    assert "<div>writer: 1 event</div>" in early


def test_in_a_browser_an_agent_token_hides_what_it_does_not_consume(hub, tmp_path):
    from playwright.sync_api import expect

    with chromium() as (new_page, requests):
        writer = new_page()
        writer.goto(f"{hub.url}/ui/?token={hub.tokens['writer']}")
        writer.wait_for_url("**/ui/asof")
        writer.get_by_role("link", name="content/drafts/launch.md").click()
        expect(writer.locator("#file-text")).to_contain_text("draft one")
        expect(writer.get_by_text("memory/reviews.md")).to_have_count(0)
        writer.get_by_role("link", name="Timeline").click()
        expect(writer.locator("select[name=layer] option")).to_have_text(["all", "drafts (2)"])
        admin = new_page()
        admin.goto(f"{hub.url}/ui/timeline?token={hub.tokens['admin']}")
        expect(admin.locator("select[name=layer] option")).to_have_count(5)  # all, _contract, briefs, drafts, reviews
        admin.get_by_role("link", name="Contract").click()
        expect(admin.locator("tr[data-layer=reviews] .produced")).to_contain_text("reviewer: 1 event")
        admin.get_by_role("link", name="As of").click()
        expect(admin.locator("#received")).to_contain_text("reviewer")
        admin.get_by_role("link", name="memory/reviews.md").click()
        expect(admin.locator("#file-text")).to_contain_text("[DECISION]")
        screenshot(admin, tmp_path, "ui-hub.png")
    assert any("/ui/static/ui.css" in url for url in requests)


def test_a_layer_shows_as_of_a_moment_as_the_contract_then_allowed(hub):
    """`briefs` was dropped by the last contract change: the mirror still copies it (every layer ever
    shared), an agent sees it as of a moment when it consumed the layer and not after, the admin always."""
    brief = hub.position("briefs", "the venue")
    then = html(hub.get(f"asof?seq={brief}", "writer"))
    assert "memory/briefs.md" in then.split('id="shared"', 1)[1].split("</ul>", 1)[0]
    assert "the venue holds 200" in html(hub.get(f"asof?seq={brief}&file=memory/briefs.md", "writer"))
    assert "the venue" in html(hub.get(f"timeline?seq={brief}&event={brief}", "writer"))
    assert "memory/briefs.md" in html(hub.get(f"history?seq={brief}", "writer"))
    for page in ("asof?file=memory/briefs.md", f"timeline?event={brief}", "history?path=memory/briefs.md",
                 "timeline?layer=briefs"):
        refused = hub.get(page, "writer")  # now: the contract in force no longer shares it
        assert refused.status_code == 404 and refused.json()["type"].endswith("/not-found"), page
    assert "memory/briefs.md" not in html(hub.get("asof", "writer")) and "holds 200" not in html(
        hub.get("search?q=venue", "writer"))
    assert "holds 200" in html(hub.get(f"search?q=venue&seq={brief}", "writer"))
    for page in ("asof?file=memory/briefs.md", f"asof?seq={brief}&file=memory/briefs.md", "search?q=venue"):
        assert "holds 200" in html(hub.get(page, "admin")), page


def test_the_pages_follow_the_hub_as_agents_push(hub):
    """Runs last: it adds an entry. The contract counts it at once (the mirror and the counts catch up per page)."""
    hub.team.mem("reviewer", "entry", "add", "reviews", "[FACT] the venue is booked", check=True)
    hub.team.mem("reviewer", "sync", check=True)
    row = html(hub.get("contract", "admin")).split('data-layer="reviews"', 1)[1].split("</tr>", 1)[0]
    assert "<div>reviewer: 2 events</div>" in row
    received = html(hub.get("asof", "admin")).split('id="received"', 1)[1]
    assert "<td>reviewer</td>" in received  # now: its pulls after the last event count


def test_a_file_in_no_layer_is_a_404_that_names_it(tmp_path):
    """In process: the hub's /ui app over a hub storage and its mirror, no server."""
    with hub_pages(tmp_path, TEAM_CONTRACT) as (client, _storage, tokens):
        token = tokens["writer"]
        for who in (token, "admin-token"):
            for page in ("asof?file=memory/nosuch.md", "history?path=memory/nosuch.md"):
                refused = client.get(f"/{page}", headers={"Authorization": f"Bearer {who}"})
                assert refused.status_code == 404 and refused.headers["content-type"] == "application/problem+json"
                problem = refused.json()
                assert problem["type"].endswith("/not-found") and "'memory/nosuch.md'" in problem["detail"], problem
        assert client.get("/asof?file=memory/insights.md", headers={"Authorization": f"Bearer {token}"}
                          ).status_code == 200
        early = client.get("/asof?at=2001-01-01", headers={"Authorization": f"Bearer {token}"})
        assert early.status_code == 400 and "is before this hub existed" in early.json()["detail"], early.text


def test_what_is_no_number_is_a_problem_saying_so(tmp_path):
    with hub_pages(tmp_path, TEAM_CONTRACT) as (client, storage, _tokens):
        storage.push([entry("insights", "the file exists", "writer")])
        for query in BAD_NUMBERS:
            answer = client.get("/" + query.replace("mind/alpha.md", "memory/insights.md"),
                                headers={"Authorization": "Bearer admin-token"})
            assert answer.status_code == 400 and answer.json()["type"].endswith("/invalid-input"), (query, answer.text)


def test_a_page_on_a_hub_is_a_404_and_an_unsafe_one_a_400(tmp_path):
    """Regression: the hub keeps no wiki page, yet `asof?page=anything` (even `..%2Fx`) was a 200 saying the
    page "did not exist" then, and its history link a 404."""
    with hub_pages(tmp_path, TEAM_CONTRACT) as (client, _storage, tokens):
        for who in (tokens["writer"], "admin-token"):
            for query, status in (("asof?page=anything", 404), ("asof?page=..%2Fx", 400)):
                answer = client.get(f"/{query}", headers={"Authorization": f"Bearer {who}"})
                assert answer.status_code == status and answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"].endswith("/unsafe-path")


def entry(layer: str, text: str, agent: str):
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend

    return new_event(EntryAppend(type="FACT", date="2026-12-01", content=text), agent=agent, layer=layer)


HIDDEN = TEAM_CONTRACT + """
[layers.reviews]
path = "memory/reviews.md"
format = "entries"
producers = ["reviewer"]
consumers = ["reviewer"]
"""


def test_an_agent_search_finds_its_layers_hits_however_many_hidden_ones_rank_above(tmp_path):
    """Regression: the top 30 hits were taken first and those in layers the token may not see dropped after,
    so 35 better hits in `reviews` left the writer "no matches" for its own insights entry."""
    with hub_pages(tmp_path, HIDDEN, agents=("writer", "reviewer")) as (client, storage, tokens):
        storage.push([entry("reviews", f"zebra zebra {i}", "reviewer") for i in range(35)])
        storage.push([entry("insights", "one zebra was seen in the insights, far away from the others", "writer")])
        for who, shown in ((tokens["writer"], 1), (tokens["reviewer"], 30), ("admin-token", 30)):
            page = html(client.get("/search?q=zebra", headers={"Authorization": f"Bearer {who}"}))
            hits = page.split('id="hits"', 1)[1].split("</ol>", 1)[0]
            assert hits.count("<li>") == shown, (who, hits)
            assert ("seen in the insights" in hits) == (shown == 1)
        before = html(client.get("/search?q=zebra&seq=1", headers={"Authorization": f"Bearer {tokens['writer']}"}))
        assert "no matches" in before  # as of the contract alone


def test_mem_serve_catches_the_pages_up_before_any_page_asks(hub, tmp_path):
    """The first page of a big hub would otherwise wait for the whole mirror copy and fold."""
    import time

    from hubserver import mem_serve
    from projections.memory import Memory
    from sync.storage import open_storage

    storage = open_storage(str(hub.team.db))
    expected = storage.head()
    storage.close()
    mirror = hub.team.db.with_name(hub.team.db.name + ".ui")  # made by `hub`'s own server: served apart
    with mem_serve(str(hub.team.db)):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if mirror.joinpath(".mem", "views.db").exists():
                mem = Memory.open(mirror)
                try:
                    if mem.head() == expected and mem.checkpoint() == expected:
                        break
                finally:
                    mem.close()
            time.sleep(0.1)
        else:
            raise AssertionError("the mirror did not catch up by itself")


def test_a_page_asked_while_the_pages_get_ready_says_how_far_they_got(tmp_path, monkeypatch):
    """In process: a warm-up that cannot finish yet; a page answers 503 with the progress at once, then
    the page itself once the warm-up is done."""
    import threading

    from starlette.testclient import TestClient

    import cli.web.hub as web_hub
    from sync.contracts import parse_contract
    from sync.mirror import HubMirror
    from sync.storage import open_storage

    release = threading.Event()

    class SlowMirror(HubMirror):
        def catch_up(self, progress=None):
            release.wait(30)
            return super().catch_up(progress)

    monkeypatch.setattr(web_hub, "READY_WAIT", 0.05)
    storage = open_storage(str(tmp_path / "hub.db"))
    try:
        storage.apply_contract(parse_contract(TEAM_CONTRACT))
        token = storage.add_agent("writer")
        app = web_hub.hub_ui(storage, SlowMirror(storage, tmp_path / "ui"), "admin-token", warm_up=True)
        with TestClient(app) as client:
            waiting = client.get("/asof", headers={"Authorization": f"Bearer {token}"})
            assert waiting.status_code == 503 and waiting.headers["retry-after"] == "2"
            assert "getting ready" in waiting.text and "0 of 1 hub events copied, 0 of them folded" in waiting.text
            assert client.get("/asof").status_code == 401  # the token is still checked first
            release.set()
            for _ in range(200):
                answer = client.get("/asof", headers={"Authorization": f"Bearer {token}"})
                if answer.status_code != 503:
                    break
            assert answer.status_code == 200 and "As of seq 1 " in answer.text
    finally:
        storage.close()


def test_the_warm_up_says_the_views_are_being_finished_once_every_event_is_folded():
    """It said "40,001 of 40,001 hub events copied, 40,001 of them folded so far" for 15 s while the views'
    indexes were finished, which read as done and yet not ready."""
    import cli.web.hub as web_hub

    assert web_hub.warm_up_progress(10, 4, 12) == "10 of 12 hub events copied, 4 of them folded so far."
    assert web_hub.warm_up_progress(12, 12, 12) == ("All 12 hub events copied and folded; the views' indexes are "
                                                   "being finished.")
    assert web_hub.warm_up_progress(15, 20, 12).startswith("All 12 hub events")  # counts past the total clamp
    assert web_hub.warm_up_progress(0, 0, 0) == "0 of 0 hub events copied, 0 of them folded so far."


def test_an_agent_filter_naming_no_agent_of_the_hub_is_refused_with_those_it_can_see(hub):
    refused = hub.get("timeline?agent=nosuch", "writer")
    assert refused.status_code == 404 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["detail"] == "no agent 'nosuch' wrote to this hub (agents that did: writer)"
    assert hub.get("timeline?agent=reviewer", "writer").status_code == 404  # only in layers the writer cannot see
    assert "reviewer · reviews" in html(hub.get("timeline?agent=reviewer", "admin"))
    # the hub's own contract changes are no agent's: `_hub` was named among the agents
    assert hub.get("timeline?agent=nosuch", "admin").json()["detail"].endswith("did: reviewer, writer)")
    icon = html(hub.get("asof", "writer")).split('<link rel="icon" href="', 1)[1].split('"', 1)[0]
    assert hub.get(icon, "writer").headers["content-type"] == "image/vnd.microsoft.icon"
    assert '<link rel="icon" href="data:,">' in hub.get("asof").text  # the 401 page asks for no icon


SECRET = TEAM_CONTRACT + """
[layers.secret]
path = "memory/secret.md"
format = "entries"
producers = ["boss"]
consumers = ["boss", "spy"]

[layers.plans]
path = "content/plans/"
format = "pages"
producers = ["boss"]
consumers = ["boss", "spy"]
"""


def test_a_dropped_consumer_reads_nothing_written_after_the_moment_shown(tmp_path):
    """Regression: an agent dropped from a layer's consumers read every later event and version of it as of a
    moment when it still consumed it: `timeline?seq=N&event=M` and `history?seq=N&...&b=M`, M after N; and
    `asof?seq=N&file=` told whether a page of the layer was written after N (a 200 against a 404), and
    `timeline?seq=N&agent=` whether an agent wrote after N."""
    import time

    from eventstore.envelope import new_event
    from eventstore.kinds import PageIngest
    from sync.contracts import parse_contract

    def page(slug: str, text: str):
        return new_event(PageIngest(slug=slug, frontmatter={"type": "plan"}, text=text), agent="boss", layer="plans")

    with hub_pages(tmp_path, SECRET, agents=("boss", "spy", "late")) as (client, storage, tokens):
        storage.push([entry("secret", "old secret", "boss"), page("old", "old plan")])
        then = storage.head()
        time.sleep(1.1)  # the agents' counts are kept per second: what came after, in a second of its own
        storage.apply_contract(parse_contract(SECRET.replace('["boss", "spy"]', '["boss"]')))
        storage.push([entry("secret", "NEW SECRET", "boss"), page("later", "NEW PLAN"),
                      entry("insights", "hi", "late")])
        secret, plan = storage.head() - 2, storage.head() - 1
        spy, boss = ({"Authorization": f"Bearer {tokens[who]}"} for who in ("spy", "boss"))
        assert "old secret" in html(client.get(f"/timeline?seq={then}&event={then - 1}", headers=spy))
        assert "old secret" in html(client.get(f"/history?seq={then}&path=memory/secret.md", headers=spy))
        for query in (f"timeline?seq={then}&event={secret}", f"timeline?seq={then}&event={plan}",
                      f"history?seq={then}&path=memory/secret.md&a=0&b={secret}",
                      f"history?seq={then}&path=memory/secret.md&a={secret}&b={then - 1}"):
            answer = client.get(f"/{query}", headers=spy)
            assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json", query
            assert answer.json()["detail"].endswith(f"is after the moment shown (seq {then}): open a later moment "
                                                    "to see it") and "NEW" not in answer.text, answer.text
        for query in (f"asof?seq={then}&file=content/plans/later.md",
                      f"history?seq={then}&path=content/plans/later.md"):
            answer = client.get(f"/{query}", headers=spy)  # written after the moment: as if it never was
            assert answer.status_code == 404 and answer.json()["detail"] == (
                "there is no file 'content/plans/later.md' here"), (query, answer.text)
        late = client.get(f"/timeline?seq={then}&agent=late", headers=spy)
        assert late.status_code == 404 and late.json()["detail"] == (
            "no agent 'late' wrote to this hub (agents that did: boss)"), late.text
        assert "late · insights" in html(client.get("/timeline?agent=late", headers=spy))
        assert "NEW PLAN" in html(client.get(f"/timeline?event={plan}", headers=boss))  # a consumer still: now
        assert "NEW SECRET" in html(client.get(f"/history?path=memory/secret.md&a=0&b={secret}", headers=boss))
        assert "old plan" in html(client.get(f"/asof?seq={then}&file=content/plans/old.md", headers=spy))


def test_an_agent_named_admin_is_an_ordinary_agent(tmp_path):
    """Regression: the admin token's viewer was the string "admin", so an agent of that name got the admin view
    (every layer ever shared, every agent's pull cursor, the contract changes)."""
    with hub_pages(tmp_path, HIDDEN, agents=("admin", "reviewer")) as (client, storage, tokens):
        storage.push([entry("reviews", "only the reviewer reads this", "reviewer")])
        reviews = storage.head()
        storage.record_pull("reviewer", reviews)
        agent = {"Authorization": f"Bearer {tokens['admin']}"}
        for query in ("asof?file=memory/reviews.md", f"timeline?event={reviews}", "timeline?event=1",
                      "timeline?layer=reviews", "history?path=memory/reviews.md"):
            answer = client.get(f"/{query}", headers=agent)
            assert answer.status_code == 404 and answer.json()["type"].endswith("/not-found"), (query, answer.text)
        contract = html(client.get("/contract", headers=agent))
        assert "memory/reviews.md" not in contract and 'data-layer="insights"' in contract
        assert "only the reviewer" not in html(client.get("/search?q=reviewer", headers=agent))
        received = html(client.get("/asof", headers=agent)).split('id="received"', 1)[-1]
        assert "<td>reviewer</td>" not in received
        admin = {"Authorization": "Bearer admin-token"}
        assert "only the reviewer reads this" in html(client.get("/asof?file=memory/reviews.md", headers=admin))
        assert "memory/reviews.md" in html(client.get("/contract", headers=admin))
        assert "<td>reviewer</td>" in html(client.get("/asof", headers=admin)).split('id="received"', 1)[1]
