"""`mem mcp` over stdio: the SDK's transport, with every line that is no JSON-RPC message answered.

The SDK's stdio reader hands a line it cannot parse to the session as an exception, which the session
only logs: the client is never answered and waits forever. JSON-RPC 2.0 answers such a line with an
error response, as the SDK's own HTTP transport does: -32700 (parse error) for a line that is not JSON
(or holds what the SDK's parser refuses, like a lone surrogate escape), -32600 (invalid request) for
JSON that is no message; the id is the request's when it can be read from the line, else null.
"""

import json

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError


def request_id(value):
    """The id of a JSON-RPC request read as plain JSON, when it has a usable one."""
    if isinstance(value, dict) and isinstance(value.get("id"), (int, str)) and not isinstance(value["id"], bool):
        return value["id"]
    return None


def unparsed_answer(exc: Exception) -> JSONRPCError:
    """The error response to a line the SDK could not take for a JSON-RPC message."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    unparsed = [error["input"] for error in errors if error["type"] == "json_invalid"]
    if unparsed:
        try:
            ident = request_id(json.loads(unparsed[0]))
        except (ValueError, TypeError):
            ident = None
        code, message = PARSE_ERROR, "Parse error: the line is not JSON the server can read"
    else:
        ident = next((request_id(error["input"]) for error in errors if request_id(error["input"]) is not None),
                     None)
        code, message = INVALID_REQUEST, "Invalid Request: the line is not a JSON-RPC 2.0 message"
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))


class Answering:
    """The transport's read stream, answering (on the write stream) each line it could not parse
    instead of passing the exception on; everything else goes through as it came."""

    def __init__(self, inner, write):
        self.inner = inner
        self.write = write

    @property
    def last_context(self):
        return getattr(self.inner, "last_context", None)

    async def receive(self):
        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception):
                return item
            await self.write.send(SessionMessage(unparsed_answer(item)))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.aclose()


async def run_stdio(server) -> None:
    """`MCPServer.run_stdio_async`, with the read stream answering what it cannot parse."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(Answering(read_stream, write_stream), write_stream, lowlevel.create_initialization_options())
