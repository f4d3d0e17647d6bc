"""seq stays gapless and commit-ordered with several processes appending at once."""

import multiprocessing as mp

from eventstore.envelope import new_event
from eventstore.kinds import AlwaysAdd
from eventstore.sqlite import SQLiteLog


def appender(path, worker, rounds, out):
    log = SQLiteLog(path)
    returned = []
    for i in range(rounds):
        batch = [new_event(AlwaysAdd(line=f"w{worker} r{i} e{j}"), agent=f"w{worker}", layer="mind")
                 for j in range(1 + i % 3)]
        seqs = log.append(batch)
        returned.append((seqs, [e.id for e in batch]))
    log.close()
    out.put((worker, returned))


def test_four_processes_append_gaplessly(tmp_path):
    path = str(tmp_path / "log.db")
    SQLiteLog(path).close()
    out = mp.get_context("spawn").Queue()
    workers = [mp.get_context("spawn").Process(target=appender, args=(path, w, 40, out)) for w in range(4)]
    for p in workers:
        p.start()
    results = [out.get(timeout=120) for _ in workers]
    for p in workers:
        p.join(timeout=60)
        assert p.exitcode == 0
    with SQLiteLog(path) as log:
        events = list(log.read())
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        by_id = {e.id: e.seq for e in events}
        total = 0
        for _worker, returned in results:
            for seqs, ids in returned:
                total += len(ids)
                assert [by_id[i] for i in ids] == seqs
                # a batch is contiguous: nothing from another process landed inside it
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert total == len(events)
        assert log.verify().ok
        times = [e.recorded_at for e in events]
        assert times == sorted(times)


def test_threads_read_and_append_large_bodies_side_by_side(tmp_path):
    """Regression: one zstd decompressor served every thread, and zstandard's objects may not be used by two at
    once: `mem ui` and the hub's pages, reading large pages from a thread pool, failed a few requests in a hundred
    with 'Destination buffer is too small' (a 500). Bodies over the compression threshold, read and written by
    eight threads at once, each come back as they went in."""
    import os
    import threading

    from eventstore.kinds import PageIngest

    def text(i: int) -> str:
        return os.urandom(48).hex() * (500 + 700 * i)

    log = SQLiteLog(str(tmp_path / "log.db"))
    texts = [text(i) for i in range(8)]
    seqs = log.append([new_event(PageIngest(slug=f"p{i}", frontmatter={"type": "note"}, text=t), agent="a",
                                 layer="mind") for i, t in enumerate(texts)])
    failures = []

    def reader(worker: int) -> None:
        try:
            for n in range(60):
                k = (worker + n) % 8
                assert log.get_by_seq(seqs[k]).body.text == texts[k]
                if n % 20 == 0:
                    event = new_event(PageIngest(slug=f"w{worker}-{n}", frontmatter={"type": "note"}, text=texts[k]),
                                      agent="a", layer="mind")
                    assert log.get_by_seq(log.append([event])[0]).body.text == texts[k]
        except Exception as exc:  # noqa: BLE001 - gathered, then asserted in the test's thread
            failures.append(repr(exc))

    threads = [threading.Thread(target=reader, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    log.close()
    assert failures == []
