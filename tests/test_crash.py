"""SIGKILL at random moments during a stream of appends: nothing committed is lost, nothing is torn."""

import json
import os
import random
import signal
import subprocess
import time

from conftest import log_rows, mem_command, run_mem


def stream(workspace, start: int) -> subprocess.Popen:
    """A shell loop of real `mem` commands, printing each one that returned."""
    mem = " ".join(f"'{part}'" for part in mem_command())
    script = (f"i={start}; while true; do {mem} -w '{workspace}' always add \"line $i\" >/dev/null "
              f"&& echo \"ok $i\"; i=$((i+1)); done")
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True)


def test_sigkill_during_appends_loses_nothing_committed(workspace):
    rng = random.Random(20261129)
    acknowledged: set[str] = set()
    next_line = 0
    for _round in range(12):
        proc = stream(workspace, next_line)
        time.sleep(rng.uniform(0.3, 1.5))
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged |= {f"line {line.split()[1]}" for line in out.decode().splitlines() if line.startswith("ok ")}
        next_line += 1000

        verify = run_mem("-w", workspace, "verify")
        assert verify.returncode == 0, verify.stdout
        events = run_mem("-w", workspace, "always", "list", "--json", check=True)
        lines = set(json.loads(events.stdout))
        assert acknowledged <= lines, f"lost: {acknowledged - lines}"
        assert json.loads(run_mem("-w", workspace, "status", "--json").stdout)["behind"] == 0

    assert len(acknowledged) > 10
    status = run_mem("-w", workspace, "status", "--json", check=True)
    report = json.loads(status.stdout)
    assert report["behind"] == 0 and report["clean"], report
    assert run_mem("-w", workspace, "replay", "--check").returncode == 0
    assert not [p for p in (workspace / "mind").iterdir() if "mem-tmp" in p.name]
    assert not [p for p in workspace.iterdir() if "mem-tmp" in p.name]
    seqs = [row[0] for row in log_rows(workspace)]
    assert seqs == list(range(1, len(seqs) + 1))
