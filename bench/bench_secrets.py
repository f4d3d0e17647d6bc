"""The secret scanner's cost per page write (target: under 2 ms for a 4 KB page).

Side by side: mindlog's in-process scan of the page's fields, detect-secrets scanning the same text
as a file the way its CLI does (`SecretsCollection.scan_file`, default plugins and filters), and
the rest of a write's CPU work (encoding the body and computing the digest) for scale.
Usage: python bench/bench_secrets.py [--reads 300]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import table

from eventstore import secrets, validate
from eventstore.envelope import new_event
from eventstore.kinds import PageIngest

README = Path(__file__).resolve().parent.parent / "README.md"

PROSE = """---
type: procedure
description: staging first, prod needs owner ack and a green canary
sources:
  - adf-audit://seq/412
  - https://github.com/example/deploy-tools/blob/main/docs/canary.md
---
# Deploy procedure

Staging first, always. Prod deploys need an explicit owner ack ([S412]). The canary runs for
fifteen minutes on 5% of traffic; the rollback of 09-02 (event 01a2270a-c5b3-7eca-9806-1025c3bb9d81,
digest 26a138bdeab1248df078874b3d6aa184aaeee3269fccc034618ebb545659cd32) showed why.

- Build from the tagged commit 9fceb02d0ae598e95dc970b74767f19372d61af8, never from a branch.
- The API key lives in the vault; the password policy is to rotate monthly.
- Dashboards: https://grafana.example.com/d/deploys?orgId=1&from=now-6h and the runbook at
  https://wiki.example.com/ops/runbooks/deploy-procedure-for-the-new-staging-cluster.
"""


def four_kb(text: str) -> str:
    return (text * (4096 // len(text) + 1))[:4096]


def page_of(document: str):
    frontmatter, text = validate.page_document(document.encode())
    return PageIngest(slug="deploy", frontmatter=frontmatter, text=text, note="Learned from the 08-12 incident.")


def per_call_ms(fn, reads: int) -> float:
    fn()
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def detect_secrets_file_ms(text: str, reads: int) -> float:
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as handle:
        handle.write(text)
    with default_settings():
        return per_call_ms(lambda: SecretsCollection().scan_file(handle.name), max(reads // 10, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    pages = {
        "4 KB page of prose, ids, URLs": "---\ntype: note\n---\n" + four_kb(PROSE.split("---\n", 2)[2]),
        "4 KB of this README (dense)": "---\ntype: note\n---\n" + four_kb(README.read_text()),
        "4 KB page holding an AWS key": "---\ntype: note\n---\nkey AKIA4HXQ7ZT2LMNB3K5P\n" + four_kb(PROSE)[40:],
    }
    rows = [("page", "mindlog scan ms", "detect-secrets scan_file ms", "ratio", "encode+digest ms", "findings")]
    for name, document in pages.items():
        body = page_of(document)
        ours = per_call_ms(lambda: secrets.scan_body(body), args.reads)
        theirs = detect_secrets_file_ms(document, args.reads)
        rest = per_call_ms(lambda: new_event(body, agent="bench", layer="mind"), args.reads)
        found = "; ".join(str(f) for f in secrets.scan_body(body)) or "none"
        rows.append((name, f"{ours:.3f}", f"{theirs:.3f}", f"{theirs / ours:.1f}x", f"{rest:.3f}", found))
    table("secret scan per page write (median)", rows)


if __name__ == "__main__":
    main()
