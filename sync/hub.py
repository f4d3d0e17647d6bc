"""The hub: an ASGI app (starlette) over a HubStorage. It enforces the contract on every request.

Identity comes from the bearer token, never from an event. Bodies are JSON, optionally zstd
(`Content-Encoding` / `Accept-Encoding`); every error is `application/problem+json` with a stable
`type`.
"""

import asyncio
import base64
import binascii

import msgspec
import zstandard
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from eventstore import secrets, validate
from eventstore.envelope import check_event
from eventstore.errors import InvalidInput, MemError, TooLarge, UnknownKind
from eventstore.layers import LAYER_KINDS, PRIVATE_LAYERS, consumed_layers, is_reserved, produces

from .committer import GroupCommitter
from .fanout import Fanout
from .openapi import openapi_document
from .storage import HubStorage
from .wire import PROBLEM_BASE, ContractResponse, Problem, PullResponse, PushRequest, PushResponse

MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_PULL = 5000
MAX_WAIT_SECONDS = 30.0
_push_decoder = msgspec.json.Decoder(PushRequest)


class HubError(Exception):
    def __init__(self, status: int, code: str, title: str, detail: str = ""):
        super().__init__(detail or title)
        self.problem = Problem(type=PROBLEM_BASE + code, title=title, status=status, detail=detail)


def problem_response(problem: Problem, headers: dict | None = None) -> Response:
    return Response(msgspec.json.encode(problem), status_code=problem.status,
                    media_type="application/problem+json", headers=headers)


def encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"p{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text[0] != "p" or not text[1:].isdigit():
            raise ValueError
        return int(text[1:])
    except (ValueError, IndexError, binascii.Error, UnicodeDecodeError):
        raise HubError(400, "invalid-cursor", "Invalid cursor", "the cursor is not one this hub gave out") from None


def check_batch(events, agent: str, contract) -> None:
    """Every check a pushed event must pass before any of its batch is applied."""
    for event in events:
        check_event(event)
        if is_reserved(event.layer):
            raise HubError(403, "reserved-layer", "Reserved layer",
                           f"event {event.id} is in layer {event.layer!r}: {', '.join(sorted(PRIVATE_LAYERS))} are "
                           "each agent's own and never shared; nothing of the batch was applied")
        if event.agent != agent:
            raise HubError(403, "agent-mismatch", "Agent mismatch",
                           f"event {event.id} names agent {event.agent!r}; the token is {agent!r}'s")
        if not produces(contract, agent, event.layer):
            raise HubError(403, "out-of-contract", "Out of contract",
                           f"{agent!r} does not produce layer {event.layer!r}; nothing of the batch was applied")
        allowed = LAYER_KINDS[contract.layers[event.layer].format]
        if event.kind not in allowed:
            raise HubError(422, "wrong-kind", "Wrong kind for layer",
                           f"layer {event.layer!r} takes {', '.join(sorted(allowed))}, not {event.kind!r}")
        if event.kind == "entry.append":
            validate.entry_date(event.body.date)
        if contract.layers[event.layer].scan_secrets:
            found = secrets.scan_body(event.body)
            if found:
                raise HubError(422, "secret-detected", "Secret detected",
                               f"event {event.id} in layer {event.layer!r}: {secrets.describe(found)}; "
                               "nothing of the batch was applied")


def create_app(storage: HubStorage, max_wait: float = MAX_WAIT_SECONDS, group_commit: bool = True) -> Starlette:
    """The hub's ASGI app; a long-poll waits at most `max_wait` seconds, whatever it asks.

    Pushes go through a group committer (`group_commit=False`: one transaction per push); long-polls
    wait on a Fanout, woken by commits, holding no thread."""
    fanout = Fanout()
    committers: list[GroupCommitter] = []
    compressor = zstandard.ZstdCompressor(level=1)  # one per app: replies are compressed on the event loop only

    def committer() -> GroupCommitter:
        """Started on the first request, inside the event loop that serves them."""
        if not committers:
            loop = asyncio.get_running_loop()
            committers.append(GroupCommitter(storage, fanout, group=group_commit))
            storage.watch(lambda head, layers: fanout.advance_threadsafe(loop, head, layers))
        return committers[0]

    def read_page(after: int, layers: list[str], limit: int):
        """The head, then the events after `after` (one trip to a worker thread). The head is read
        first: positions are commit-ordered, so every event at or below it is already visible, and a
        cursor moved up to it can never skip one."""
        head = storage.head()
        return head, storage.pull(after, layers, limit)

    async def body_of(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
            raise HubError(413, "too-large", "Request too large", f"the limit is {MAX_REQUEST_BYTES} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                raise HubError(413, "too-large", "Request too large", f"the limit is {MAX_REQUEST_BYTES} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding == "zstd":
            try:
                reader = zstandard.ZstdDecompressor().stream_reader(raw)
                raw = reader.read(MAX_REQUEST_BYTES + 1)
            except zstandard.ZstdError as exc:
                raise HubError(400, "invalid-body", "Invalid body", f"zstd: {exc}") from None
            if len(raw) > MAX_REQUEST_BYTES:
                raise HubError(413, "too-large", "Request too large", "the decompressed body is over the limit")
        elif encoding not in ("identity", ""):
            raise HubError(415, "unsupported-encoding", "Unsupported content encoding", encoding)
        return raw

    def reply(request: Request, value, status: int = 200) -> Response:
        data = msgspec.json.encode(value)
        headers = {}
        if "zstd" in request.headers.get("accept-encoding", "") and len(data) > 1024:
            data = compressor.compress(data)
            headers["content-encoding"] = "zstd"
        return Response(data, status_code=status, media_type="application/json", headers=headers)

    async def authenticate(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HubError(401, "missing-token", "Missing bearer token", "send Authorization: Bearer <token>")
        agent = await run_in_threadpool(storage.agent_for_token, token.strip())
        if agent is None:
            raise HubError(401, "invalid-token", "Invalid token", "the token is unknown or was revoked")
        return agent

    async def contract(request: Request) -> Response:
        agent = await authenticate(request)
        current, position = await run_in_threadpool(storage.contract)
        return reply(request, ContractResponse(contract=current, position=position, agent=agent))

    async def push(request: Request) -> Response:
        agent = await authenticate(request)
        raw = await body_of(request)
        try:
            batch = _push_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            if "$.events[" in str(exc) and ".body.kind" in str(exc) and "Invalid value" in str(exc):
                raise UnknownKind(f"unknown event kind: {exc}") from None
            raise HubError(422, "invalid-event", "Invalid event", str(exc)) from None
        except msgspec.DecodeError as exc:
            raise HubError(400, "invalid-body", "Invalid body", f"not JSON: {exc}") from None
        # Digests are recomputed off the event loop (a large batch is real CPU work), in the same trip
        # to a worker thread as reading the contract.
        await run_in_threadpool(lambda: check_batch(batch.events, agent, storage.contract()[0]))
        results = await committer().push(batch.events) if batch.events else []
        return reply(request, PushResponse(results=results))

    async def pull(request: Request) -> Response:
        agent = await authenticate(request)
        after = decode_cursor(request.query_params.get("cursor"))
        try:
            limit = min(int(request.query_params.get("limit", "1000")), MAX_PULL)
            wait = min(float(request.query_params.get("wait", "0")), max_wait)
        except ValueError:
            raise HubError(400, "invalid-parameter", "Invalid parameter", "limit and wait are numbers") from None
        if limit < 1 or not wait >= 0:
            raise HubError(400, "invalid-parameter", "Invalid parameter", "limit >= 1 and wait >= 0")
        current, _ = await run_in_threadpool(storage.contract)
        layers = consumed_layers(current, agent)
        committer().record_pull(agent, after)
        head, events = await run_in_threadpool(read_page, after, layers, limit + 1)
        if not events and wait > 0 and await fanout.wait(max(after, head), layers, wait):
            head, events = await run_in_threadpool(read_page, after, layers, limit + 1)
        more = len(events) > limit
        events = events[:limit]
        cursor = events[-1].seq if more else max(after, head, events[-1].seq if events else 0)
        return reply(request, PullResponse(events=events, cursor=encode_cursor(cursor), more=more))

    async def openapi(request: Request) -> Response:
        return Response(msgspec.json.encode(openapi_document()), media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b'{"ok":true}', media_type="application/json")

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HubError):
            return problem_response(exc.problem)
        if isinstance(exc, MemError):
            status = exc.status if exc.status != 400 or not isinstance(exc, InvalidInput) else 422
            return problem_response(Problem(type=PROBLEM_BASE + exc.code, title=exc.code.replace("-", " "),
                                            status=status, detail=str(exc)))
        if isinstance(exc, HTTPException):
            return problem_response(Problem(type=PROBLEM_BASE + f"http-{exc.status_code}", title=str(exc.detail),
                                            status=exc.status_code), headers=getattr(exc, "headers", None))
        return problem_response(Problem(type=PROBLEM_BASE + "internal", title="Internal error", status=500))

    routes = [Route("/v1/contract", contract, methods=["GET"]), Route("/v1/push", push, methods=["POST"]),
              Route("/v1/pull", pull, methods=["GET"]), Route("/openapi.json", openapi, methods=["GET"]),
              Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={Exception: on_error, HTTPException: on_error,
                                                         HubError: on_error, MemError: on_error, TooLarge: on_error})
