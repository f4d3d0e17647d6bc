"""A line-based three-way merge, for a hand edit made on a file that was not the page's current version (a write
through `mem mcp` or another command came in between): the edit is applied onto the current version when the two
changed different lines, and refused when they changed the same ones."""

import difflib


def _changes(base: list[str], other: list[str]) -> list[tuple[int, int, list[str]]]:
    """The regions of `base` that `other` changed: (start, end, the lines that replace base[start:end])."""
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [(i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def three_way(base: str, ours: str, theirs: str) -> str | None:
    """`theirs`' changes from `base` applied onto `ours` (which holds its own changes from `base`); None when a change
    of each replaces the same lines of `base`, or both insert at the same place (and they are not the same change, nor
    one the other's with lines more before or after it).
    Changes side by side are both kept, in the order of the lines they follow."""
    base_lines, ours_lines, theirs_lines = (text.splitlines(keepends=True) for text in (base, ours, theirs))
    changes = sorted([*_changes(base_lines, ours_lines), *_changes(base_lines, theirs_lines)],
                     key=lambda change: (change[0], change[1]))
    merged: list[tuple[int, int, list[str]]] = []
    for start, end, lines in changes:
        if merged and (start < merged[-1][1] or start == end == merged[-1][0] == merged[-1][1]):
            if (kept := _covering(merged[-1], (start, end, lines))) is None:
                return None
            merged[-1] = kept
            continue
        merged.append((start, end, lines))
    out, at = [], 0
    for start, end, lines in merged:
        out += base_lines[at:start] + lines
        at = end
    return "".join(out + base_lines[at:])


def _covering(one: tuple[int, int, list[str]], other: tuple[int, int, list[str]]) -> tuple | None:
    """Of two changes of the same lines of the base, the one whose new lines hold the other's at their start or end
    (both made one change, and one side went on: a file edited by hand on a version since adopted from it, whose
    edit appends to what was adopted); None when they differ otherwise."""
    if one == other:
        return one
    if one[:2] != other[:2]:
        return None
    short, long = sorted((one[2], other[2]), key=len)
    if short and (long[:len(short)] == short or long[len(long) - len(short):] == short):
        return (*one[:2], long)
    return None
