"""What `mem mcp --http` answers before the MCP SDK's streamable HTTP transport sees a request.

The SDK reads a request whose id is neither a whole number nor a string (1.5, null, NaN, an object) as a
notification and answers 202 Accepted: the client waits for an answer that never comes. Over stdio
`mcp_stdio.Answering` answers it; over HTTP this gate does, as the SDK answers a body it cannot parse (400 and a
JSON-RPC error with id null). It answers a batch (a JSON array) as stdio does, -32600, not with the SDK's validator
dump."""

import json

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.types import jsonrpc_message_adapter
from pydantic import ValidationError

from mcp_types import INVALID_PARAMS, INVALID_REQUEST, ErrorData, JSONRPCError

from .mcp_stdio import BAD_ID, bad_tool_call, unparsed_answer, usable_id


NOT_A_MESSAGE = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
    code=INVALID_REQUEST, message="Invalid Request: the body is not a JSON-RPC 2.0 message"))


def refusal(body: bytes) -> JSONRPCError | None:
    """BAD_ID for a JSON-RPC request (an object with a method) whose id is there but unusable; NOT_A_MESSAGE for a
    JSON array (a batch, which this protocol version has no more: the SDK answered it with its validator's dump);
    for any other object that is no JSON-RPC message (`params` a list), what stdio answers: -32600 with its id; a tool
    call whose name is no string or whose arguments are no object, -32602 saying so (`mcp_stdio.bad_tool_call`).
    None: the SDK's to answer, a body that does not parse (or nests past Python's recursion limit) included."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, list):
        return NOT_A_MESSAGE
    if isinstance(message, dict) and "method" in message and "id" in message and not usable_id(message["id"]):
        return BAD_ID
    try:
        validated = jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError as exc:  # the SDK answered with its validator's dump, and id null (nc24a)
        return unparsed_answer(exc, "body")
    if (wrong := bad_tool_call(validated)) is not None:  # the SDK answered a bare -32602
        return JSONRPCError(jsonrpc="2.0", id=validated.id, error=ErrorData(code=INVALID_PARAMS, message=wrong))
    return None


class UnusableIdGate:
    """ASGI middleware: a POST to `path` whose body is a request with an unusable id, or a batch, is answered 400,
    -32600. A body past the SDK's limit goes on unread, for the SDK to refuse (413). A request whose client left
    before its body ended goes no further: the SDK printed a traceback for it (ClientDisconnect)."""

    def __init__(self, app, path: str = "/mcp", limit: int = DEFAULT_MAX_REQUEST_BODY_SIZE):
        self.app, self.path, self.limit = app, path, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        received, size, more = [], 0, True
        while more and size <= self.limit:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        if received[-1]["type"] != "http.request":  # the client left before its body ended: no one to answer
            return
        refused = refusal(b"".join(m.get("body", b"") for m in received)) if not more else None
        if refused is not None:
            answer = refused.model_dump_json(by_alias=True, exclude_unset=True).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer)).encode())]})
            return await send({"type": "http.response.body", "body": answer})
        await self.app(scope, _replayed(received, receive), send)


def _replayed(messages, then):
    """A receive callable that gives `messages` first, then what `then` gives."""
    pending = list(messages)

    async def receive():
        return pending.pop(0) if pending else await then()

    return receive
