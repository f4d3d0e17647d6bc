"""The pure renderers and parsers, in-process: page files, mind.md and its `## Always` parser, the log,
and frontmatter emitted and parsed back."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventstore import frontmatter
from eventstore.errors import InvalidInput
from projections import render


def test_a_page_file_is_its_canonical_frontmatter_then_its_text():
    fm = {"zeta": 1, "sources": ["adf-audit://seq/3"], "type": "procedure", "description": "how we deploy"}
    assert render.page(fm, "# Deploy\n\nStaging first.") == (
        "---\ntype: procedure\ndescription: how we deploy\nsources:\n  - adf-audit://seq/3\nzeta: 1\n---\n"
        "# Deploy\n\nStaging first.\n")
    assert render.page({"type": "x"}, "") == "---\ntype: x\n---\n"


@pytest.mark.parametrize("text, fm, title", [
    ("# Deploy procedure\n\nbody", {}, "Deploy procedure"),
    ("intro\n\n#   Spaced   title  ##\n", {}, "Spaced title"),
    ("no heading", {"title": "From frontmatter"}, "From frontmatter"),
    ("no heading", {}, "the-slug"),
    ("# C# tips\n", {}, "C# tips"),
])
def test_title_of(text, fm, title):
    assert render.title_of("the-slug", fm, text) == title


_ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))


@given(_ANY_TEXT)
def test_a_title_or_hook_taken_as_one_line_already_is_what_collapsing_its_whitespace_gives(value):
    """title_of and one_line answer a value that is one line already without splitting it (a replay's hot
    path); whatever they answer is what the plain rules say."""
    if "#" not in value and "\r" not in value and "\n" not in value:
        assert render.title_of("s", {}, f"# {value}\nbody") == " ".join(value.split())
    collapsed = " ".join(value.split())
    assert render.one_line(value) in (value, collapsed)
    if any(c in value for c in frontmatter.LINE_BREAKS) or "  " in value or value != value.strip():
        assert render.one_line(value) == collapsed


def test_catalog_lines_escape_brackets_and_put_the_flag_first():
    assert render.catalog_line("a", "T [draft]", "the hook") == "- [T \\[draft\\]](adf-file://mind/a.md) — the hook\n"
    assert render.catalog_line("a", "T", "", "deprecated") == "- [T](adf-file://mind/a.md) — (deprecated)\n"
    assert render.catalog_line("a", "T", "h", "stale since 2026-01-01") == \
        "- [T](adf-file://mind/a.md) — (stale since 2026-01-01) h\n"
    assert render.catalog_line("a", "T", "") == "- [T](adf-file://mind/a.md)\n"
    assert render.hook_of({"description": "  two\n lines "}) == "two lines" and render.hook_of({}) == ""


def test_mind_md_layout():
    assert render.mind([], []) == "# Mind\n\n## Always\n\n## Pages\n\n"
    assert render.mind(["Ack before prod."], [("deploy", "Deploy", "staging first")]) == (
        "# Mind\n\n## Always\n\n- Ack before prod.\n\n## Pages\n\n"
        "- [Deploy](adf-file://mind/deploy.md) — staging first\n")


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).map(render.one_line)
                .filter(bool), max_size=6))
def test_the_always_parser_reads_back_what_mind_renders(lines):
    assert render.always_lines(render.mind(lines, [("p", "P", "- not an Always line")])) == lines


def test_the_always_parser_reads_only_its_section():
    text = "# Mind\n\n## Pages\n\n- not this\n\n## Always\n\n-  one  \nprose is ignored\n- two\n## Other\n- not this\n"
    assert render.always_lines(text) == ["one", "two"]
    assert render.always_lines("# Mind\n\n## Always\n") == []
    assert render.always_lines("# Mind\n\n- a loose line\n") is None
    assert render.always_lines("## Always here\n- x\n") is None  # the heading is exactly `## Always`


def test_log_entries_and_the_streamed_log():
    assert render.log_entry(86_400_000 * 365, "update", "Deploy\nprocedure", "why [S3]") == \
        "## [1971-01-01] update | Deploy procedure\n\nwhy [S3]\n"
    assert render.log_entry(0, "hold", "T", "") == "## [1970-01-01] hold | T\n"
    blocks = [[("## [b]\n",), ("## [a]\n",)], [("## [0]\n",)]]
    assert "".join(render.log(iter(blocks))) == "# Log\n\n## [b]\n\n## [a]\n\n## [0]\n"


# --- frontmatter ---------------------------------------------------------------------------------

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3),
    max_leaves=8)


@given(st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12), _values,
                       max_size=5))
@example({"A\n": None})  # a key ending in a newline was written raw (`$` matches before it): a file YAML refuses
@settings(deadline=None)  # yaml parsing of large generated mappings: a deadline fails it under load, not a bug
def test_emitted_frontmatter_parses_back_to_the_same_mapping(extra):
    fm = {"type": "note", **{k: v for k, v in extra.items() if k not in frontmatter.KNOWN_KEYS}}
    yaml, body = frontmatter.split(frontmatter.emit(fm) + "# Body\n")
    assert body == "# Body\n"
    assert frontmatter.parse(yaml) == fm


@pytest.mark.parametrize("value", ["yes", "null", "1e3", "0x1f", "a: b", "-dash", " padded", "x\u2028y", "'q'",
                                   "#comment", "[list]", "2026-11-30", "del\x7f", "c1\x9f", "nonchar\ufffe"])
def test_scalars_that_yaml_would_read_otherwise_are_quoted(value):
    """A DEL or C1 control written raw made a page file mindlog could not read back (YAML refuses them)."""
    yaml, _ = frontmatter.split(frontmatter.emit({"type": "x", "custom": value, f"key {value}": 1}))
    assert frontmatter.parse(yaml) == {"type": "x", "custom": value, f"key {value}": 1}
    assert not any(c in yaml for c in "\u2028\x7f\x9f\ufffe")


@pytest.mark.parametrize("yaml, says", [
    ("description: x\n", "no `type`"),
    ("type: [a]\n", "non-empty string"),
    ("type: x\nstatus: {a: 1}\n", "single value"),
    ("type: x\nsources: one\n", "list of strings"),
    ("- a\n", "mapping"),
    ("type: x\ntitle: a: b\n", "not valid YAML"),
])
def test_frontmatter_refusals(yaml, says):
    with pytest.raises(InvalidInput, match=says):
        frontmatter.parse(yaml)


def test_dates_in_frontmatter_are_kept_as_iso_text():
    assert frontmatter.parse("type: x\nstale_after: 2026-12-31\n")["stale_after"] == "2026-12-31"


_line = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20) | st.text("ab #\n\t\u2028", max_size=12)


_value = st.none() | _line | st.integers(-2 ** 63, 2 ** 63 - 1)


@settings(deadline=None)  # each example opens a views database: seconds under load on a shared machine
@given(first=_line, rest=_line, description=_value, note=_line, ts=st.integers(0, 2 ** 41),
       more=st.dictionaries(st.sampled_from(["type", "status", "stale_after", "governance", "title", "tags"]),
                            _value | st.sampled_from(["hold", "2026-01-02", "draft"]), max_size=3),
       quiet=st.booleans(), second=_line)
@example(first="Deploy", rest="\nbody", description="how", note="", ts=0, more={}, quiet=False, second="Deploy")
def test_the_folds_written_out_page_path_agrees_with_render(tmp_path_factory, first, rest, description, note, ts,
                                                             more, quiet, second):
    """WikiFold.fold_batch writes apply's steps for a page version, title_of, hook_of and log_entry out for a
    replay's hot path, on the lean bodies (fold.LEAN_BODIES): what it folds must stay what apply folds from the
    whole bodies and what those functions say, whatever the page (an ingest, then an update in the same batch)."""
    from eventstore.envelope import CODEC_RAW, encode_body
    from eventstore.kinds import PageIngest, PageUpdate
    from projections import fold
    from projections.views import Views

    fm = {"type": "note", **more} if description is None else {"type": "note", **more, "description": description}
    bodies = [PageIngest(slug="p", frontmatter=fm, text=f"# {first}\n{rest}", note=note, quiet=quiet),
              PageUpdate(slug="p", frontmatter=fm, text=f"# {second}\n{rest}", note=note, parents=["a", "b"])]
    raws = [encode_body(body) for body in bodies]
    rows = [(seq, bytes([seq]) * 16, ts + seq, None, CODEC_RAW, raw, None) for seq, raw in enumerate(raws, 1)]
    views = Views(tmp_path_factory.mktemp("views") / "views.db", fast=True)
    try:
        written_out, whole = fold.WikiFold(views), fold.WikiFold(views)
        assert not written_out.fold_batch(rows, raws, fold._bodies(rows, raws))
        for (seq, id, at, _layer, _codec, raw, _agent), body in zip(rows, bodies):
            whole.apply(seq, id, at, body, raw, True)
        assert (written_out.versions, written_out.entries, written_out.replaced, written_out._pages,
                written_out.touched_pages) == (whole.versions, whole.entries, whole.replaced, whole._pages,
                                               whole.touched_pages)
        title, hook = render.title_of("p", fm, bodies[1].text), render.hook_of(fm)
        assert written_out.versions[-1][6:8] == [title, hook]
        assert written_out.entries[-1][2] == render.log_entry(ts + 2, "update", title, note, title_is_one_line=True)
    finally:
        views.close()
