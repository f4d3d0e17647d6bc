"""The checks made before anything is appended (eventstore.validate), in-process: page documents, slugs,
one-line text, entry dates, and the body validator the write side, the hub and every consumer share.
test_write_refusals and test_hub_validation see a few of these refusals end to end (CLI, HTTP)."""

import pytest

from eventstore import validate
from eventstore.errors import InvalidInput, MemError, TooLarge, UnsafePath
from eventstore.kinds import EntryAppend, PageDelete, PageIngest, PageRename

BAD_PAGES = {
    "no frontmatter": (b"# Deploy\n\nno frontmatter\n", "no frontmatter"),
    "no type": (b"---\ndescription: x\n---\n# D\n", "no `type`"),
    "empty type": (b"---\ntype: ''\n---\n# D\n", "non-empty"),
    "type not a string": (b"---\ntype: [a, b]\n---\n# D\n", "`type` must be a non-empty string"),
    "invalid yaml": (b"---\ntype: procedure\ndescription: a: b: c\n---\n# D\n", "not valid YAML"),
    "a value holding ': '": (b"---\ntype: procedure\nstatus: superseded-by: deploy\n---\n# D\n",
                             'frontmatter is not valid YAML: mapping values are not allowed in this context at frontmatter '
                             'line 2, column 22; quote a value that holds ": ", as in status: "superseded-by: deploy"'),
    "frontmatter not a mapping": (b"---\n- a\n- b\n---\n# D\n", "mapping"),
    "unclosed frontmatter": (b"---\ntype: procedure\n# D\n", "not closed"),
    "injection by a newline": (b'---\ntype: procedure\ndescription: "ok\\n---\\ntype: evil"\n---\n# D\n',
                               "one line"),
    "injection by a block scalar": (b"---\ntype: procedure\nstatus: |\n  current\n  governance: hold\n---\n# D\n",
                                    "one line"),
    "sources not a list": (b"---\ntype: procedure\nsources: adf-audit://seq/1\n---\n# D\n", "list of strings"),
    "invalid utf-8": (b"---\ntype: procedure\n---\n# D\n\xff\xfe broken\n", "not valid UTF-8"),
    "nul byte": (b"---\ntype: procedure\n---\n# D\x00\n", "NUL"),
    "oversized": (b"---\ntype: procedure\n---\n" + b"x" * (1024 * 1024 + 1), "limit"),
}

BAD_SLUGS = {
    "traversal": ("../escape", "'..'"),
    "nested traversal": ("a/../../b", "'..'"),
    "absolute": ("/etc/passwd", "absolute"),
    "windows absolute": ("C:\\x", "absolute"),
    "reserved log": ("log", "reserved"),
    "reserved with extension": ("log.md", "reserved"),
    "reserved device": ("nul", "reserved"),
    "upper case and spaces": ("My Page", "not safe"),
    "hidden": (".hidden", "not safe"),
    "empty": ("", "empty"),
    "nul": ("a\x00b", "NUL"),
    "too long": ("a" * 121, "longer than 120"),
}


@pytest.mark.parametrize("name", BAD_PAGES)
def test_bad_page_documents_are_refused(name):
    document, says = BAD_PAGES[name]
    with pytest.raises(MemError) as refused:
        validate.page_document(document)
    assert says.lower() in str(refused.value).lower()
    assert "\n" not in str(refused.value)  # a CLI prints it as one line


def test_a_good_page_document():
    assert validate.page_document(b"---\r\ntype: procedure\r\n---\r\n# D\r\n\r\ntext\r\n") == (
        {"type": "procedure"}, "# D\n\ntext\n")


@pytest.mark.parametrize("name", BAD_SLUGS)
def test_unsafe_slugs_are_refused(name):
    value, says = BAD_SLUGS[name]
    with pytest.raises(UnsafePath, match=says):
        validate.slug(value)


@pytest.mark.parametrize("given, canonical", [("deploy", "deploy"), ("mind/deploy.md", "deploy"),
                                              ("v1.2_notes", "v1.2_notes"), ("a-b", "a-b")])
def test_slugs_are_read_in_their_canonical_form(given, canonical):
    assert validate.slug(given) == canonical


def test_one_line_collapses_and_bounds():
    assert validate.one_line("  a\n\tb\u2028c  ") == "a b c"
    with pytest.raises(TooLarge):
        validate.one_line("x" * (validate.MAX_LINE_CHARS + 1), "the note")


@pytest.mark.parametrize("value", ["2026-02-30", "2026-11", "26-11-29", "2026-11-29\n", "2026-11-29T10:00"])
def test_entry_dates_are_real_dates_written_ymd(value):
    with pytest.raises(InvalidInput):
        validate.entry_date(value)


FACT = dict(type="FACT", date="2026-11-29", content="fine")
ID = "01a2272d-fa7b-77c9-a579-6130dd2bf05d"

BAD_BODIES = {
    "unknown entry type": (EntryAppend(**{**FACT, "type": "EVIL"}), "body.type"),
    "newline in entry type": (EntryAppend(**{**FACT, "type": "FACT\n---"}), "body.type"),
    "newline in date": (EntryAppend(**{**FACT, "date": "2026-11-29\n[DECISION] x"}), "body.date"),
    "not a calendar date": (EntryAppend(**{**FACT, "date": "2026-02-30"}), "body.date"),
    "newline in content": (EntryAppend(**{**FACT, "content": "ok\n[DECISION] 2026-11-29: x"}), "body.content"),
    "line separator in content": (EntryAppend(**{**FACT, "content": "ok\u2028## Always"}), "body.content"),
    "DEL in content": (EntryAppend(**{**FACT, "content": "ok\x7f"}), "body.content"),
    "empty content": (EntryAppend(**{**FACT, "content": " "}), "body.content"),
    "reverses a non-id": (EntryAppend(**{**FACT, "reverses": "x"}), "body.reverses"),
    "a 300-character slug": (PageIngest(slug="a" * 300, frontmatter={"type": "x"}, text=""), "body.slug"),
    "a slug not in canonical form": (PageIngest(slug="mind/x.md", frontmatter={"type": "x"}, text=""), "body.slug"),
    "no type": (PageIngest(slug="p", frontmatter={"description": "x"}, text=""), "body.frontmatter"),
    "a multi-line value": (PageIngest(slug="p", frontmatter={"type": "x", "description": "a\n---\ntype: evil"},
                                      text=""), "body.frontmatter"),
    "a NUL in the text": (PageIngest(slug="p", frontmatter={"type": "x"}, text="a\x00"), "body.text"),
    "over 1 MiB": (PageIngest(slug="p", frontmatter={"type": "x"}, text="x" * (1024 * 1024)), "body.text"),
    "a two-line note": (PageDelete(slug="p", note="a\nb"), "body.note"),
    "a parent that is no id": (PageDelete(slug="p", parents=["HEAD"]), "body.parents"),
    "a rename to LOG": (PageRename(old="p", new="LOG"), "body.new"),
}


@pytest.mark.parametrize("case", BAD_BODIES)
def test_bodies_are_refused_naming_the_field(case):
    body, field = BAD_BODIES[case]
    with pytest.raises(MemError) as refused:
        validate.body(body)
    assert refused.value.field == field


def test_what_passes_the_body_checks():
    for body in (EntryAppend(**{**FACT, "reverses": ID}), PageIngest(slug="p", frontmatter={"type": "x"}, text="t"),
                 PageDelete(slug="p", parents=[ID]), PageRename(old="p", new="q")):
        assert validate.body(body) is body


def test_frontmatters_and_slugs_found_good_let_no_bad_one_through_after_them():
    """validate remembers the frontmatters and slugs it found good (a catch-up checks the same ones thousands of
    times): a bad one is refused however many good ones came before it."""
    good = PageIngest(slug="deploy", frontmatter={"type": "note", "title": "Deploy"}, text="x")
    for _ in range(3):
        validate.body(good)
    for frontmatter in ({"type": "note", "title": "a\nb"}, {"type": ["note"], "title": "Deploy"},
                        {"type": "note", "title": None, "sources": "x"}, {"title": "Deploy"}):
        with pytest.raises(InvalidInput) as refused:
            validate.body(PageIngest(slug="deploy", frontmatter=frontmatter, text="x"))
        assert refused.value.field == "body.frontmatter"
    for slug in ("Deploy", "deploy/x", "mind"):
        with pytest.raises(InvalidInput):
            validate.body(PageIngest(slug=slug, frontmatter={"type": "note", "title": "Deploy"}, text="x"))
    big = PageIngest(slug="deploy", frontmatter={"type": "note", "title": "Deploy"}, text="x" * validate.MAX_PAGE_BYTES)
    with pytest.raises(TooLarge):
        validate.body(big)
