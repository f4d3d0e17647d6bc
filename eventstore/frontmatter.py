"""Page frontmatter: parsed as YAML through msgspec, emitted by a small deterministic writer.

The writer quotes every value that is not obviously a plain scalar (as a JSON string, which is
valid YAML), so no field value can ever break out of its line or end the frontmatter block.
"""

import datetime as dt
import json
import re
from typing import Any

import msgspec

from .errors import InvalidInput

KNOWN_KEYS = ("type", "title", "description", "status", "stale_after", "sources")
ONE_LINE_KEYS = ("type", "title", "description", "status", "stale_after")
MAX_DEPTH = 16
_PLAIN = re.compile(r"^[A-Za-z0-9_/][A-Za-z0-9 _.,:/@()+\-]*$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n", "~"}
_NUMBERISH = re.compile(r"^[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?$|^0[xob]|^\.(inf|nan)$", re.I)


def split(document: str) -> tuple[str | None, str]:
    """Splits `---\\n<yaml>---\\n<body>`; returns (None, document) when there is no frontmatter."""
    if not document.startswith("---\n") and not document.startswith("---\r\n"):
        return None, document
    lines = document.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r\n") == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    raise InvalidInput("frontmatter is not closed: no line '---' ends the block that starts the page")


def _normalise(value: Any, where: str) -> Any:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"frontmatter key {k!r} in {where} is not a string")
            out[k] = _normalise(v, f"{where}.{k}")
        return out
    if isinstance(value, list):
        return [_normalise(v, where) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InvalidInput(f"frontmatter value at {where} has an unsupported type {type(value).__name__}")


def parse(yaml_text: str) -> dict[str, Any]:
    """Parses and checks page frontmatter: `type` required, one-line fields single-line, sources a list."""
    try:
        data = msgspec.yaml.decode(yaml_text.encode("utf-8")) if yaml_text.strip() else None
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"frontmatter is not valid YAML: {exc}") from None
    return check(data)


def _depth(value: Any) -> int:
    """How deeply `value` nests, counted without recursion (so a hostile value cannot overflow the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check(data: Any) -> dict[str, Any]:
    """Checks a frontmatter mapping, from a page file or from an event made anywhere."""
    if _depth(data) > MAX_DEPTH:
        raise InvalidInput(f"frontmatter nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict):
        raise InvalidInput("frontmatter must be a YAML mapping with at least `type`")
    data = _normalise(data, "frontmatter")
    if "type" not in data:
        raise InvalidInput("frontmatter has no `type`; it is required (e.g. `type: procedure`)")
    for key in ONE_LINE_KEYS:
        if key not in data:
            continue
        value = data[key]
        if key == "type" and (not isinstance(value, str) or not value.strip()):
            raise InvalidInput("frontmatter `type` must be a non-empty string")
        if value is not None and not isinstance(value, (str, int, float)):
            raise InvalidInput(f"frontmatter `{key}` must be a single value, not {type(value).__name__}")
        if isinstance(value, str) and ("\n" in value or "\r" in value or "---" in value.strip()[:3]):
            raise InvalidInput(f"frontmatter `{key}` must be one line; a newline or '---' in it "
                               "could inject frontmatter")
    if "sources" in data:
        sources = data["sources"]
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise InvalidInput("frontmatter `sources` must be a list of strings")
        if any("\n" in s or "\r" in s for s in sources):
            raise InvalidInput("frontmatter `sources` entries must be one line each")
    return data


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        if (_PLAIN.match(value) and value.lower() not in _YAML_WORDS and not _NUMBERISH.match(value)
                and value == value.strip() and ": " not in value and not value.endswith(":")):
            return value
        return json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) and key.lower() not in _YAML_WORDS else json.dumps(key, ensure_ascii=False)


def ordered_keys(frontmatter: dict[str, Any]) -> list[str]:
    """Known keys in their documented order, then every other key sorted: one canonical layout."""
    return [k for k in KNOWN_KEYS if k in frontmatter] + sorted(k for k in frontmatter if k not in KNOWN_KEYS)


def emit(frontmatter: dict[str, Any]) -> str:
    out = ["---\n"]
    for key in ordered_keys(frontmatter):
        value = frontmatter[key]
        if isinstance(value, list) and value and all(not isinstance(v, (list, dict)) for v in value):
            out.append(f"{_key(key)}:\n")
            out.extend(f"  - {_scalar(v)}\n" for v in value)
        else:
            out.append(f"{_key(key)}: {_scalar(value)}\n")
    out.append("---\n")
    return "".join(out)
