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
