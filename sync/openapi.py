"""The hub's OpenAPI description, built from the same msgspec Structs the hub encodes."""

import functools

import msgspec

from .wire import MAX_PULL, MSGPACK, ContractResponse, Problem, PullResponse, PushRequest, PushResponse


@functools.cache
def openapi_document() -> dict:
    (push_req, push_resp, pull_resp, contract_resp, problem), components = msgspec.json.schema_components(
        [PushRequest, PushResponse, PullResponse, ContractResponse, Problem],
        ref_template="#/components/schemas/{name}")
    problems = {str(code): {"description": text, "content": {"application/problem+json": {"schema": problem}}}
                for code, text in ((400, "Bad request"), (401, "Missing, unknown or revoked token"),
                                   (403, "Out of contract, or the event's agent is not the token's"),
                                   (409, "Digest mismatch, an id known with another digest, or a cursor past the head"),
                                   (413, "Request too large"), (415, "Unsupported media type or content encoding"),
                                   (422, "Invalid event"))}
    security = [{"bearer": []}]
    json_body = lambda schema: {"application/json": {"schema": schema}}  # noqa: E731
    return {
        "openapi": "3.1.0",
        "info": {"title": "mindlog hub", "version": "1",
                 "description": "Push and pull shared memory layers under producer/consumer contracts."},
        "components": {"schemas": components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/contract": {"get": {"operationId": "contract", "security": security, "parameters": [
                {"name": "holds", "in": "query", "schema": {"type": "string"},
                 "description": "Comma-separated event ids (at most 16): the answer's `holds` gives the position of "
                                "each the hub holds of those the agent may have had (its own, the contract's, and "
                                "those of layers it consumed when they were stored); any other is left out"}],
                                     "responses": {"200": {"description": "The contract in force",
                                                           "content": json_body(contract_resp)}, **problems}}},
            "/v1/push": {"post": {"operationId": "push", "security": security,
                                  "requestBody": {"required": True, "content": json_body(push_req)},
                                  "responses": {"200": {"description": "Each event's position; duplicates marked",
                                                        "content": json_body(push_resp)}, **problems}}},
            "/v1/pull": {"get": {"operationId": "pull", "security": security,
                                 "description": "The events of the layers the agent consumes after the cursor, with "
                                                "the redactions of the layers it produces without consuming them",
                                 "parameters": [
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PULL}},
                {"name": "wait", "in": "query", "schema": {"type": "number", "minimum": 0},
                 "description": "Seconds to wait for events when there are none yet (a longer wait is cut to 30)"},
                {"name": "held", "in": "query", "schema": {"type": "string"},
                 "description": "The cursor the agent has stored, when it asks ahead of storing (default: cursor)"},
                {"name": "ack", "in": "query", "schema": {"type": "string", "enum": ["durable"]},
                 "description": "durable: answer once the hub has committed what this request acknowledges"},
                {"name": "layers", "in": "query", "schema": {"type": "string"},
                 "description": "Comma-separated layers: only their events (of those the agent consumes), up to `until`, "
                                "never waiting; what an agent made a consumer of a layer fetches of that layer's past"},
                {"name": "until", "in": "query", "schema": {"type": "string"},
                 "description": "With `layers`: a cursor; only events up to its position (default: the head)"}],
                "responses": {"200": {"description": "Events after the cursor, in hub order (in msgpack, the same "
                                                     "fields, to a request that accepts it)",
                                      "content": {**json_body(pull_resp), MSGPACK: {"schema": pull_resp}}},
                              **problems}}},
            "/v1/redactions": {"get": {"operationId": "redactions", "security": security,
                                       "description": "The redactions naming events the agent wrote, and those of "
                                                      "the layers it consumed under an earlier contract (of events "
                                                      "stored before it was dropped), in the layers "
                                                      "it does not consume now (its pulls bring those), after the "
                                                      "cursor, whoever made them: how an author no longer a producer, "
                                                      "or a consumer dropped, loses its own copy's text too. A cursor "
                                                      "of its own (not the pull's); never waits",
                                       "parameters": [
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PULL}}],
                "responses": {"200": {"description": "Redactions after the cursor, in hub order, as a pull's page",
                                      "content": {**json_body(pull_resp), MSGPACK: {"schema": pull_resp}}},
                              **problems}}},
            "/health": {"get": {"operationId": "health", "responses": {"200": {"description": "The hub is up"}}}},
        },
    }
