"""Page frontmatter: parsed as YAML through msgspec, emitted by a small deterministic writer.

The writer quotes every value that is not obviously a plain scalar (as a JSON string, which is
valid YAML, with the Unicode line separators escaped too), so no field value can ever break out of
its line or end the frontmatter block, whatever a reader counts as a line break.
"""

import datetime as dt
import json
import math
import re
from typing import Any

import msgspec

from .errors import InvalidInput

KNOWN_KEYS = ("type", "title", "description", "status", "stale_after", "sources")
ONE_LINE_KEYS = ("type", "title", "description", "status", "stale_after")
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9 _.,:/@()+\-]*")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
"""Matched whole (fullmatch): `$` would also match before a trailing newline, and a key `A\\n` was written raw."""
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n", "~"}
MAX_DEPTH = 32
# What str.splitlines() (and so many a reader) breaks a line at, beyond \n and \r.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile(f"[{LINE_BREAKS}]")
_UNPRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")
"""What json.dumps keeps raw and a YAML reader refuses (DEL, C1 controls, U+FFFE/U+FFFF) or takes as a
line break (U+0085, U+2028, U+2029): escaped as \\uXXXX inside the quoted value."""
_NUMBERISH = re.compile(r"^[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?$|^0[xob]|^\.(inf|nan)$", re.I)


def split(document: str) -> tuple[str | None, str]:
    """Splits `---\\n<yaml>---\\n<body>`; returns (None, document) when there is no frontmatter.

    Lines end at \\n only: a U+2028 or form feed does not end a line here, so nothing hidden in a
    value can close the block early."""
    if not document.startswith("---\n") and not document.startswith("---\r\n"):
        return None, document
    lines = document.split("\n")
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r") == "---":
            return "".join(line + "\n" for line in lines[1:i]), "\n".join(lines[i + 1:])
    raise InvalidInput("frontmatter is not closed: no line '---' ends the block that starts the page")


def _normalise(value: Any, where: str, depth: int = 1) -> Any:
    if depth > MAX_DEPTH:
        raise InvalidInput(f"frontmatter is nested more than {MAX_DEPTH} deep (at {where[:80]})")
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"frontmatter key {k!r} in {where} is not a string")
            out[k] = _normalise(v, f"{where}.{k}", depth + 1)
        return out
    if isinstance(value, list):
        return [_normalise(v, where, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"frontmatter value at {where[:80]} is {value!r} (YAML's .inf or .nan), which JSON cannot "
                           "hold; quote it to keep it as text")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InvalidInput(f"frontmatter value at {where} has an unsupported type {type(value).__name__}")


# The frontmatter most pages have: `key: words`, `key: YYYY-MM-DD`, `key:` and `- item` lines. A value that
# starts with an ASCII letter and is not a YAML 1.1 boolean or null is a string to YAML, so these lines are
# read here without importing a YAML parser (a tenth of a `mem page write`); anything else goes to YAML.
_SIMPLE_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?")
_SIMPLE_ITEM = re.compile(r"( *)- +(.*)")
_SIMPLE_WORDS = re.compile(r"[A-Za-z](?:[^\x00-\x1f\x7f-\x9f#'\"\\\[\]{}\u2028\u2029\ufeff]*[^\s:])?")
_SIMPLE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _simple_value(text: str) -> Any:
    """A scalar as YAML reads it, or the function `_simple_value` itself when it is none of the simple forms."""
    if _SIMPLE_WORDS.fullmatch(text) and ": " not in text and text.lower() not in _YAML_WORDS \
            and text.isprintable():
        return text
    if _SIMPLE_DATE.fullmatch(text):
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            pass
    return _simple_value


def _simple(yaml_text: str) -> dict[str, Any] | None:
    """The frontmatter when every line has one of the simple forms, else None (YAML reads it then)."""
    data: dict[str, Any] = {}
    key, indent = None, None
    for line in yaml_text.split("\n")[:-1] if yaml_text.endswith("\n") else yaml_text.split("\n"):
        item = _SIMPLE_ITEM.fullmatch(line)
        if item:
            value = _simple_value(item[2])
            if key is None or value is _simple_value or indent not in (None, item[1]):
                return None
            indent = item[1]
            data[key] = [*(data[key] or []), value]
            continue
        pair = _SIMPLE_KEY.fullmatch(line)
        if not pair or pair[1] in data or pair[1].lower() in _YAML_WORDS:
            return None
        value = None if pair[2] is None else _simple_value(pair[2])
        if value is _simple_value:
            return None
        data[pair[1]] = value
        key, indent = (pair[1], None) if value is None else (None, None)
    return data or None


def _yaml_refusal(said: str) -> str:
    """PyYAML's words in one line, without its `in "<byte string>"` (lines counted from the frontmatter's first),
    and, for a value holding ": " (`status: superseded-by: deploy`), how to write it."""
    text = " ".join(said.replace('in "<byte string>",', "at frontmatter").split())
    if text.startswith("mapping values are not allowed"):
        text += '; quote a value that holds ": ", as in status: "superseded-by: deploy"'
    return f"frontmatter is not valid YAML: {text}"


def _refuse_aliases_and_twins(yaml_text: str) -> None:
    """Refuses a YAML alias (`*name`) before the frontmatter is built: an alias repeats what its anchor holds
    without its bytes, so nine levels of `[*a, *a, ...]` make a 400-byte page gigabytes ("billion laughs"),
    paid for before any size limit can see it. And a key given twice in one mapping (`type: note` then
    `type: other`), which YAML forbids and its loader takes silently, the last one winning. Read from the YAML
    events, which builds nothing."""
    import yaml  # here, as msgspec.yaml imports it: a page whose frontmatter is simple never needs it

    open_: list[list | None] = []  # per open collection: [its keys so far, a key comes next] for a mapping, or None
    try:
        for event in yaml.parse(yaml_text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(event, yaml.AliasEvent):
                raise InvalidInput(f"frontmatter uses the YAML alias *{event.anchor[:40]}; aliases are refused (a few "
                                   "can expand a small page into gigabytes): write the value out in full")
            if isinstance(event, yaml.CollectionEndEvent):
                open_.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            mapping = open_[-1] if open_ else None
            if mapping is not None:
                if mapping[1] and isinstance(event, yaml.ScalarEvent):
                    if event.value in mapping[0]:
                        raise InvalidInput(f"frontmatter gives the key {event.value[:80]!r} twice in one mapping; YAML "
                                           "keeps only the last: write it once")
                    mapping[0].add(event.value)
                mapping[1] = not mapping[1]
            if isinstance(event, yaml.MappingStartEvent):
                open_.append([set(), True])
            elif isinstance(event, yaml.SequenceStartEvent):
                open_.append(None)
    except yaml.YAMLError:
        return  # not YAML at all: decoding it says where, in the words every other refusal uses


def parse(yaml_text: str) -> dict[str, Any]:
    """Parses and checks page frontmatter: `type` required, one-line fields single-line, sources a list."""
    simple = _simple(yaml_text)
    if simple is not None:
        return check(simple)
    _refuse_aliases_and_twins(yaml_text)
    try:
        data = msgspec.yaml.decode(yaml_text.encode("utf-8")) if yaml_text.strip() else None
    except msgspec.DecodeError as exc:
        if "maximum nesting depth" in str(exc):  # PyYAML 6.0.4 bounds a flow's depth itself
            raise InvalidInput(TOO_DEEP) from None
        raise InvalidInput(_yaml_refusal(str(exc))) from None
    except RecursionError:
        raise InvalidInput(TOO_DEEP) from None
    return check(data)


TOO_DEEP = f"frontmatter is nested too deep (or refers to itself); the limit is {MAX_DEPTH}"


def check(data: Any) -> dict[str, Any]:
    """Checks a frontmatter mapping, from a page file or from an event made anywhere."""
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
        if isinstance(value, str) and (_LINE_BREAK.search(value) or "---" in value.strip()[:3]):
            raise InvalidInput(f"frontmatter `{key}` must be one line; a line break (newline, U+2028 and the "
                               "like) or '---' in it could inject frontmatter")
    if "sources" in data:
        sources = data["sources"]
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise InvalidInput("frontmatter `sources` must be a list of strings")
        if any(_LINE_BREAK.search(s) for s in sources):
            raise InvalidInput("frontmatter `sources` entries must be one line each")
    return data


def _quoted(value: Any, **options) -> str:
    text = json.dumps(value, ensure_ascii=False, **options)
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        if (_PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS and not _NUMBERISH.match(value)
                and value == value.strip() and ": " not in value and not value.endswith(":")):
            return value
        return _quoted(value)
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return _quoted(value, sort_keys=True)


def _key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML_WORDS else _quoted(key)


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
