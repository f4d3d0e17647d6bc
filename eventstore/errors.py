"""Errors the log and the write side raise. Every refusal is a MemError with a stable code."""


class MemError(Exception):
    """A refusal: `code` is stable (used as the problem type over HTTP), the message says why."""

    code = "mem-error"
    status = 400

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        if code:
            self.code = code


class InvalidInput(MemError):
    code = "invalid-input"


class UnsafePath(MemError):
    code = "unsafe-path"


class TooLarge(MemError):
    code = "too-large"
    status = 413


class DigestMismatch(MemError):
    code = "digest-mismatch"
    status = 409


class IdConflict(MemError):
    """An event id already in the log with a different digest."""

    code = "id-conflict"
    status = 409


class UnknownKind(MemError):
    code = "unknown-kind"


class NotFound(MemError):
    code = "not-found"
    status = 404


class HandEdited(MemError):
    """A materialised file differs from what mindlog last wrote there."""

    code = "hand-edited"
    status = 409


class NoWorkspace(MemError):
    code = "no-workspace"


class Held(MemError):
    """A change to a page under `governance: hold`, before `mem page release` lifted it."""

    code = "held"
    status = 409
