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
