"""zstd response compression as ASGI middleware, so the hub's handlers only say what to answer."""

import zstandard
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ZstdResponses:
    """Compresses a response body over `minimum` bytes with zstd when the request accepts it.

    The hub's answers are single JSON bodies, so the body is gathered whole, then compressed once."""

    def __init__(self, app: ASGIApp, minimum: int = 1024, level: int = 1):
        self.app, self.minimum = app, minimum
        self.compressor = zstandard.ZstdCompressor(level=level)  # one per app: used on the event loop only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not any(name == b"accept-encoding" and b"zstd" in value
                                              for name, value in scope["headers"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def compressing(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            headers = MutableHeaders(scope=start)
            if len(body) > self.minimum and "content-encoding" not in headers:
                body = self.compressor.compress(body)
                headers["content-encoding"] = "zstd"
                headers["content-length"] = str(len(body))
                headers.add_vary_header("Accept-Encoding")
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, compressing)
