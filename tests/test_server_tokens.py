"""`mem ui` and `mem mcp --http` on an address other hosts reach require a bearer token (cli/tokens.py);
on loopback they ask none unless `--token-file` is given. The servers bind 0.0.0.0 (the code path of a
reachable address) and the tests connect to 127.0.0.1 only, over real HTTP."""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import anyio
import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import PAGE, mem_command, run_mem
from projections.memory import Memory
from sync.server import free_port

HOW = ("open a page once with `?token=<token>` (as the URL printed at start, unless the token came from a file), "
       "or send `Authorization: Bearer <token>`")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def get(url: str, headers: dict | None = None, data: bytes | None = None):
    """(status, headers, body) of one request, whatever the status."""
    try:
        with OPENER.open(urllib.request.Request(url, data=data, headers=headers or {}), timeout=30) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.headers, answer.read()


def started(*args, env: dict | None = None) -> tuple[subprocess.Popen, int, list[str]]:
    """A `mem` server started with --port/--http given by `args` (P stands for a free port), once it says
    where it listens: (the process, the port, the lines it printed). `env`: variables added to this one's."""
    port = free_port()
    server = subprocess.Popen([*mem_command(), *(a.replace("P", str(port)) for a in args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    lines = [server.stdout.readline().rstrip("\n")]
    if "--http" in args and "0.0.0.0" in " ".join(args) and "--token-file" not in args and not env:
        lines.append(server.stdout.readline().rstrip("\n"))
    deadline = time.monotonic() + 30
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        assert server.poll() is None, server.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return server, port, lines


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(10)


def unauthorized(status, headers, body, title: str) -> None:
    assert status == 401 and headers["content-type"] == "application/problem+json"
    assert headers["www-authenticate"] == 'Bearer realm="mindlog"'
    assert json.loads(body) == {"type": "https://mindlog.dev/problems/unauthorized", "title": title, "status": 401,
                                "detail": title}


def test_ui_off_loopback_requires_the_token_it_prints_and_a_browser_gives_it_once(workspace):
    """Regression: `mem ui --host 0.0.0.0` served the workspace to anyone who reached it, with a warning."""
    with Memory.open(workspace) as mem:
        mem.write_page("deploy", PAGE)
    server, port, [line] = started("-w", str(workspace), "ui", "--host", "0.0.0.0", "--port", "P")
    try:
        url, _, token = line.removeprefix("mindlog ui: ").partition("?token=")
        assert url == f"http://0.0.0.0:{port}/asof" and len(token) >= 32
        base = f"http://127.0.0.1:{port}"
        unauthorized(*get(f"{base}/asof"), "a token is needed here: " + HOW)
        unauthorized(*get(f"{base}/asof", {"Authorization": "Bearer nope"}), "the token is not this server's")
        unauthorized(*get(f"{base}/static/ui.css"), "a token is needed here: " + HOW)
        status, _, body = get(f"{base}/asof?seq=1&page=deploy", {"Authorization": f"Bearer {token}"})
        assert status == 200 and b"Staging first." in body
        status, headers, _ = get(f"{base}/asof?seq=1&token={token}&page=deploy")
        assert status == 303 and headers["location"] == "/asof?seq=1&page=deploy"
        cookie = headers["set-cookie"]
        assert cookie.startswith(f"mindlog_session_{port}=") and "HttpOnly" in cookie and \
            "SameSite=strict" in cookie and "Path=/" in cookie
        status, _, body = get(f"{base}/asof?seq=1&page=deploy", {"Cookie": cookie.split(";")[0]})
        assert status == 200 and b"Staging first." in body
        unauthorized(*get(f"{base}/asof", {"Cookie": f"mindlog_session_{port}=nope"}),
                     "this browser's session is not this server's (it restarted, or the session was forgotten): " + HOW)
    finally:
        stop(server)


def test_the_ui_cookie_holds_no_token_and_its_redirect_stays_on_this_server(workspace):
    """Regression: the cookie held the token itself, and a browser sends a host's cookies to every port of it (any
    other server there got the token). It holds a session id, which is no token."""
    server, port, [line] = started("-w", str(workspace), "ui", "--host", "0.0.0.0", "--port", "P")
    try:
        token = line.partition("?token=")[2]
        base = f"http://127.0.0.1:{port}"
        status, headers, _ = get(f"{base}/timeline?token={token}")
        session = headers["set-cookie"].split(";", 1)[0].partition("=")[2]
        assert status == 303 and len(session) >= 32 and token not in headers["set-cookie"]
        assert get(f"{base}/timeline", {"Cookie": f"mindlog_session_{port}={session}"})[0] == 200
        unauthorized(*get(f"{base}/timeline", {"Authorization": f"Bearer {session}"}), "the token is not this server's")
    finally:
        stop(server)


def test_the_redirect_after_a_token_in_the_address_stays_on_this_server(workspace):
    """Regression: `GET //evil.example/x?token=T` answered `Location: //evil.example/x`, another host (an open
    redirect, for one who has the token)."""
    server, port, [line] = started("-w", str(workspace), "ui", "--host", "0.0.0.0", "--port", "P")
    try:
        token = line.partition("?token=")[2]
        base = f"http://127.0.0.1:{port}"
        for path, where in (("//evil.example/x", "/evil.example/x"), ("/%2F%2Fevil.example/x", "/evil.example/x"),
                            ("///evil.example/x", "/evil.example/x")):
            status, headers, _ = get(f"{base}{path}?token={token}&a=1")
            assert status == 303 and headers["location"] == f"{where}?a=1", (path, headers["location"])
        with httpx.Client(base_url=base, timeout=30) as client:  # a backslash reads as a slash in a browser
            location = client.get(f"/\\evil.example/x?token={token}").headers["location"]
            assert location[0] == "/" and location[1] not in "/\\", location
    finally:
        stop(server)


def test_a_token_too_short_to_guard_anything_is_refused_in_one_line(workspace, tmp_path):
    """Regression: `MEM_SERVER_TOKEN=a mem ui --host 0.0.0.0` served everything to `Bearer a` (only an empty
    token was refused); so did a one-character --token-file."""
    from cli.tokens import TOKEN_ENV
    from conftest import run_mem

    short = tmp_path / "short.token"
    short.write_text("abc\n")
    for args, env, where, length in (
            (("ui", "--host", "0.0.0.0", "--port", str(free_port())), {"MEM_SERVER_TOKEN": " a "}, TOKEN_ENV, 1),
            (("mcp", "--http", "0.0.0.0:1"), {"MEM_SERVER_TOKEN": "x" * 15}, TOKEN_ENV, 15),
            (("ui", "--port", str(free_port()), "--token-file", short), {}, str(short), 3),
            (("mcp", "--http", "127.0.0.1:1", "--token-file", short), {}, str(short), 3)):
        refused = run_mem("-w", workspace, *args, env=env)
        assert refused.returncode != 0 and refused.stdout == b"", args
        remedy = ("set it to a longer one, such as `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                  if where == TOKEN_ENV else "delete the file to have a new one made")  # one for each (nc22a)
        assert refused.stderr.decode() == (f"error: {where} holds a token of {length} characters: a token needs at "
                                           f"least 16 ({remedy})\n"), refused.stderr
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    refused = run_mem("serve", "--db", hub, "--port", str(free_port()), "--admin-token-file", short)
    assert refused.returncode != 0 and f"{short} holds a token of 3 characters" in refused.stderr.decode()
    long_enough = tmp_path / "ok.token"
    long_enough.write_text("x" * 16)
    server, port, _ = started("-w", str(workspace), "ui", "--port", "P", "--token-file", str(long_enough))
    try:
        assert get(f"http://127.0.0.1:{port}/asof", {"Authorization": f"Bearer {'x' * 16}"})[0] == 200
    finally:
        stop(server)


def test_ui_on_loopback_asks_no_token_unless_a_token_file_is_given(workspace, tmp_path):
    server, port, [line] = started("-w", str(workspace), "ui", "--port", "P")
    try:
        assert line == f"mindlog ui: http://127.0.0.1:{port}/asof"
        assert get(f"http://127.0.0.1:{port}/asof")[0] == 200
    finally:
        stop(server)
    token_file = tmp_path / "ui.token"
    server, port, [line] = started("-w", str(workspace), "ui", "--port", "P", "--token-file", str(token_file))
    try:
        assert line == f"mindlog ui: http://127.0.0.1:{port}/asof"  # the token is in the file, not printed
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        token = token_file.read_text().strip()
        assert get(f"http://127.0.0.1:{port}/asof")[0] == 401
        assert get(f"http://127.0.0.1:{port}/asof", {"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        stop(server)


def test_the_token_can_come_from_the_environment_for_the_ui_and_mcp_and_is_not_printed(workspace):
    """MEM_SERVER_TOKEN holds the token itself (a service manager's secret): required on any address, never
    printed; set but empty, the server refuses to start with one line."""
    token = "mlg_from-the-environment-0123456789abcdef"
    for args in (("ui", "--host", "0.0.0.0", "--port", "P"), ("mcp", "--http", "0.0.0.0:P")):
        server, port, lines = started("-w", str(workspace), *args, env={"MEM_SERVER_TOKEN": f" {token}\n"})
        try:
            assert len(lines) == 1 and token not in lines[0] and "token" not in lines[0]
            if args[0] == "ui":
                unauthorized(*get(f"http://127.0.0.1:{port}/asof", {"Authorization": "Bearer nope"}),
                             "the token is not this server's")
                assert get(f"http://127.0.0.1:{port}/asof", {"Authorization": f"Bearer {token}"})[0] == 200
            else:
                unauthorized(*get(f"http://127.0.0.1:{port}/mcp", {"Accept": "application/json"}, b"{}"),
                             "a token is needed here: send `Authorization: Bearer <token>`")
        finally:
            stop(server)
    refused = subprocess.run([*mem_command(), "-w", str(workspace), "ui", "--port", str(free_port())],
                             env={**os.environ, "MEM_SERVER_TOKEN": " "}, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and refused.stdout == "" and \
        refused.stderr == "error: MEM_SERVER_TOKEN is set but empty: set it to the token, or unset it\n"


def test_mcp_over_http_off_loopback_requires_the_token_it_prints(workspace):
    """Regression: `mem mcp --http 0.0.0.0:P` let anyone who reached it read and write the workspace."""
    server, port, lines = started("mcp", "--http", "0.0.0.0:P", "--workspace", str(workspace))
    try:
        assert lines[0] == f"mindlog mcp: http://0.0.0.0:{port}/mcp" and lines[1].startswith("bearer token: ")
        token = lines[1].removeprefix("bearer token: ")
        url = f"http://127.0.0.1:{port}/mcp"
        hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
        accept = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        unauthorized(*get(url, accept, hello), "a token is needed here: send `Authorization: Bearer <token>`")
        unauthorized(*get(url, {**accept, "Authorization": f"Bearer {token}x"}, hello), "the token is not this server's")
        unauthorized(*get(f"{url}?token={token}", accept, hello), "a token is needed here: send "
                                                                   "`Authorization: Bearer <token>`")

        async def main():
            with anyio.fail_after(60):
                async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client, \
                        streamable_http_client(url, http_client=client) as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    created = await session.call_tool("create", {"path": "/memories/mind/deploy.md",
                                                                 "file_text": PAGE.decode()})
                    return created.is_error, created.content[0].text

        assert anyio.run(main) == (False, "File created successfully at: /memories/mind/deploy.md")
    finally:
        stop(server)
    with Memory.open(workspace) as mem:
        assert [e.kind for e in mem.events()] == ["page.ingest"]


def test_a_token_file_without_http_is_refused(workspace, tmp_path):
    from conftest import run_mem

    refused = run_mem("mcp", "--token-file", tmp_path / "t", "--workspace", workspace)
    assert refused.returncode == 2 and refused.stderr.decode() == (
        "error: --token-file guards --http; over stdio the client that starts `mem mcp` is the only one\n")
    assert not (tmp_path / "t").exists()


def test_ui_on_loopback_refuses_a_foreign_host_or_origin_as_mcp_does(workspace):
    """Regression: `mem ui` on loopback answered any Host header, so a web page whose name its owner rebinds to
    127.0.0.1 (DNS rebinding) read the whole memory from the user's browser; `mem mcp --http` refused it."""
    with Memory.open(workspace) as mem:
        mem.write_page("deploy", PAGE)
    server, port, _ = started("-w", str(workspace), "ui", "--port", "P")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for name in ("127.0.0.1", "localhost", "[::1]"):
                assert client.get("/asof", headers={"Host": f"{name}:{port}"}).status_code == 200
            assert client.get("/asof", headers={"Origin": f"http://localhost:{port}"}).status_code == 200
            foreign = client.get("/asof", headers={"Host": f"evil.example:{port}"})
            assert foreign.status_code == 421 and foreign.json()["title"] == "Invalid Host header"  # JSON (nc33b)
            assert foreign.headers["content-type"] == "application/problem+json"
            assert client.get("/asof", headers={"Host": f"127.0.0.1:{port + 1}"}).status_code == 421
            assert client.get("/search?q=deploy", headers={"Origin": "http://evil.example"}).status_code == 403
    finally:
        stop(server)


def test_mcp_over_http_on_loopback_refuses_a_foreign_host_with_the_same_check(workspace):
    server, port, _ = started("mcp", "--http", "127.0.0.1:P", "--workspace", str(workspace))
    try:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"Accept": "application/json, text/event-stream"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            assert client.post("/mcp", json=ping, headers={**headers, "Host": f"evil.example:{port}"}).status_code == 421
            assert client.post("/mcp", json=ping, headers={**headers, "Origin": "http://evil.example"}).status_code == 403
            assert client.post("/mcp", json=ping, headers={**headers, "Origin": f"http://localhost:{port}"}
                               ).status_code != 403
    finally:
        stop(server)


def test_an_agents_token_file_is_made_for_its_owner_alone_and_a_readable_one_is_warned_of(tmp_path):
    """Regression (nc24b): the README's `mem hub agent add main > main.token` left the token readable by every user
    (0644 under a usual umask), and nothing said so. `--token-file` makes a new file of mode 600 (refusing one that
    is there, and leaving none when the agent is refused), and `mem remote add` warns of a token others can read."""
    from hubserver import mem_serve

    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    made = run_mem("hub", "agent", "add", "alice", "--db", hub, "--token-file", tmp_path / "alice.token", check=True)
    assert made.stdout.decode() == f"agent alice: token written to {tmp_path / 'alice.token'} (mode 600)\n"
    assert os.stat(tmp_path / "alice.token").st_mode & 0o777 == 0o600
    again = run_mem("hub", "agent", "add", "bob", "--db", hub, "--token-file", tmp_path / "alice.token")
    assert again.stderr.decode() == f"error: {tmp_path / 'alice.token'} exists already: give a new file for the token\n"
    taken = run_mem("hub", "agent", "add", "alice", "--db", hub, "--token-file", tmp_path / "other.token")
    assert taken.returncode == 1 and not (tmp_path / "other.token").exists()
    readable = tmp_path / "bob.token"
    readable.write_text(run_mem("hub", "agent", "add", "bob", "--db", hub, check=True).stdout.decode())
    readable.chmod(0o644)
    for agent in ("alice", "bob"):
        run_mem("init", "-w", tmp_path / agent, "--agent", agent, check=True)
    with mem_serve(hub) as url:
        quiet = run_mem("-w", tmp_path / "alice", "remote", "add", "origin", url, "--token-file",
                        tmp_path / "alice.token", check=True)
        warned = run_mem("-w", tmp_path / "bob", "remote", "add", "origin", url, "--token-file", readable, check=True)
    assert quiet.stderr == b""
    assert warned.stderr.decode() == (f"warning: the token file {readable} can be read by other users (mode 644): "
                                      f"`chmod 600 {readable}`\n")
