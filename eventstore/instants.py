"""Instants given on the command line: ISO 8601 dates and times, UTC unless an offset is given."""

import datetime as dt

from .errors import InvalidInput


def parse_instant(text: str) -> int:
    """Milliseconds since the epoch. A bare date means its first moment (00:00 UTC)."""
    value = text.strip()
    try:
        if len(value) == 10:
            moment = dt.datetime.combine(dt.date.fromisoformat(value), dt.time(), dt.timezone.utc)
        else:
            moment = dt.datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise InvalidInput(f"{text!r} is not an ISO 8601 date or time (e.g. 2026-11-29 or "
                           "2026-11-29T14:02:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def format_instant(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
