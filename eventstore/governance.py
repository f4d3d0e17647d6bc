"""`governance: hold`: the freeze a page's frontmatter can carry, and the rule that keeps a held
version of a shared page from being superseded.

In the wiki a hold lasts until a `page.release` event (see projections.trust). A shared page has no
such event: its versions form a DAG, and the hold is a property of a version. A new version (an
update or a delete) whose parents include a held version is refused unless it *releases* it: an
update that carries the held version's text and frontmatter with `governance` taken out, and a
note that says why. Once released, the page changes freely; a later version that says
`governance: hold` again holds again.

The rule reads only the event and its parents, so the local writer and the hub on push run this same
check, each with its own way of finding a parent. What gets past it (a version that reached the hub
before the held version it names) is *void*, and so is every version built on one: the hub's version
table (sync.storage) and every consumer's fold (projections.shared) count it as never having come,
whatever the order the versions arrive in. An ingest names
no parents and supersedes nothing: it makes a concurrent head (a held head wins the conflict,
projections.shared, so the held text stays what the page shows). The hub refuses on push, and the
client before sending, an ingest that would stand beside a held head (`ingest_refusal`): an agent that
wrote the page before it saw the hold releases it first.
"""

from collections.abc import Callable

from .errors import Held
from .kinds import PageDelete, PageIngest, PageUpdate

HOLD = "hold"
GOVERNANCE = "governance"


def is_held(frontmatter: dict | None) -> bool:
    return bool(frontmatter) and str(frontmatter.get(GOVERNANCE, "")).strip().lower() == HOLD


def released(frontmatter: dict) -> dict:
    """A held version's frontmatter as its release carries it: without `governance`."""
    return {key: value for key, value in frontmatter.items() if key != GOVERNANCE}


def releases(body, held) -> bool:
    """Whether `body` is the release of the held version `held` (a PageIngest or PageUpdate body)."""
    return (isinstance(body, PageUpdate) and body.text == held.text and body.note.strip() != ""
            and body.frontmatter == released(held.frontmatter))


def hold_refusal(body, parent: Callable[[str], object | None]) -> tuple[str, str] | None:
    """(the held parent's id, the verb refused) when `body` supersedes a held version of a shared page
    without releasing it; None when it may be appended. `parent(id)` is the body of a version, or None
    when it is unknown (or redacted: a version that cannot be read holds nothing)."""
    if not isinstance(body, (PageUpdate, PageDelete)):
        return None
    for id in body.parents:
        held = parent(id)
        if isinstance(held, (PageIngest, PageUpdate)) and is_held(held.frontmatter) and not releases(body, held):
            return id, "delete" if isinstance(body, PageDelete) else "update"
    return None


INGEST_VERB = "write another version of"
"""What an ingest beside a held head is refused (held_message's `verb`)."""


def held(layer: str, slug: str, version: str, verb: str) -> Held:
    """The refusal of a change to a held page of a shared layer, with how to release it."""
    return Held(f"page {slug!r} of layer {layer!r} is held (governance: hold, version {version}); refusing to {verb} "
                "it.", slug, layer)


def held_message(layer: str, slug: str, version: str, verb: str) -> str:
    return str(held(layer, slug, version, verb))


def ingest_refusal(ingest: str, heads: dict[str, bool], new: set[str]) -> str | None:
    """The held head an ingest of a push would stand beside, or None. `heads` are the page's heads once
    the push is applied (id -> held), `new` the ids of the versions the push adds: refused when a head
    the push adds stands beside a held head other than the ingest itself (so a release in the same push,
    which supersedes the held version, lets it through; a resent ingest the hub holds already adds nothing)."""
    held = [id for id, holds in heads.items() if holds and id != ingest]
    beside = [id for id in heads if id in new and id not in held]
    return held[-1] if held and beside else None
