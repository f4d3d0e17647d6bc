"""schemathesis, driven by the hub's own OpenAPI description, finds no 5xx on a real hub."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sync.storage import open_storage

from hub_storage_conformance import CONTRACT
from hubserver import HubServer


def hooked() -> dict[str, str]:
    """The environment for schemathesis with tests/schemathesis_hooks.py loaded."""
    path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "SCHEMATHESIS_HOOKS": "schemathesis_hooks"}


def test_schemathesis_finds_no_server_errors(tmp_path):
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.close()
    command = shutil.which("schemathesis") or shutil.which("st")
    assert command, "schemathesis is a test dependency: pip install -e '.[test]'"
    with HubServer(db, max_wait=0.2) as hub:  # long-polls end quickly: the fuzzer asks for many
        result = subprocess.run([command, "run", f"{hub.url}/openapi.json", "--checks", "not_a_server_error",
                                 "--header", f"Authorization: Bearer {token}", "--max-examples", "40",
                                 "--seed", "20261129", "--request-timeout", "30"],
                                capture_output=True, text=True, timeout=600, cwd=tmp_path, env=hooked())
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "No issues found" in output and "generated" in output, output[-3000:]
    print(output[-600:], file=sys.stderr)
