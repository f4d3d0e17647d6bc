"""The trust fields on the read path, in one place: what is withheld, what is flagged, what ranks lower.

Pages carry `status` (free-form, per the ADF guide: `current`, `blocked`, `superseded-by: <slug>`, and
the OKF words `draft`, `stable`, `deprecated`), `stale_after` (a date) and `governance` (`hold` freezes
a page). Typed entries can be reversed. These rules decide, for search, `believed`, the catalog lines
of mind.md and lint alike:

- withheld: `superseded...`, `deprecated` and `archived` material is left out unless asked for (--all);
- flagged: past `stale_after`, `draft`, reversed entries; flagged material ranks below the rest;
- refused on write: a `stale_after` that is not a date, a `superseded-by` naming no page, and any
  update, rename or delete of a held page until `mem page release` lifts the hold.
"""

import datetime as dt
import re

from eventstore.errors import Held, InvalidInput
from eventstore.governance import HOLD, held, hold_refusal, is_held
from eventstore.kinds import PageDelete, PageIngest, PageRename, PageUpdate
from eventstore.layers import MIND

WITHHELD = ("superseded", "deprecated", "archived")
_SUPERSEDED = re.compile(r"^superseded(?:[-_ ]by)?\s*:?\s*(.*)$", re.I)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def status_word(status) -> str:
    """The status's first word, lowercased: `superseded-by: deploy` -> `superseded`, `Deprecated: x` -> `deprecated`."""
    text = str(status or "").strip().lower()
    if text.startswith("superseded"):
        return "superseded"
    return re.split(r"[ :]", text, maxsplit=1)[0]  # the words WITHHELD_SQL can tell apart: a space or a colon ends one


def superseded_by(status) -> str | None:
    match = _SUPERSEDED.match(str(status or "").strip())
    target = match.group(1).strip().strip("[]()").removeprefix("mind/").removesuffix(".md") if match else ""
    return target or None


def withheld(status) -> str | None:
    """Why material with this status is left out of search and `believed` (None: it is not)."""
    word = status_word(status)
    return word if word in WITHHELD else None


def _withheld_sql(word: str) -> str:
    if word == "superseded":
        return "lower(status) LIKE 'superseded%'"
    return f"lower(status) = '{word}' OR lower(status) LIKE '{word}:%' OR lower(status) LIKE '{word} %'"


WITHHELD_SQL = f"(status IS NULL OR NOT ({' OR '.join(_withheld_sql(w) for w in WITHHELD)}))"
"""The SQL twin of `not withheld(status)`, for a `status` column stored by `stored_status`."""


def stored_status(status) -> str | None:
    """A status as the views keep it: a stripped string (so that SQL needs no trim of its own)."""
    return None if status is None else str(status).strip()


def stale_day(stale_after) -> str | None:
    """The date part of `stale_after` (YYYY-MM-DD), or None when there is none or it is unreadable.

    The one reading of the field, for the write check (`check_page` refuses what this cannot read) and every
    reader alike: YYYY-MM-DD, a real day, optionally followed by a time of that day. Python's
    `date.fromisoformat` also takes ISO basic (`20200101`) and week (`2020-W01-1`) dates: those are refused on
    write, and a page already in a log with one (written before the check agreed with this reading) is read
    as having no readable `stale_after`, never stale: as the views built from it always have, so a replay
    rebuilds what was there."""
    if stale_after is None:
        return None
    text = str(stale_after).strip()
    if not _DATE.match(text):
        return None
    try:
        dt.date.fromisoformat(text[:10])
        if len(text) > 10:
            dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return text[:10]


def is_stale(stale_after, day: str) -> bool:
    """Past `stale_after` on `day` (YYYY-MM-DD): the page is stale the day after its date."""
    limit = stale_day(stale_after)
    return limit is not None and day > limit


def flags(status, stale_after, day: str, reversed_by: str | None = None) -> list[str]:
    """Why a piece of memory deserves less trust on `day`, as short phrases; ranked by len(flags) > 0."""
    found = []
    why = withheld(status)
    if why == "superseded":
        target = superseded_by(status)
        found.append(f"superseded by {target}" if target else "superseded")
    elif why:
        found.append(why)
    if status_word(status) == "draft":
        found.append("draft")
    if is_stale(stale_after, day):
        found.append(f"stale since {stale_day(stale_after)}")
    if reversed_by:
        found.append(f"reversed by {reversed_by}")
    return found


def demoted(found: list[str]) -> bool:
    """Flagged material that ranks below the rest: withheld, stale or reversed (a draft only says so)."""
    return any(not f.startswith(("draft", "compacted")) for f in found)


def catalog_flag(status, stale_after, day: str) -> str:
    """The flag a catalog line in mind.md carries, put before its hook: `(deprecated)`, `(stale since ...)`."""
    return "; ".join(flags(status, stale_after, day))


def day_of(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


# --- the write side ------------------------------------------------------------------------------

def check_page(frontmatter: dict, page_exists) -> None:
    """Refuses a page whose trust fields are malformed; `page_exists(slug)` answers for superseded-by."""
    if "stale_after" in frontmatter and stale_day(value := frontmatter["stale_after"]) is None:
        raise InvalidInput(f"frontmatter `stale_after` must be a date like 2026-12-31, not {value!r}")
    status = frontmatter.get("status")
    if withheld(status) == "superseded":
        target = superseded_by(status)
        if target is None:
            raise InvalidInput("status `superseded-by:` must name the page that supersedes this one, "
                               "like `status: \"superseded-by: deploy\"`")
        if not page_exists(target):
            raise InvalidInput(f"status names {target!r} as the superseding page, but there is no page {target!r}")
    governance = frontmatter.get("governance")
    if governance is not None and str(governance).strip().lower() not in (HOLD, "open", "none", ""):
        raise InvalidInput(f"frontmatter `governance` must be `hold` (or absent), not {governance!r}")


def held_since(memory, slug: str) -> int | None:
    """The seq of the version that holds a wiki page (`governance: hold`) not released since, or None."""
    row = memory.views.page_version(slug)
    if row is None or not is_held(row[1].frontmatter):
        return None
    return None if memory.views.released_after(slug, row[0]) else row[0]


def check_release(memory, slug: str) -> None:
    if held_since(memory, slug) is None:
        raise InvalidInput(f"page {slug!r} is not held (no `governance: hold` in force); there is nothing to release")


def admit(memory, event) -> None:
    """Refuses, before anything is appended, a wiki page event that the trust rules forbid."""
    body = event.body
    if event.layer != MIND:  # a page of a shared layer: the hold is its versions' own (eventstore.governance)
        refusal = hold_refusal(body, lambda id: getattr(memory.log.get(id), "body", None))
        if refusal is not None:
            raise held(event.layer, body.slug, *refusal)
        if isinstance(body, (PageIngest, PageUpdate)):
            check_page(body.frontmatter, lambda target: memory.views.shared_winner(event.layer, target) is not None)
        return
    if not isinstance(body, (PageIngest, PageUpdate, PageDelete, PageRename)):
        return
    slug = body.old if isinstance(body, PageRename) else body.slug
    since = held_since(memory, slug)
    if since is not None:
        verb = {PageUpdate: "update", PageDelete: "delete", PageRename: "rename"}.get(type(body), "update")
        raise Held(f"page {slug!r} is held (governance: hold, seq {since}); refusing to {verb} it.", slug)
    if isinstance(body, (PageIngest, PageUpdate)):
        if withheld(body.frontmatter.get("status")) == "superseded" and superseded_by(
                body.frontmatter.get("status")) == body.slug:
            raise InvalidInput(f"page {body.slug!r} cannot be superseded by itself")
        check_page(body.frontmatter, lambda target: bool(memory.views.heads(target)))
