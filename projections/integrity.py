"""`mem verify`: the log checks itself (digests, chain, gapless seqs), then is checked against what
lives outside it and says how far it must reach: the views' checkpoint and anchor (the seq and chain
value of the last event they folded) and the sync cursors. Deleting the last events of a log leaves
a chain that verifies on its own; only these witnesses can tell that something is missing."""

from eventstore.errors import MemError, storage_exceptions
from eventstore.recorder import VerifyReport


def verify(memory, progress=None, cursors: dict[str, int] | None = None) -> VerifyReport:
    """`cursors` names seqs this log has acknowledged elsewhere (a push cursor: "pushed to origin")."""
    log = memory.log
    # The witnesses are read before the log: each only ever names seqs the log held already, so a writer
    # appending meanwhile cannot make one seem ahead of the head the log's check reads after them.
    witnesses = {"the views' checkpoint": memory.views.checkpoint(), **(cursors or {})}
    anchor = memory.views.anchor()
    report = log.verify(progress=progress)
    head, missing = report.head, []
    for what, seq in witnesses.items():
        if seq > head:
            missing.append(f"{what} is seq {seq} but the log ends at seq {head}: {seq - head} event(s) at its end are "
                           "missing")
    if anchor is not None and not missing:
        seq, chain = anchor
        try:
            event, readable = (log.get_by_seq(seq) if seq else None), True
        except (MemError, *storage_exceptions()):  # the row is damaged: the log's own check named it
            event, readable = None, False
        if seq and readable and (event is None or event.chain != chain):
            missing.append(f"the views were built up to seq {seq} with chain {chain[:16]}..., which this log does not "
                           "hold: it was truncated or rewritten")
    if not missing:
        return report
    if report.ok:  # a log whose last events were deleted verifies on its own: only the witnesses tell
        return _truncated(report, missing[0])
    report.later.append((head + 1, missing[0]))  # and after a problem inside it, a tail deleted too
    return report


def _truncated(report: VerifyReport, problem: str) -> VerifyReport:
    return VerifyReport(ok=False, checked=report.checked, head=report.head, first_bad_seq=report.head + 1,
                        problem=problem, redacted=report.redacted)
