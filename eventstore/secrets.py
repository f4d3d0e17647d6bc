"""Secrets kept out of the log: every write is scanned with detect-secrets' plugins before it exists.

detect-secrets is built to scan files in a repository; here its plugins run in-process on the
strings of one event body. Three things make that fast enough for every write (well under 2 ms
for a 4 KB page): a line is only handed to the plugins when a cheap prefilter sees something a
secret could be (a long token, a key block, credentials in a URL, a secret-ish keyword); the
plugins run on that line only; and the high-entropy check runs on tokens, not on quoted strings
(an agent pastes a key bare, not in quotes). Hex strings, UUIDs and seqs are ordinary text here:
digests and ids are everywhere in a memory log, so the hex entropy and public-IP plugins are off.
"""

import bisect
import re
from collections.abc import Iterator
from functools import cache

import msgspec

from .envelope import new_event
from .errors import MemError, for_each


class SecretFound(MemError):
    """A write would put a secret into the log. The message names its kind and place, never its value.

    `refused` says what was found and that nothing was written; the message adds how to proceed: the
    CLI's flag, or for an MCP client (whose tools have no such flag) to leave the secret out."""

    code = "secret-detected"
    status = 422

    def __init__(self, refused: str):
        self.refused = refused
        super().__init__(**for_each(f"{refused} (", "pass --allow-secret if it really belongs in memory)",
                                    "leave the secret out and call again: the MCP tools never store one)"))


def without_advice(refusal: MemError) -> str:
    """A refusal's own words without the advice a secret's gives whoever made the write (`pass --allow-secret`),
    told in another's words where the write is someone else's (a hand edit)."""
    if isinstance(refusal, SecretFound):
        return refusal.refused.removesuffix("; nothing was written")
    return str(refusal)


class Finding(msgspec.Struct, frozen=True):
    kind: str
    field: str
    line: int

    def __str__(self) -> str:
        return f"{self.kind} in `{self.field}`, line {self.line}"


_OFF = {"Base64 High Entropy String", "Hex High Entropy String", "Public IP (ipv4)"}
_KEYWORD = re.compile(r"(?i:pass|secret|key|token|auth|cred|pwd)[\w-]{0,64}['\"]?\s{0,8}[:=]+\s{0,8}['\"]")
r"""Bounded runs: `[\w-]*` read to the end of `keykeykey...` from each `key`, a 60 KB line for 31 s (nc25a)."""
_BARE = re.compile(r"(?ai:(?<![a-z0-9])(?:pass(?:words?|wd|phrase)|pwd|(?:api|secret|access|private)[_-]?key"
                   r"|client[_-]?secret|(?:auth|access|refresh|bearer|api)[_-]?token))"
                   r"(\s{0,8}[:=]\s{0,8})(`?[^\s'\"`]{6,}`?)")
"""A password or key given bare, `password: Tr0ub4dor&3` (the plugins take quoted values only). ASCII case only,
so that `may_hold_secret`'s lower-cased look for its words never misses one."""
_BARE_WORDS = ("pass", "pwd", "key", "secret", "token")
_NAME_TAIL = re.compile(r"[a-z]{0,6}[ \t\n\r\f\v]{0,8}[:=]")  # the rest of _BARE's names (`pass|phrase`)
_PREFILTER = re.compile(r"[A-Za-z0-9+/=_\-]{16,}|PRIVATE KEY|://[^\s/:@]+:[^\s/@]+@|" + _KEYWORD.pattern)
_NEWLINE = re.compile("\n")
_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-]{20,}")
_HEX = re.compile(r"^[0-9a-fA-F\-]+$")
_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{16}")
ENTROPY_LIMIT = 4.5


@cache
def _plugins():
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.filters import heuristic
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    plugins = [cls() for kind, cls in sorted(get_mapping_from_secret_type_to_class().items()) if kind not in _OFF]
    filters = (heuristic.is_sequential_string, heuristic.is_potential_uuid, heuristic.is_templated_secret,
               heuristic.is_prefixed_with_dollar_sign)
    return plugins, filters, heuristic.is_indirect_reference, Base64HighEntropyString()


def _entropy_token(token: str, entropy) -> bool:
    if (_HEX.match(token) or token.count("/") > 3 or not re.search(r"\d", token)
            or not re.search(r"[A-Za-z]", token)):
        return False  # digests and ids, paths, words
    return entropy.calculate_shannon_entropy(token) > ENTROPY_LIMIT


def may_hold_secret(text: str) -> bool:
    """False only when neither _PREFILTER nor _BARE finds anything in `text`, at a tenth of their cost on ordinary
    prose (the hub checks every pushed event): each of _PREFILTER's branches needs a run of 16 token characters,
    the literal `PRIVATE KEY`, `://`, or a quote (the keyword branch ends with one); _BARE, `_bare_hints`."""
    return _may_hold_plugin_secret(text) or bool(_bare_hints(text))


def _may_hold_plugin_secret(text: str) -> bool:
    return ('"' in text or "'" in text or "://" in text or "PRIVATE KEY" in text
            or _RUN.search(text) is not None)


def _bare_hints(text: str) -> list[int]:
    """Where _BARE may match: each of its words followed by the rest of a name, blanks, and `:` or `=` (found with
    `str.find`: a case-blind regex over the whole text costs 50 µs a kilobyte)."""
    lower, hints = text.lower(), []
    for word in _BARE_WORDS:
        at = lower.find(word)
        while at >= 0:
            if _NAME_TAIL.match(lower, at + len(word)):
                hints.append(at)
            at = lower.find(word, at + 1)
    return hints


_CLASS_CHANGE = re.compile(r"(?<=[A-Za-z])(?=[^A-Za-z])|(?<=[0-9])(?=[^0-9])|(?<=[^A-Za-z0-9])(?=[A-Za-z0-9])")
_WORDS_AFTER = re.compile(r"\s+[A-Za-z]{2,}")
_SHELL_VALUE = re.compile(r"[A-Za-z0-9+-]+")
"""A value given as a shell gives one, that words after it do not make prose: letters, digits, `+` and `-`; not
`form.password2`, `id_ed25519.pub` or `client_secret_v2`, names of things in code and notes (nc27a)."""


def _bare_secret(line: str, filters, is_indirect_reference) -> bool:
    """A value given bare after a password's or key's name that reads as one, not as prose about it (an MCP client
    has no --allow-secret: a note refused is a note lost, nc25a): eight characters or more, lower-case letters and
    digits, alternating as a made-up string does (`Tr0ub4dor&3`, a key of twelve or more), the line's last word
    (`password: Argon2id hashed` is prose, `access_token: JWT-RS256` a name, `password: ${DB_PASS}` a reference)
    unless given as a shell or .env file gives it, `API_KEY=sk9Lw2QpXz7m` with no blank around `=`, which words after
    it do not make prose (nc26b)."""
    for match in _BARE.finditer(line):
        value = match.group(2).strip("`").rstrip(".,;:)")
        if (len(value) >= 8 and re.search(r"[a-z]", value) and re.search(r"\d", value) and "/" not in value
                and (len(value) >= 12 or len(_CLASS_CHANGE.findall(value)) >= 3)
                and ((match.group(1) == "=" and _SHELL_VALUE.fullmatch(value))
                     or not _WORDS_AFTER.match(line, match.end()))
                and not any(f(value) for f in filters)
                and not is_indirect_reference(line)):
            return True
    return False


def scan_text(text: str, field: str) -> Iterator[Finding]:
    """The secrets in one string, each with its kind, this field's name and its line (from 1)."""
    hints = _bare_hints(text)  # once: the gate and the lines to read both need them (the hub scans every push)
    if not hints and not _may_hold_plugin_secret(text):
        return
    hits = [m.start() for m in _PREFILTER.finditer(text)] + hints
    if not hits:
        return
    plugins, filters, is_indirect_reference, entropy = _plugins()
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
    lines = text.split("\n")
    for index in sorted({bisect.bisect_right(starts, hit) - 1 for hit in hits}):
        line = lines[index]
        kinds = []
        keyword = _KEYWORD.search(line) is not None
        for plugin in plugins:
            if plugin.secret_type == "Secret Keyword" and not keyword:
                continue  # the slowest plugin, and it only looks at quoted assignments
            # analyze_string, not analyze_line: the latter may verify a secret over the network.
            for value in plugin.analyze_string(line):
                if any(f(value) for f in filters) or (plugin.secret_type == "Secret Keyword"
                                                      and is_indirect_reference(line)):
                    continue
                if plugin.secret_type not in kinds:
                    kinds.append(plugin.secret_type)
        if "Secret Keyword" not in kinds and _bare_secret(line, filters, is_indirect_reference):
            kinds.append("Secret Keyword")
        if not kinds and any(_entropy_token(token, entropy) for token in _TOKEN.findall(line)):
            kinds.append("High Entropy String")
        for kind in kinds:
            yield Finding(kind=kind, field=field, line=index + 1)


def scan_value(value, field: str) -> Iterator[Finding]:
    """Every string inside a value (a body field, a frontmatter mapping, content blocks)."""
    if isinstance(value, str):
        yield from scan_text(value, field)
    elif isinstance(value, bytes):
        yield from scan_text(value.decode("utf-8", "replace"), field)
    elif isinstance(value, dict):
        for number, (key, item) in enumerate(value.items(), 1):
            in_key = list(scan_text(key, f"{field} (its key {number})")) if isinstance(key, str) else []
            yield from in_key  # a map of credentials keyed by the token: the key is text someone wrote too
            values = [item] if isinstance(item, str) else item if isinstance(item, list) else []
            if isinstance(key, str) and _bare_hints(key + ":") and any(isinstance(v, str) for v in values):
                _plugins_, filters, is_indirect_reference, _entropy = _plugins()
                if any(isinstance(v, str) and _bare_secret(f"{key}: {v}", filters, is_indirect_reference)
                       for v in values):  # `password: hunter2` in YAML, or `password: [hunter2]` (nc25a)
                    yield Finding(kind="Secret Keyword", field=f"{field}.{key}", line=1)
                    continue
            yield from scan_value(item, f"{field} (its key {number})" if in_key else f"{field}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from scan_value(item, f"{field}[{index}]")


SKIPPED_FIELDS = frozenset({"parents", "reverses", "target_ids", "allowed_secrets", "kind"})


def scan_body(body) -> list[Finding]:
    """The secrets in an event body, field by field (ids and parents are not text anyone wrote)."""
    found = []
    for name in body.__struct_fields__:
        if name not in SKIPPED_FIELDS:
            value = getattr(body, name)
            if type(value) is not str or may_hold_secret(value):  # most fields: no generator made
                found.extend(scan_value(value, name))
    return found


def describe(findings: list[Finding]) -> str:
    shown = "; ".join(str(f) for f in findings[:3])
    more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
    return shown + more


def refuse(findings: list[Finding], what: str = "the write") -> None:
    if findings:
        raise SecretFound(f"{what} looks like it holds a secret: {describe(findings)}; nothing was written")


def checked(event, allow: bool = False):
    """The event to append: refused when it holds a secret, or (allowed) re-made to record what was found. The
    removal of an Always line is not scanned: its text is the line's, recorded already, and refusing it kept a
    secret added with --allow-secret in mind.md for good."""
    if event.kind == "always.remove":
        return event
    findings = scan_body(event.body)
    if not findings:
        return event
    if not allow:
        refuse(findings)
    body = msgspec.structs.replace(event.body, allowed_secrets=[str(f) for f in findings])
    return new_event(body, agent=event.agent, layer=event.layer, ts=event.ts, id=event.id)
