"""Reading a page as of a moment: mindlog's version-table lookup against `git show REV:path`
on an equivalent git history (one commit per page write, made with git fast-import).

Runs on the log bench_replay.py builds (run that first, same -n). Usage:
python bench/bench_asof.py [-n 1000000] [--reads 200]
"""

import argparse
import random
import statistics
import subprocess
import time

from common import table, workdir

from eventstore.envelope import decode_body, unpack_body
from eventstore.instants import format_instant
from projections import render
from projections.memory import Memory


def build_git(memory: Memory, repo, limit: int) -> None:
    """A git repository whose commit k holds the wiki after the k-th page write."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    proc = subprocess.Popen(["git", "-C", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE)
    mark = 0
    out = proc.stdin
    for seq, ts, _kind, codec, body in memory.log.db.execute(
            "SELECT seq, ts, kind, codec, body FROM events WHERE kind IN ('page.ingest','page.update') "
            "ORDER BY seq LIMIT ?", (limit,)):
        page = decode_body(unpack_body(codec, body))
        data = render.page(page.frontmatter, page.text).encode()
        mark += 1
        message = f"seq {seq}".encode()
        out.write(b"commit refs/heads/main\n")
        out.write(f"mark :{mark}\ncommitter bench <b@x> {ts // 1000} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(message), message))
        if mark > 1:
            out.write(f"from :{mark - 1}\n".encode())
        out.write(f"M 100644 inline mind/{page.slug}.md\n".encode())
        out.write(b"data %d\n%s\n" % (len(data), data))
    out.close()
    proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    root = workdir("replay") / f"ws-{args.n}"
    memory = Memory.open(root)
    memory.refresh()
    head = memory.log.head()
    rng = random.Random(7)
    page_seqs = [row[0] for row in memory.log.db.execute(
        "SELECT seq FROM events WHERE kind IN ('page.ingest','page.update') ORDER BY seq")]

    ours = []
    for _ in range(args.reads):
        seq = rng.choice(page_seqs)
        at = memory.log.recorded_at(seq)
        slug = memory.log.get_by_seq(seq).body.slug
        start = time.perf_counter()
        text = memory.show(f"mind/{slug}.md", memory.seq_at(at_ms=at))
        ours.append(time.perf_counter() - start)
        assert text is not None

    repo = workdir("asof-git") / f"repo-{args.n}"
    if not (repo / ".git").exists():
        start = time.perf_counter()
        build_git(memory, repo, len(page_seqs))
        print(f"built a git history of {len(page_seqs):,} commits in {time.perf_counter() - start:.0f}s (not timed)")
    revs = subprocess.run(["git", "-C", str(repo), "rev-list", "--reverse", "main"], capture_output=True,
                          text=True, check=True).stdout.split()
    by_seq = dict(zip(page_seqs, revs))
    theirs = []
    for _ in range(args.reads):
        seq = rng.choice(page_seqs)
        slug = memory.log.get_by_seq(seq).body.slug
        start = time.perf_counter()
        subprocess.run(["git", "-C", str(repo), "show", f"{by_seq[seq]}:mind/{slug}.md"], capture_output=True,
                       check=True)
        theirs.append(time.perf_counter() - start)

    cli = []
    for _ in range(10):
        seq = rng.choice(page_seqs)
        slug = memory.log.get_by_seq(seq).body.slug
        start = time.perf_counter()
        subprocess.run(["mem", "-w", str(root), "show", f"mind/{slug}.md", "--at",
                        format_instant(memory.log.recorded_at(seq))], capture_output=True, check=True)
        cli.append(time.perf_counter() - start)

    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    table(f"page read as of a random moment, {head:,}-event log, {len(page_seqs):,} page versions (median ms)", [
        ("reader", "median ms", "vs git show"),
        ("mindlog Memory.show (time -> seq -> index lookup -> render)", f"{ms(ours):.3f}",
         f"{ms(theirs) / ms(ours):.1f}x faster"),
        ("git show REV:path (subprocess, REV given)", f"{ms(theirs):.3f}", "1.0x"),
        ("mem show --at (a whole CLI process)", f"{ms(cli):.1f}", f"{ms(theirs) / ms(cli):.2f}x"),
    ])
    print("target: as-of page read under 2 ms median")


if __name__ == "__main__":
    main()
