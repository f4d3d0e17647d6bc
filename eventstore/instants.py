"""Instants given on the command line, as people type them.

ISO 8601 (`2026-11-29`, `2026-11-29T14:02`, `2026-11-29T14:02:00+01:00`), a time today (`14:00`),
`today`/`yesterday` with an optional time (`yesterday 14:00`), `now`, and relative forms (`2h ago`,
`90 minutes ago`), and milliseconds since 1970 as `--json` gives them (`1796354686391`, thirteen digits: other counts
are ISO 8601's compact forms, or no time). Everything without an offset is in the local timezone (the `TZ` variable)."""

import datetime as dt
import re

from .errors import InvalidInput

FORMS = ("ISO 8601 like 2026-11-29, 2026-11-29T14:02 or 2026-11-29T14:02:00+01:00; 14:00, yesterday 14:00, "
         "today, now, 2h ago, 30 min ago, 3 days ago; or milliseconds since 1970, as --json gives them: 13 digits)")

UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
         "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
         "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
         "d": 86400, "day": 86400, "days": 86400,
         "w": 604800, "week": 604800, "weeks": 604800}

AGO = re.compile(r"([0-9]+)\s*([a-z]+)\s+ago")
DAY_AND_TIME = re.compile(r"(today|yesterday)(?:\s+(\d{1,2}:\d{2}(?::\d{2})?))?")
CLOCK = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?")
YEAR = re.compile(r"\s*(\d{4})-")


class BeyondCalendar(InvalidInput):
    """An instant the platform's calendar could not convert: near the ends of the years 1970 to 9999 in local time."""


LAST_MS = 253402300799999
"""The last millisecond of the year 9999 (UTC): the last instant mindlog writes or reads."""


def parse_instant(text: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch. A bare date means its first moment; `now_ms` fixes the clock. An instant
    before 1970 or after 9999 is refused in words (Python's datetime raised a traceback past its years)."""
    try:
        ms = _parse(text, now_ms)
    except (OverflowError, ValueError):
        raise BeyondCalendar(f"{text!r} is too far from today for a calendar (years 1970 to 9999)") from None
    if ms < 0:
        raise InvalidInput(f"{text!r} is before 1970-01-01: no event is that old")
    if ms > LAST_MS:
        raise InvalidInput(f"{text!r} is after the year 9999")
    return ms


def _parse(text: str, now_ms: int | None) -> int:
    value = " ".join(text.strip().lower().split())
    now = (dt.datetime.fromtimestamp(now_ms / 1000) if now_ms is not None else dt.datetime.now()).astimezone()
    if value == "now":
        return int(now.timestamp() * 1000)
    if match := AGO.fullmatch(value):
        if match[2] not in UNITS:
            raise InvalidInput(f"{text!r}: unknown unit {match[2]!r} (use s, min, h, days or weeks)")
        return int(now.timestamp() * 1000) - int(match[1]) * UNITS[match[2]] * 1000
    if match := DAY_AND_TIME.fullmatch(value):
        day = now.date() - dt.timedelta(days=1 if match[1] == "yesterday" else 0)
        return _local(day, match[2] or "00:00", text)
    if CLOCK.fullmatch(value):
        return _local(now.date(), value, text)
    if value.isascii() and value.isdigit() and len(value) == 13:  # a time from --json output (nc26b): 2001 to 2286;
        return int(value)  # a compact ISO 8601 time has 12 or 14 digits, a date 8 (nc27a: 12 was read as ms)
    try:
        if len(value) == 10:
            moment = dt.datetime.combine(dt.date.fromisoformat(value), dt.time())
        else:
            moment = dt.datetime.fromisoformat(value.upper())
    except ValueError:
        raise InvalidInput(f"{text!r} is not a time mindlog understands (e.g. {FORMS}") from None
    return _ms(moment, text)


def past_instant(text: str, now_ms: int | None = None, latest_ms: int | None = None) -> int:
    """A moment to look back at (`--at`): parsed as `parse_instant` does, refused when it is still to come
    (a future time would show today's memory as if it were then's). `latest_ms`: the log's newest recorded time,
    which a clock set back since lies ahead of: up to it is no future, and `now` is it (nc29a: `--at now` showed the
    memory from before the events recorded while the clock was ahead)."""
    now = int(dt.datetime.now().timestamp() * 1000) if now_ms is None else now_ms
    ceiling = max(now, latest_ms or 0)
    if ceiling > now and " ".join(text.strip().lower().split()) == "now":
        return ceiling
    try:
        at_ms = parse_instant(text, now)
    except BeyondCalendar:
        year = YEAR.match(text)
        if year and int(year[1]) > dt.datetime.fromtimestamp(ceiling / 1000).year:  # `9999-12-31` was "too far from
            raise InvalidInput(f"{text!r} is in the future") from None  # today for a calendar (1970 to 9999)" (nc22b)
        raise
    if at_ms > ceiling:
        raise InvalidInput(f"{text!r} ({format_local(at_ms)}) is in the future")
    return at_ms


def _local(day: dt.date, clock: str, text: str) -> int:
    try:
        moment = dt.datetime.combine(day, dt.time.fromisoformat(clock.zfill(len(clock) + 1) if clock.index(":") == 1 else clock))
    except ValueError:
        raise InvalidInput(f"{text!r}: {clock!r} is not a time of day") from None
    return _ms(moment, text)


def _ms(moment: dt.datetime, text: str) -> int:
    """A local time (no offset) that the clocks skipped, as they go forward for daylight saving, is refused: the
    platform would take it for an hour later or earlier, a moment nobody named. So is one that happened twice, as
    they go back: the first of the two was taken silently, an hour from the one meant as often as not."""
    ms = int(moment.astimezone().timestamp() * 1000)
    if moment.tzinfo is None:
        named = moment.replace(microsecond=0).isoformat()
        if dt.datetime.fromtimestamp(ms // 1000) != moment.replace(microsecond=0):
            raise InvalidInput(f"{text!r} never happened here: the clocks skipped it (daylight saving); give the "
                               f"offset, e.g. {named}{format_local(ms)[-6:]}")
        later = int(moment.replace(fold=1).astimezone().timestamp() * 1000)
        if later != ms:
            raise InvalidInput(f"{text!r} happened twice here: the clocks went back (daylight saving); give the "
                               f"offset: {named}{format_local(ms)[-6:]} (the first) or {named}{format_local(later)[-6:]}")
    return ms


def format_instant(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def format_local(ms: int) -> str:
    """An instant in the local timezone with its offset, as the CLI says which moment it resolved: to the
    millisecond, as events are recorded (two seqs a few milliseconds apart read as two instants)."""
    return dt.datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")
