"""What `mem mcp --http` answers before the MCP SDK's streamable HTTP transport sees a request.

The SDK reads a request whose id is neither a whole number nor a string (1.5, null, an object) as a notification and
answers 202 Accepted: the client waits for an answer that never comes. Over stdio `mcp_stdio.Answering` answers it;
over HTTP this gate does, as the SDK answers a body it cannot parse (400 and a JSON-RPC error with id null)."""

import json

from .mcp_stdio import BAD_ID, NO_ID, NOT_AN_OBJECT, top_level_id, usable_id


def unusable_request(body: bytes) -> bool:
    """A JSON-RPC request (an object with a method) whose id is there but unusable."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return False
    found = top_level_id(text)  # read without recursion: a body nested a million levels deep costs a moment
    if found is NO_ID or found is NOT_AN_OBJECT or usable_id(found):
        return False
    try:
        return "method" in json.loads(text)
    except (ValueError, RecursionError):
        return False  # the SDK answers what it cannot parse


class UnusableIdGate:
    """ASGI middleware: a POST whose body is a request with an unusable id is answered 400, -32600."""

    def __init__(self, app, path: str = "/mcp"):
        self.app, self.path = app, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replayed([message]), send)  # the client went away
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if unusable_request(body):
            answer = BAD_ID.model_dump_json(by_alias=True, exclude_unset=True).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer)).encode())]})
            return await send({"type": "http.response.body", "body": answer})
        await self.app(scope, _replayed([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _replayed(messages, then=None):
    """A receive callable that gives `messages` first, then what `then` gives."""
    pending = list(messages)

    async def receive():
        if pending:
            return pending.pop(0)
        return await then() if then is not None else {"type": "http.disconnect"}

    return receive
