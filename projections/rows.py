"""Many rows into SQLite by a few statements: a bulk build's inserts.

`executemany` binds and steps one row at a time; one INSERT of many rows (`VALUES (...), (...), ...`)
binds them all at once and runs one statement, which costs SQLite and the sqlite3 module about half as
much per row. The statements, one per distinct single-row INSERT, stay prepared in the connection's cache.
"""

import functools
import itertools
import re

ROWS = 64
"""Rows per statement (at most 64 × the columns parameters: far below SQLite's limit of 32,766)."""
_PARAMETER = re.compile(r"\?(\d*)")


def insert_many(db, statement: str, rows: list) -> None:
    """Runs a single-row `INSERT ... VALUES (...)` (its parameters `?` or `?N`) for each row, ROWS at a time."""
    whole = len(rows) - len(rows) % ROWS
    if whole:
        many = _repeated(statement, ROWS)
        flatten = itertools.chain.from_iterable
        for start in range(0, whole, ROWS):
            db.execute(many, list(flatten(rows[start:start + ROWS])))
    if whole < len(rows):
        db.executemany(statement, rows[whole:])


@functools.cache
def _repeated(statement: str, count: int) -> str:
    """The statement with its VALUES tuple repeated `count` times, each copy's parameters numbered after the last's."""
    head, _, values = statement.rpartition(" VALUES ")
    numbered, width = _numbered(values)
    copies = [_PARAMETER.sub(lambda m, k=k: f"?{int(m.group(1)) + k * width}", numbered) for k in range(count)]
    return f"{head} VALUES {', '.join(copies)}"


def _numbered(values: str) -> tuple[str, int]:
    """A VALUES tuple with plain `?` numbered in order, and how many parameters each row binds."""
    counter = itertools.count(1)
    numbered = _PARAMETER.sub(lambda m: m.group(0) if m.group(1) else f"?{next(counter)}", values)
    return numbered, max(int(n) for n in re.findall(r"\?(\d+)", numbered))

