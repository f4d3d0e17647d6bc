"""Two hub processes (`mem serve`) on one SQLite file: a commit made through one reaches the long-polls
waiting on the other within milliseconds (the storage's watcher polls `PRAGMA data_version`), and
pushers on both with a puller on one see every event exactly once, in gapless position order. And the
watcher of a storage closed ends, however many `watch` calls started one."""

import statistics
import threading
import time

from sync.client import HubClient
from sync.storage_sqlite import SQLiteHubStorage

from hubserver import mem_serve
from two_hubs import fact, hub_with, pushers_on_both_and_a_puller


def test_a_push_to_one_hub_process_wakes_a_long_poll_on_the_other_within_milliseconds(tmp_path):
    db = str(tmp_path / "hub.db")
    pusher_token, reader_token = hub_with(SQLiteHubStorage(db), ["pusher", "reader"])
    with mem_serve(db) as first, mem_serve(db) as second:
        received: dict[str, float] = {}
        stop, errors = threading.Event(), []

        def reader():
            client = HubClient(second, reader_token)
            try:
                cursor = client.pull("", 100).cursor
                while not stop.is_set():
                    page = client.pull(cursor, 100, wait=2)
                    for event in page.events:
                        received[event.id] = time.monotonic()
                    cursor = page.cursor
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            finally:
                client.close()

        reading = threading.Thread(target=reader)
        reading.start()
        pusher = HubClient(first, pusher_token)
        delays = []
        try:
            for n in range(7):
                time.sleep(0.3)  # the reader is back in its long-poll on the other process
                event = fact("pusher", f"fact {n}")
                pusher.push([event])
                pushed = time.monotonic()
                deadline = pushed + 5
                while event.id not in received and time.monotonic() < deadline:
                    time.sleep(0.001)
                assert event.id in received, f"event {n} never reached the other process's long-poll"
                delays.append(received[event.id] - pushed)
        finally:
            pusher.close()
            stop.set()
            reading.join(timeout=10)
        assert not errors, errors
        # The watcher used to read the head every 0.25 s: a median near 125 ms. Now a few ms, plus a
        # loaded machine's scheduling.
        assert statistics.median(delays) < 0.08, delays


def test_pushers_on_two_hub_processes_and_a_puller_see_every_event_once_in_order(tmp_path):
    db = str(tmp_path / "hub.db")
    *tokens, reader_token = hub_with(SQLiteHubStorage(db), [f"pusher{i}" for i in range(4)] + ["reader"])
    with mem_serve(db) as first, mem_serve(db) as second:
        pushers_on_both_and_a_puller([first, second], tokens, reader_token, rounds=20)


def test_closing_a_storage_watched_twice_ends_both_watchers(tmp_path):
    """Two hub apps on one storage (as tests make them) each start a watcher; the storage's `close`
    stopped only the last, and closed the connection the other was still polling (every 2 ms): a
    segfault of the whole process."""
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.watch(lambda head, layers: None)
    storage.watch(lambda head, layers: None)
    time.sleep(0.05)
    watchers = [t for t in threading.enumerate() if t.name == "hub-watch" and t.is_alive()]
    storage.close()
    for watcher in watchers:
        watcher.join(timeout=5)
    assert not any(watcher.is_alive() for watcher in watchers)
