"""Both hub storage backends pass the same conformance suite."""

import pytest

from sync.storage_postgres import PostgresHubStorage
from sync.storage_sqlite import SQLiteHubStorage

from hub_storage_conformance import HubStorageConformance


class TestSQLiteHubStorage(HubStorageConformance):
    @pytest.fixture
    def hub(self, tmp_path):
        storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
        yield storage
        storage.close()

    @pytest.fixture
    def second(self, hub):
        storage = SQLiteHubStorage(hub.path)
        yield storage
        storage.close()


class TestPostgresHubStorage(HubStorageConformance):
    @pytest.fixture
    def hub(self, pg_url):
        storage = PostgresHubStorage(pg_url)
        yield storage
        storage.close()

    @pytest.fixture
    def second(self, hub):
        storage = PostgresHubStorage(hub.url)
        yield storage
        storage.close()


def test_a_hub_made_before_page_versions_were_kept_fills_them_once(tmp_path, pg_url):
    """hub_page_versions (the hold check's heads) is filled from the stored events when a hub opens
    without it, on either backend."""
    import psycopg
    import sqlite3

    from hub_storage_conformance import version

    for opened, drop in ((lambda: SQLiteHubStorage(str(tmp_path / "hub.db")),
                          lambda: sqlite3.connect(tmp_path / "hub.db", isolation_level=None)),
                         (lambda: PostgresHubStorage(pg_url), lambda: psycopg.connect(pg_url, autocommit=True))):
        hub = opened()
        held = version(held=True)
        update, other = version(parents=[held.id]), version(held=True)
        hub.push([held, update, other])
        expected = sorted(hub.page_heads("drafts", "p"))
        assert expected == sorted([(update.id, False), (other.id, True)])
        hub.close()
        conn = drop()
        conn.execute("DROP TABLE hub_page_versions")
        conn.close()
        hub = opened()
        assert sorted(hub.page_heads("drafts", "p")) == expected
        hub.close()
