"""ADF's audit-read recipe ("Resolving a Citation" in ADF's guide), ported line for line from its
JavaScript to Python, run against a plain .adf file with nothing of mindlog's: the live loop row
with that seq, else every loop audit row whose start_seq..end_seq covers it (newest range first),
its brotli blob searched for the entry, else missing."""

import base64
import json
import re
import sqlite3

import brotli


def audit_read(adf_path, seq: int, loop: str | None = None) -> dict:
    db = sqlite3.connect(f"file:{adf_path}?mode=ro", uri=True)
    try:
        live = db.execute("SELECT seq, loop, role, content_json, created_at FROM adf_loop WHERE seq = ?",
                          [seq]).fetchall()
        if live:
            return {"source": "live", "loop": live[0][1], "entry": live[0]}
        if loop:
            candidates = db.execute("SELECT id, source, data FROM adf_audit WHERE source = ? AND start_seq <= ? "
                                    "AND end_seq >= ? ORDER BY start_seq DESC", [f"loop:{loop}", seq, seq])
        else:
            candidates = db.execute("SELECT id, source, data FROM adf_audit WHERE (source = 'loop' OR source LIKE "
                                    "'loop:%') AND start_seq <= ? AND end_seq >= ? ORDER BY start_seq DESC",
                                    [seq, seq])
        for row_id, source, data in candidates.fetchall():
            blob = data if isinstance(data, bytes) else base64.b64decode(str(data).removeprefix("base64:"))
            entries = json.loads(brotli.decompress(blob).decode())
            hit = next((e for e in entries if e["seq"] == seq), None)
            if hit:
                return {"source": "audit", "audit_id": row_id, "loop": re.sub(r"^loop:?", "", source) or "main",
                        "entry": hit}
        return {"source": "missing"}
    finally:
        db.close()
