"""Two hub processes (`mem serve`) on one PostgreSQL database: concurrent pushers on both, and a
puller that must see every event exactly once, in gapless position order."""

from sync.storage_postgres import PostgresHubStorage

from hubserver import mem_serve
from two_hubs import hub_with, pushers_on_both_and_a_puller


def test_two_hub_processes_one_database(pg_url):
    *tokens, reader = hub_with(PostgresHubStorage(pg_url), [f"pusher{i}" for i in range(4)] + ["reader"])
    with mem_serve(pg_url) as first, mem_serve(pg_url) as second:
        pushers_on_both_and_a_puller([first, second], tokens, reader, rounds=30)
