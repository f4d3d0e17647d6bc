"""`mem lint`: the ADF guide's maintenance checklist as named, mechanical checks, now or as of any seq.

Each check takes a `Scope` (the views, the log, the moment) and returns findings; `run` runs the
chosen ones. Contradictions are defined mechanically (active material citing withheld or reversed
material, pages superseding each other, index drift); `judge_pairs` offers the pairs that share
many search terms to a command the user supplies, for the contradictions no rule can see.
"""

import json
import os
import re
import signal
import subprocess
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import msgspec

from eventstore.envelope import decode_body
from eventstore.errors import InvalidInput, MemError
from eventstore.layers import produces
from eventstore.redaction import REDACTED_TYPE

from . import render, trust
from .adf import config_object
from .audit import citation_kind, cite, citations_in
from .materialize import untracked
from .search import flagged_catalog, page_trust
from .views import MIND_PATH, Views, page_path

DEFAULT_MAX_LINES = 200
DEFAULT_MAX_BYTES = 16384


class Finding(msgspec.Struct):
    """One problem found; `read_only` names the shared layer it lies in when this agent does not produce that layer,
    so only the layer's producers can mend it (such findings alone do not make `mem lint` exit 1)."""

    check: str
    path: str
    problem: str
    citation: str = ""
    read_only: str = ""

    def line(self) -> str:
        mender = f" (only a producer of layer {self.read_only} can change it)" if self.read_only else ""
        return f"[{self.check}] {self.path}: " + (f"{self.citation} " if self.citation else "") + self.problem + mender


class SharedDoc(msgspec.Struct, frozen=True):
    """A live page of a shared pages layer as of the scope's seq: its winner, which its file shows."""

    folder: str
    slug: str
    frontmatter: dict
    text: str

    @property
    def path(self) -> str:
        return self.path_of(self.slug)

    def path_of(self, slug: str) -> str:
        return f"{self.folder}{slug}.md"

    def withheld(self) -> str | None:
        return trust.withheld(self.frontmatter.get("status"))


class Scope:
    """What every check reads: the views and log as of one seq, the day that seq stands for, the root."""

    def __init__(self, views: Views, log, as_of: int, day: str, root: Path | None = None, current: bool = True,
                 agent: str | None = None):
        self.views, self.log, self.as_of, self.day, self.root, self.current = views, log, as_of, day, root, current
        self.agent = agent
        self.catalog = views.catalog(as_of)
        self.fields = page_trust(views, as_of)
        self._docs: dict[str, tuple[dict, str]] = {}
        self._shared: list[SharedDoc] | None = None

    def page(self, slug: str) -> tuple[dict, str]:
        """(frontmatter, text) of a live page as of the scope's seq."""
        if slug not in self._docs:
            _seq, doc = self.views.page_version(slug, self.as_of)
            self._docs[slug] = (doc.frontmatter, doc.text)
        return self._docs[slug]

    def withheld(self, slug: str) -> str | None:
        return trust.withheld(self.fields.get(slug, (None, None))[0])

    def active(self) -> list[str]:
        return [slug for slug, _t, _h in self.catalog if not self.withheld(slug)]

    def shared_pages(self) -> list[SharedDoc]:
        """Every live page of the shared pages layers the contract placed as of the seq, by path."""
        if self._shared is None:
            contract = self.views.contract_at(self.as_of)
            shared, found = self.views.shared, []
            for name, spec in sorted(contract.layers.items() if contract else ()):
                if spec.format != "pages":
                    continue
                for slug in shared.slugs(name, self.as_of):
                    winner = shared.winner(name, slug, self.as_of)
                    if winner is not None and not winner[3]:
                        page = decode_body(winner[4])
                        found.append(SharedDoc(spec.path, slug, page.frontmatter, page.text))
            self._shared = found
        return self._shared

    def read_only_layer(self, path: str) -> str:
        """The shared layer a finding's path lies in (a page under its folder, an entry `layer#id`) when the contract
        of the seq does not let this agent produce it; "" for the agent's own pages, entries and layers."""
        contract = self.views.contract_at(self.as_of)
        if contract is None or self.agent is None:
            return ""
        for name, spec in contract.layers.items():
            inside = path.startswith(f"{name}#") if spec.format == "entries" else path.startswith(spec.path)
            if inside and not produces(contract, self.agent, name):
                return name
        return ""

    def entries(self):
        """Every typed entry as of the seq (shared and local layers), with who reversed it."""
        shared = self.views.shared
        return [(layer, e) for layer in shared.entry_layers(self.as_of) for e in shared.entries(layer, self.as_of)]


_PAGE_LINK = re.compile(r"adf-file://mind/([a-z0-9][a-z0-9_.-]*?)\.md")
_ENTRY_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def check_contradictions(scope: Scope) -> list[Finding]:
    found = []
    reversed_ids = {e.id: e.reversed_by for _layer, e in scope.entries() if e.reversed_by}
    for slug in scope.active():
        fm, text = scope.page(slug)
        document = render.page(fm, text)
        for target in dict.fromkeys(_PAGE_LINK.findall(document)):
            why = scope.withheld(target)
            if why and target != slug:
                found.append(Finding("contradictions", page_path(slug), f"active page links {why} page "
                                     f"mind/{target}.md", f"adf-file://mind/{target}.md"))
        for entry_id in dict.fromkeys(_ENTRY_ID.findall(document)):
            if entry_id in reversed_ids:
                found.append(Finding("contradictions", page_path(slug), f"cites entry {entry_id}, reversed by "
                                     f"{reversed_ids[entry_id]}", entry_id))
    for layer, entry in scope.entries():
        if entry.reversed_by:
            continue
        for entry_id in _ENTRY_ID.findall(entry.content):
            if entry_id in reversed_ids:
                found.append(Finding("contradictions", f"{layer}#{entry.id}", f"active entry cites entry {entry_id}, "
                                     f"reversed by {reversed_ids[entry_id]}", entry_id))
    found += _reversed_twice(scope)
    targets = {slug: trust.superseded_by(status) for slug, (status, _s) in scope.fields.items()
               if trust.withheld(status) == "superseded"}
    live = {slug for slug, _t, _h in scope.catalog}
    found += _supersession(targets, live, page_path)
    found += _shared_supersession(scope.shared_pages())
    for line in scope.views.always(scope.as_of):
        for target in dict.fromkeys(_PAGE_LINK.findall(line)):
            why = scope.withheld(target)
            if target in live and why:
                found.append(Finding("contradictions", MIND_PATH, f"index drift: an Always line links a {why} page",
                                     f"adf-file://mind/{target}.md"))
    if scope.current and scope.root is not None:
        found += _catalog_drift(scope)
    return found


def _supersession(targets: dict[str, str | None], live: set[str], path_of: Callable[[str], str]) -> list[Finding]:
    """Pages of one namespace (the wiki, a shared layer) superseding each other, or superseded by a page that does
    not exist; `targets`: each superseded page's successor."""
    found = []
    for slug, target in sorted(targets.items()):
        if target and targets.get(target) == slug and slug < target:
            found.append(Finding("contradictions", path_of(slug), f"supersedes and is superseded by {path_of(target)}"))
    for slug, target in sorted(targets.items()):
        if target and target not in live and slug in live:
            found.append(Finding("contradictions", path_of(slug), "(its successor: superseded-by) does not exist: the "
                                 "page is withheld from search and believed in favour of no page",
                                 f"adf-file://{path_of(target)}"))
    return found


def _shared_supersession(docs: list[SharedDoc]) -> list[Finding]:
    """`_supersession` in each shared layer: a shared page's `superseded-by` names a page of its own layer."""
    by_folder: dict[str, list[SharedDoc]] = defaultdict(list)
    for doc in docs:
        by_folder[doc.folder].append(doc)
    found = []
    for layer_docs in by_folder.values():
        targets = {doc.slug: trust.superseded_by(doc.frontmatter.get("status")) for doc in layer_docs
                   if doc.withheld() == "superseded"}
        found += _supersession(targets, {doc.slug for doc in layer_docs}, layer_docs[0].path_of)
    return found


def _reversed_twice(scope: Scope) -> list[Finding]:
    """An entry reversed by more than one entry (two agents at once, say): both reversals stand, and the file names
    the newest only, so which one holds is a question for someone to settle."""
    by_target: dict[tuple[str, str], list] = {}
    for layer, entry in scope.entries():
        if entry.reverses:
            by_target.setdefault((layer, entry.reverses), []).append(entry)
    return [Finding("contradictions", f"{layer}#{target}", "reversed by " + " and ".join(
                f"{e.id[:18]} ({e.agent})" for e in reversers) + ": both stand; reverse the one that does not hold")
            for (layer, target), reversers in sorted(by_target.items()) if len(reversers) > 1]


def _catalog_drift(scope: Scope) -> list[Finding]:
    """Catalog lines in mind.md on disk that no longer say what the page does (a hand edit of the index)."""
    try:
        on_disk = (scope.root / MIND_PATH).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    rendered = {f"adf-file://mind/{slug}.md)": line.rstrip("\n") for slug, line in
                ((row[0], render.catalog_line(*row)) for row in
                 flagged_catalog(scope.views, scope.catalog, scope.as_of))}
    found = []
    for line in on_disk:
        for link, expected in rendered.items():
            if link in line and line != expected:
                found.append(Finding("contradictions", MIND_PATH, f"index drift: the catalog line says "
                                     f"{line!r}, the page says {expected!r}", link[:-1]))
    return found


def check_stale(scope: Scope) -> list[Finding]:
    pages = [(page_path(slug), status, stale) for slug, (status, stale) in sorted(scope.fields.items())]
    pages += [(doc.path, doc.frontmatter.get("status"), doc.frontmatter.get("stale_after"))
              for doc in scope.shared_pages()]
    return [Finding("stale", path, f"past stale_after ({trust.stale_day(stale)}): re-verify it, "
                    "then update the date or the content")
            for path, status, stale in pages if trust.is_stale(stale, scope.day) and not trust.withheld(status)]


def check_sources(scope: Scope) -> list[Finding]:
    unsourced = [page_path(slug) for slug in scope.active() if not scope.page(slug)[0].get("sources")]
    unsourced += [doc.path for doc in scope.shared_pages() if not doc.withheld() and not doc.frontmatter.get("sources")]
    return [Finding("sources", path, "has no `sources`: it cannot be re-verified") for path in unsourced]


def check_one_off_types(scope: Scope) -> list[Finding]:
    types = {slug: str(scope.page(slug)[0].get("type")) for slug in scope.active()}
    types = {slug: kind for slug, kind in types.items() if kind != REDACTED_TYPE}  # the redaction's, not a choice
    counts = Counter(types.values())
    return [Finding("one-off-types", page_path(slug), f"is the only page of type {kind!r}: reuse a type "
                    f"({', '.join(sorted(t for t in counts if t != kind)[:5]) or 'none yet'}) or keep it on purpose")
            for slug, kind in sorted(types.items()) if counts[kind] == 1 and len(types) > 1]


UNRESOLVED = {"file": "names a file that does not exist",
              "seq": "resolves to nothing (missing from the live loop, the audit and the log)",
              "entry": "names no entry of any layer of this workspace"}


def _dead(scope: Scope, where: str, text: str, check: str, kinds: tuple[str, ...]) -> list[Finding]:
    found = []
    for citation in dict.fromkeys(citations_in(text)):
        kind = citation_kind(citation)
        if kind not in kinds:
            continue
        try:
            result = cite(scope.views, scope.log, citation, scope.as_of)
        except MemError as exc:  # an audit blob that cannot be read (a bomb in an old log); two entries' prefix
            found.append(Finding(check, where, f"cannot be resolved: {exc}", citation))
            continue
        if not result.resolved:
            found.append(Finding(check, where, UNRESOLVED[kind], citation))
    return found


def check_dead_links(scope: Scope) -> list[Finding]:
    found = []
    for slug, _t, _h in scope.catalog:
        found += _dead(scope, page_path(slug), render.page(*scope.page(slug)), "dead-links", ("file",))
    for line in scope.views.always(scope.as_of):
        found += _dead(scope, f"{MIND_PATH} (## Always)", line, "dead-links", ("file",))
    for doc in scope.shared_pages():  # not its seq citations: they name its author's log
        found += _dead(scope, doc.path, render.page(doc.frontmatter, doc.text), "dead-links", ("file",))
    return found


def check_citations(scope: Scope) -> list[Finding]:
    found = []
    for slug, _t, _h in scope.catalog:
        found += _dead(scope, page_path(slug), render.page(*scope.page(slug)), "citations", ("seq", "entry"))
    return found


def check_orphans(scope: Scope) -> list[Finding]:
    if not scope.current or scope.root is None:
        return []
    return [Finding("orphans", path, f"is in {path.rsplit('/', 1)[0]}/ but is no page of the log: `mem adopt` it or "
                    "delete it") for path in untracked(scope.views, scope.root)]


def _budget(config: dict, name: str, default: int) -> int:
    """A budget from the config; one that is no whole number above 0 (an imported file's, say) is refused."""
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"the config's lint.{name} is {value!r}, not a whole number above 0: "
                           f"`mem config set lint.{name} {default}`")
    return value


def check_budget(scope: Scope) -> list[Finding]:
    config = config_object(scope.views.config(scope.as_of), "lint")
    max_lines = _budget(config, "mind_max_lines", DEFAULT_MAX_LINES)
    max_bytes = _budget(config, "mind_max_bytes", DEFAULT_MAX_BYTES)
    text = scope.views.mind(scope.as_of)
    lines, size = text.count("\n"), len(text.encode("utf-8"))
    found = []
    if lines > max_lines:
        found.append(Finding("budget", MIND_PATH, f"has {lines} lines, over the budget of {max_lines} "
                             "(`mem config set lint.mind_max_lines N`): keep the index small"))
    if size > max_bytes:
        found.append(Finding("budget", MIND_PATH, f"is {size} bytes, over the budget of {max_bytes} "
                             "(`mem config set lint.mind_max_bytes N`): keep the index small"))
    return found


CHECKS: dict[str, Callable[[Scope], list[Finding]]] = {
    "contradictions": check_contradictions,
    "stale": check_stale,
    "sources": check_sources,
    "one-off-types": check_one_off_types,
    "dead-links": check_dead_links,
    "citations": check_citations,
    "orphans": check_orphans,
    "budget": check_budget,
}


def run(scope: Scope, names: list[str] | None = None) -> list[Finding]:
    unknown = [n for n in names or () if n not in CHECKS]
    if unknown:
        raise InvalidInput(f"unknown lint check {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    return [finding for name in (names or list(CHECKS)) for finding in CHECKS[name](scope)]


# --- --judge: candidate pairs for a command to rule on -------------------------------------------------

_WORD = re.compile(r"[a-z][a-z0-9]{3,}")
_COMMON = frozenset("this that with from have will been were they them their there what when which would should "
                    "could about into only also than then more most some such each other page pages type "
                    "description status sources".split())


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _COMMON}


JUDGED_PAIRS = 50
"""The pairs sent to a judge, those sharing the most terms (a judge is a slow call, an LLM's say)."""
COMMON_HOLDERS = 500
"""A word held by more items than this pairs none of them (the pairs would grow as the square of its holders)."""
VERDICT_CHARS = 500
"""A verdict is kept to its first line, at most this long: a judge that explains at length still records."""


def candidate_pairs(scope: Scope, min_shared: int = 4, limit: int = JUDGED_PAIRS) -> tuple[list[tuple[dict, str, str]], int]:
    """Active pages (the wiki's and the shared pages layers') and live entries that share at least `min_shared`
    terms, most shared first: the first `limit`, each as the judge is sent it, with the two as findings name them
    (`mind/a.md`, `content/drafts/a.md`, `decisions#ID`); and how many pairs there were."""
    items = [(f"adf-file://{page_path(s)}", page_path(s), render.page(*scope.page(s))) for s in scope.active()]
    items += [(f"adf-file://{doc.path}", doc.path, render.page(doc.frontmatter, doc.text))
              for doc in scope.shared_pages() if not doc.withheld()]
    items += [(e.id, f"{layer}#{e.id}", f"[{e.type}] {e.date}: {e.content}") for layer, e in scope.entries()
              if not e.reversed_by]
    terms = [_terms(text) for _name, _path, text in items]
    postings = defaultdict(list)
    for i, words in enumerate(terms):
        for word in words:
            postings[word].append(i)
    shared = Counter()
    for holders in postings.values():
        if len(holders) <= COMMON_HOLDERS:
            for a in range(len(holders)):
                for b in range(a + 1, len(holders)):
                    shared[(holders[a], holders[b])] += 1
    pairs = sorted(((n, a, b) for (a, b), n in shared.items() if n >= min_shared), key=lambda p: (-p[0], p[1], p[2]))
    return [({"a": items[a][0], "b": items[b][0], "shared_terms": n, "a_text": items[a][2], "b_text": items[b][2]},
             items[a][1], items[b][1]) for n, a, b in pairs[:limit]], len(pairs)


def _run_judge(command: str, pair_json: bytes, timeout: float, pair: dict) -> subprocess.CompletedProcess:
    """The judge on one pair, in a process group of its own, so that a judge past `timeout` is stopped
    whole (a pipeline's or a script's children too) and refused."""
    with subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True) as process:
        try:
            out, err = process.communicate(pair_json, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise InvalidInput(f"the judge command gave no verdict within {timeout:g} s (on {pair['a']} and "
                               f"{pair['b']}); nothing was recorded") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


class Verdict(msgspec.Struct):
    """The judge's ruling (its first output line) on a pair, named as findings name them."""

    a: str
    b: str
    verdict: str

    def line(self) -> str:
        return f"judge: {self.a} vs {self.b}: {self.verdict}"

    def contradiction(self) -> bool:
        """A ruling of contradiction: a finding (which says it), the other verdicts only listed."""
        return self.verdict.lower().startswith("contradiction")


def judge_pairs(scope: Scope, command: str, timeout: float = 120,
                limit: int = JUDGED_PAIRS) -> tuple[list[Finding], list[Verdict], int]:
    """Sends the first `limit` candidate pairs, each as one JSON object on stdin, to `command` (a shell command,
    an LLM call say); its first output line is its verdict: `contradiction: why` is a finding, anything else
    is not. Returns the findings, every verdict and how many candidate pairs there were."""
    found, verdicts = [], []
    pairs, candidates = candidate_pairs(scope, limit=limit)
    for pair, a, b in pairs:
        result = _run_judge(command, json.dumps(pair).encode(), timeout, pair)
        if result.returncode != 0:
            said = result.stderr.decode(errors="replace").strip()[:200]
            raise InvalidInput(f"the judge command failed (exit {result.returncode}) on {pair['a']} and {pair['b']}"
                               f"{': ' + said if said else ', saying nothing on stderr'}; nothing was recorded")
        verdict = (result.stdout[:VERDICT_CHARS * 4].decode(errors="replace").strip().splitlines()
                   or ["(no verdict)"])[0][:VERDICT_CHARS]
        verdicts.append(Verdict(a, b, verdict))
        if verdicts[-1].contradiction():
            found.append(Finding("judge", a, f"contradicts {b} (judge: {verdict})"))
    return found, verdicts, candidates


class LintReport(msgspec.Struct):
    """What `mem lint` prints (`--json`: this whole); `recorded` is the seq of the lint entry `--record` added."""

    seq: int
    checks: list[str]
    findings: list[Finding]
    verdicts: list[Verdict] = []
    candidates: int = 0  # the pairs that shared enough terms to be judged; the first `len(verdicts)` were
    recorded: int | None = None

    def lines(self) -> list[str]:
        """Each finding, then each verdict that is not one (a contradiction is said once, as its finding)."""
        return [line.line() for line in (*self.findings, *(v for v in self.verdicts if not v.contradiction()))]

    def summary(self) -> str:
        judged = ""
        if "judge" in self.checks:
            judged = f" The judge ruled on {len(self.verdicts)} of {self.candidates} candidate pairs" + (
                " (those sharing the most terms; --judge-pairs N sends more)." if self.candidates > len(self.verdicts)
                else ".")
        if not self.findings:
            return f"Lint ({', '.join(self.checks)}): no findings.{judged}"
        counts = Counter(f.check for f in self.findings)
        read_only = len(self.findings) - len(self.to_mend())
        return (f"Lint: {len(self.findings)} finding(s): " + ", ".join(f"{k} {n}" for k, n in counts.items()) + "."
                + (f" {read_only} in layers only their producers can change." if read_only else "") + judged)

    def to_mend(self) -> list[Finding]:
        """The findings this agent can act on: `mem lint` exits 1 when there is one."""
        return [f for f in self.findings if not f.read_only]


def lint(memory, names: list[str] | None, as_of: int, day: str, judge: str | None = None,
         judge_timeout: float = 120, judge_pairs_sent: int = JUDGED_PAIRS) -> LintReport:
    """Runs the chosen checks (all by default) on the memory as of a seq, and the judge when given (each
    pair within `judge_timeout` seconds)."""
    if judge is not None and not judge.strip():
        raise InvalidInput("--judge needs a command: a shell command line that reads a pair (JSON) on stdin")
    if not judge_timeout > 0:
        raise InvalidInput(f"--judge-timeout must be a number of seconds above 0, not {judge_timeout:g}")
    if judge_pairs_sent < 1:
        raise InvalidInput(f"--judge-pairs must be 1 or more, not {judge_pairs_sent}")
    scope = Scope(memory.views, memory.log, as_of, day, memory.root, current=as_of >= memory.views.checkpoint(),
                  agent=memory.config.agent)
    findings = run(scope, names)
    verdicts, candidates = [], 0
    if judge:
        judged, verdicts, candidates = judge_pairs(scope, judge, judge_timeout, judge_pairs_sent)
        findings += judged
    for finding in findings:
        if finding.check != "orphans":  # a stray file is on this agent's own disk, for it to remove
            finding.read_only = scope.read_only_layer(finding.path)
    return LintReport(seq=as_of, checks=list(names or CHECKS) + (["judge"] if judge else []), findings=findings,
                      verdicts=verdicts, candidates=candidates)


def record(memory, report: LintReport):
    """One `lint` entry in mind/log.md: the summary, each finding and each verdict (LintReport.lines)."""
    event = memory.append(memory.writer.lint(report.summary(), report.lines()))
    report.recorded = event.seq
    return event
