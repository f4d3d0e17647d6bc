"""`mem verify`: the log checks itself (digests, chain, gapless seqs), then is checked against what
lives outside it and says how far it must reach: the views' checkpoint and anchor (the seq and chain
value of the last event they folded) and the sync cursors. Deleting the last events of a log leaves
a chain that verifies on its own; only these witnesses can tell that something is missing."""

from eventstore.recorder import VerifyReport


def verify(memory, progress=None, cursors: dict[str, int] | None = None) -> VerifyReport:
    """`cursors` names seqs this log has acknowledged elsewhere (a push cursor: "pushed to origin")."""
    log = memory.log
    # The witnesses are read before the log: each only ever names seqs the log held already, so a writer
    # appending meanwhile cannot make one seem ahead of the head the log's check reads after them.
    witnesses = {"the views' checkpoint": memory.views.checkpoint(), **(cursors or {})}
    anchor = memory.views.anchor()
    report = log.verify(progress=progress)
    if not report.ok:
        return report
    head = report.head
    for what, seq in witnesses.items():
        if seq > head:
            return _truncated(report, f"{what} is seq {seq} but the log ends at seq {head}: "
                                      f"{seq - head} event(s) at its end are missing")
    if anchor is not None:
        seq, chain = anchor
        event = log.get_by_seq(seq) if seq else None
        if seq and (event is None or event.chain != chain):
            return _truncated(report, f"the views were built up to seq {seq} with chain {chain[:16]}..., which "
                                      "this log does not hold: it was truncated or rewritten")
    return report


def _truncated(report: VerifyReport, problem: str) -> VerifyReport:
    return VerifyReport(ok=False, checked=report.checked, head=report.head, first_bad_seq=report.head + 1,
                        problem=problem, redacted=report.redacted)
