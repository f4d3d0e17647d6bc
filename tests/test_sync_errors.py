"""Errors at the edge of sync: a hub that is not there, a URL that is not one, an answer that is not a
hub's. Each is one line naming the remote and its URL, exit 1, never a traceback."""

import contextlib
import http.server
import json
import socket
import threading

import pytest

from conftest import log_rows, run_mem
from hubserver import free_port
from sync.client import BadAnswer, HubClient, HubUnreachable


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    run_mem("init", "-w", root, "--agent", "alice", check=True)
    (tmp_path / "alice.token").write_text("mlg_token\n")
    return root


def add_remote(root, url):
    return run_mem("remote", "add", "origin", url, "--token-file", root.parent / "alice.token", "-w", root)


def set_remote(root, url):
    """A remote added while its hub answered (`remote add` asks the hub who the token is)."""
    (root / ".mem" / "remotes.json").write_text(json.dumps(
        {"origin": {"name": "origin", "url": url, "token_file": str(root.parent / "alice.token"), "agent": "alice"}}))


def one_error_line(result) -> str:
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1, result
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in result.stderr.decode()
    return lines[0]


@pytest.mark.parametrize("command", ["push", "pull", "sync"])
def test_a_closed_port_is_one_line_naming_the_remote(ws, command):
    url = f"http://127.0.0.1:{free_port()}"
    set_remote(ws, url)
    before = log_rows(ws)
    line = one_error_line(run_mem(command, "-w", ws))
    assert line.startswith(f"error: cannot reach remote origin at {url}: ") and "refused" in line.lower()
    assert line.endswith("(no hub listens there: is `mem serve` running, and is the URL right?)"), line  # (nc13a)
    assert log_rows(ws) == before


class FakeHub(http.server.BaseHTTPRequestHandler):
    """A remote that answers every GET with `answer(path)`: (content type, body)."""

    def do_GET(self):
        ctype, body = self.answer(self.path)
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class NotAHub(FakeHub):
    def answer(self, path):
        return "text/html", b"<html>hello</html>" if "contract" in path else json.dumps({"unexpected": 1}).encode()


@pytest.fixture
def not_a_hub():
    with serving(NotAHub) as url:
        yield url


@pytest.mark.parametrize("command", ["push", "pull", "sync"])
def test_an_answer_that_is_not_a_hubs_is_one_line(ws, not_a_hub, command):
    set_remote(ws, not_a_hub)
    line = one_error_line(run_mem(command, "-w", ws))
    assert line.startswith(f"error: remote origin at {not_a_hub} answered /v1/contract with something that is "
                           "not a mindlog hub's answer")


@pytest.mark.parametrize("command", ["push", "pull", "status"])
def test_a_plain_web_server_as_the_remote_is_named_in_one_line(ws, tmp_path, command):
    """Regression: a 404 page with no problem document said "hub refused: HTTP 404", naming no remote or URL."""
    import functools

    with serving(functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))) as url:
        set_remote(ws, url)
        result = run_mem(command, "-w", ws)
    if command == "status":  # status reports a remote it cannot ask, and goes on
        out = result.stdout.decode()
        assert f"behind the hub: unknown (remote origin at {url} answered /v1/" in out, out
        assert "with HTTP 404 and no problem document, as no mindlog hub answers: is that the hub's URL?)" in out, out
    else:
        assert one_error_line(result) == (f"error: remote origin at {url} answered /v1/contract with HTTP 404 and no "
                                          "problem document, as no mindlog hub answers: is that the hub's URL?")


def test_remote_add_to_a_closed_port_is_one_line(ws):
    url = f"http://127.0.0.1:{free_port()}"
    line = one_error_line(add_remote(ws, url))
    assert line.startswith(f"error: cannot reach remote origin at {url}: ")


def test_bad_urls(ws, tmp_path):
    for url in ("ftp://example", "http://", "http://[::1", "not a url"):
        line = one_error_line(add_remote(ws, url))
        assert repr(url) in line
    set_remote(ws, "http://[::1")
    line = one_error_line(run_mem("pull", "-w", ws))
    assert line.startswith("error: ") and "origin" in line and "http://[::1" in line


def test_a_hub_that_never_answers_times_out_as_one_error():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        client = HubClient(url, "mlg_token", timeout=0.3, name="slow")
        with pytest.raises(HubUnreachable, match=f"cannot reach remote slow at {url}: "):
            client.contract()
        client.close()


def test_errors_are_mem_errors():
    from eventstore.errors import MemError
    from sync.hub import HubError

    assert issubclass(HubError, MemError) and issubclass(HubUnreachable, MemError)
    assert issubclass(BadAnswer, MemError)


class RepeatingHub(FakeHub):
    """A hub that sends the same page of events that do not decode, its cursor never moving past them
    (`moving`: a hub that moves it, then has nothing more)."""

    moving = False

    def answer(self, path):
        if "contract" in path:
            answer = {"contract": {"layers": {"insights": {"path": "memory/insights.md", "format": "entries",
                                                           "producers": ["*"], "consumers": ["*"]}}},
                      "position": 2, "agent": "alice", "head": 2}
        elif self.moving and "cursor=past" in path or path.startswith("/v1/redactions"):
            answer = {"events": [], "cursor": "past", "more": False, "head": 2}
        else:
            answer = {"events": ["not an event", 12], "cursor": "past" if self.moving else "", "more": False,
                      "head": 2}
        return "application/json", json.dumps(answer).encode()


class MovingHub(RepeatingHub):
    moving = True


def test_a_hub_whose_cursor_does_not_move_past_its_events_stops_the_pull_in_one_line(ws):
    with serving(RepeatingHub) as url:
        set_remote(ws, url)
        before = log_rows(ws)
        line = one_error_line(run_mem("pull", "-w", ws))
        assert line == (f"error: remote origin at {url} sent 2 events without moving the cursor past them: pull "
                        "stopped (asking again would bring the same page back)")
        assert log_rows(ws) == before


def test_events_that_do_not_decode_are_told_as_such_not_as_an_id_and_a_position(ws):
    with serving(MovingHub) as url:
        set_remote(ws, url)
        done = run_mem("pull", "-w", ws)
    warnings = [line for line in done.stderr.decode().splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2 and all(w.startswith("warning: rejected an undecodable event: ") for w in warnings)
    assert "None" not in done.stderr.decode()


class OlderHub(MovingHub):
    """A hub that predates GET /v1/redactions: it answers it 404, as any unknown path."""

    def do_GET(self):
        if not self.path.startswith("/v1/redactions"):
            return super().do_GET()
        body = json.dumps({"type": "https://mindlog.dev/problems/http-404", "title": "Not Found", "status": 404})
        self.send_response(404)
        self.send_header("content-type", "application/problem+json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def test_a_hub_that_predates_the_redactions_of_an_agents_events_is_pulled_from_all_the_same(ws):
    with serving(OlderHub) as url:
        set_remote(ws, url)
        done = run_mem("pull", "-w", ws)
    assert done.returncode == 0 and done.stdout.startswith(b"pulled 0 events"), done
    assert [line for line in done.stderr.decode().splitlines() if not line.startswith("warning: rejected")] == []


class RestlessHub(MovingHub):
    """A hub whose GET /v1/redactions always says there is more, with no events and a new cursor each time."""

    asked = 0

    def answer(self, path):
        if not path.startswith("/v1/redactions"):
            return super().answer(path)
        RestlessHub.asked += 1
        return "application/json", json.dumps({"events": [], "cursor": f"c{RestlessHub.asked}", "more": True,
                                               "head": 2}).encode()


def test_a_hub_that_says_there_are_more_redactions_and_sends_none_is_not_asked_forever(ws):
    """Regression (nc19a): such a hub kept `mem pull` asking, thousands of requests a second, for good."""
    with serving(RestlessHub) as url:
        set_remote(ws, url)
        done = run_mem("pull", "-w", ws)
    assert done.returncode == 0 and RestlessHub.asked <= 3, (RestlessHub.asked, done)  # once per contract taken
