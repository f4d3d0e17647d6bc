"""`mem lint --citations`: every citation in every page must resolve."""

import msgspec

from .audit import cite, citations_in
from .views import Views, page_path


class Finding(msgspec.Struct):
    page: str
    citation: str
    problem: str


def check_citations(views: Views, log, as_of: int | None = None) -> list[Finding]:
    findings = []
    for slug, _title, _hook in views.catalog(as_of):
        path = page_path(slug)
        text = views.file_text(path, as_of) or ""
        for citation in dict.fromkeys(citations_in(text)):
            result = cite(views, log, citation, as_of)
            if not result.resolved:
                what = "resolves to nothing (missing from the live loop, the audit and the log)" \
                    if result.kind == "seq" else "names a file that does not exist"
                findings.append(Finding(page=path, citation=citation, problem=what))
    return findings
