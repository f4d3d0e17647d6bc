"""The conformance suite every event-log backend must pass (subclass it with a `recorder` fixture)."""

import threading

import pytest

import msgspec

from eventstore.envelope import Event, check_event, decode_body, new_event, unpack_body
from eventstore.errors import DigestMismatch, IdConflict, InvalidInput
from eventstore.kinds import AlwaysAdd, ImportGap, PageIngest, Redacted, Redaction
from eventstore.recorder import id_text


def ev(i: int, layer: str = "mind", ts: int | None = None):
    return new_event(AlwaysAdd(line=f"line {i}"), agent="alice", layer=layer, ts=ts)


class RecorderConformance:
    def test_a_reading_thread_sees_only_committed_events(self, recorder):
        """One recorder shared by threads: while one thread's append is open (its rows in, a redaction's rewrite
        done, the transaction not committed), another thread reads the log as last committed, and the rows once
        the append commits. A shared connection showed them the rows before the commit, which could still be
        rolled back. The append is held open by its `state` function (a pull's runs inside its transaction)."""
        target, other = ev(0), ev(1)
        recorder.append([target, other])
        inside, go_on = threading.Event(), threading.Event()

        def rows(seqs):
            inside.set()
            assert go_on.wait(60)
            return {"cursor": "after"}

        batch = [ev(2), new_event(Redaction(target_ids=[target.id], reason="r"), agent="alice", layer="mind"),
                 ev(3)]
        writer = threading.Thread(target=recorder.append, args=(batch,), kwargs={"state": rows})
        writer.start()
        try:
            assert inside.wait(60)
            seen = (recorder.head(), [e.id for e in recorder.read()], recorder.get(batch[0].id),
                    recorder.get_by_seq(3), recorder.get(target.id).body, recorder.state("cursor"),
                    [row[0] for row in recorder.fold_rows(0, 10)], recorder.seq_after(2, 1), recorder.recorded_at(3),
                    recorder.verify().checked, [row[0] for row in recorder.activity_rows(0, 10)])
        finally:
            go_on.set()
            writer.join(60)
        assert seen == (2, [target.id, other.id], None, None, target.body, None, [1, 2], None, None, 2, [1, 2]), seen
        assert recorder.head() == 5 and recorder.get(batch[0].id).seq == 3 and recorder.state("cursor") == "after"
        assert isinstance(recorder.get(target.id).body, Redacted) and recorder.verify().ok

    def test_empty_log(self, recorder):
        assert recorder.head() == 0
        assert list(recorder.read()) == []
        assert recorder.verify().ok

    def test_append_assigns_gapless_seqs(self, recorder):
        assert recorder.append([ev(1)]) == [1]
        assert recorder.append([ev(2), ev(3), ev(4)]) == [2, 3, 4]
        assert [e.seq for e in recorder.read()] == [1, 2, 3, 4]
        assert recorder.head() == 4

    def test_an_import_gap_skips_seqs_in_one_event(self, recorder):
        gap = new_event(ImportGap(source="other", skipped=1_000_000), agent="alice", layer="agent")
        assert recorder.append([ev(1), gap, ev(2)]) == [1, 1_000_002, 1_000_003]
        assert recorder.append([ev(3)]) == [1_000_004]
        assert [e.seq for e in recorder.read()] == [1, 1_000_002, 1_000_003, 1_000_004]
        assert recorder.head() == 1_000_004 and recorder.get_by_seq(500) is None
        assert recorder.verify().ok
        assert recorder.seq_at(recorder.get_by_seq(1).recorded_at) >= 1
        assert recorder.seq_after(0, 2) == 1_000_002 and recorder.seq_after(1, 3) == 1_000_004
        assert recorder.seq_after(1, 4) is None
        assert recorder.recorded_at(500) == recorder.get_by_seq(1_000_002).recorded_at
        assert recorder.count() == 4 and recorder.count(1_000_003) == 3 and recorder.count(500) == 1
        assert recorder.count(0) == 0 and recorder.count(2_000_000) == 4

    def test_round_trip_keeps_every_envelope_field(self, recorder):
        event = new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text="x" * 5000), agent="a", layer="mind")
        recorder.append([event])
        (back,) = list(recorder.read())
        assert (back.id, back.ts, back.agent, back.layer, back.kind, back.body, back.digest) == (
            event.id, event.ts, event.agent, event.layer, event.kind, event.body, event.digest)
        assert back.seq == 1 and back.recorded_at and len(back.chain) == 64

    def test_same_id_same_digest_is_a_no_op(self, recorder):
        event = ev(1)
        recorder.append([ev(0), event])
        assert recorder.append([event]) == [2]
        assert recorder.head() == 2

    def test_same_id_other_digest_refuses_the_whole_batch(self, recorder):
        event = ev(1)
        recorder.append([event])
        forged = new_event(AlwaysAdd(line="other"), agent="alice", layer="mind", id=event.id, ts=event.ts)
        with pytest.raises(IdConflict):
            recorder.append([ev(2), forged])
        assert recorder.head() == 1

    def test_duplicate_inside_one_batch_is_stored_once(self, recorder):
        event = ev(1)
        assert recorder.append([event, event]) == [1, 1]
        assert recorder.head() == 1

    def test_untrusted_append_recomputes_digests(self, untrusted_recorder):
        event = ev(1)
        event.digest = "0" * 64
        with pytest.raises(DigestMismatch):
            untrusted_recorder.append([ev(0), event])
        assert untrusted_recorder.head() == 0

    @pytest.mark.parametrize("digest", ["", "ab" * 31, "ab" * 33, "zz" * 32])
    def test_an_event_without_a_32_byte_digest_is_refused_alone_or_in_a_batch(self, recorder, digest):
        """The chain links are computed over exactly 32 bytes of digest: a trusted append of an event
        whose digest is not 64 hex digits must not be stored (nor make a link verify cannot redo)."""
        recorder.append([ev(0)])
        for batch in ([1], [0, 1]):
            events = [ev(i) for i in batch]
            events[-1].digest = digest
            with pytest.raises(InvalidInput, match="digest"):
                recorder.append(events)
        assert recorder.head() == 1 and recorder.verify().ok

    def test_read_filters(self, recorder):
        recorder.append([ev(1, "mind"), ev(2, "loop"), ev(3, "mind"),
                         new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text=""), agent="a", layer="mind")])
        assert [e.seq for e in recorder.read(layers=["mind"])] == [1, 3, 4]
        assert [e.seq for e in recorder.read(kinds=["page.ingest"])] == [4]
        assert [e.seq for e in recorder.read(after=1, upto=3)] == [2, 3]
        assert [e.seq for e in recorder.read(limit=2, newest_first=True)] == [4, 3]
        first = recorder.get_by_seq(1).recorded_at
        assert [e.seq for e in recorder.read(since_ms=first + 10**9)] == []
        assert recorder.seq_at(first - 1) == 0
        assert recorder.seq_at(first + 10**9) == 4
        assert recorder.get(recorder.get_by_seq(2).id).seq == 2

    def test_a_redacted_event_is_found_as_listed_and_by_the_kind_it_was_written_as(self, recorder):
        """Regression: `mem log` lists a redacted event as `redacted` (its body's tag), and `--kind redacted` found
        none: its row keeps the kind it was written as. Both names find it; a redaction is a kind of its own."""
        events = [ev(1), ev(2), new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text=""), agent="a",
                                          layer="mind")]
        recorder.append(events)
        recorder.append([new_event(Redaction(target_ids=[events[0].id, events[2].id], reason="r"), agent="alice",
                                   layer="mind")])
        assert [e.seq for e in recorder.read(kinds=["redacted"])] == [1, 3]
        assert [e.kind for e in recorder.read(kinds=["redacted"])] == ["redacted", "redacted"]
        assert [e.seq for e in recorder.read(kinds=["always.add"])] == [1, 2]
        assert [e.seq for e in recorder.read(kinds=["page.ingest", "redacted"])] == [1, 3]
        assert [e.seq for e in recorder.read(kinds=["redaction", "redacted"], limit=2, newest_first=True)] == [4, 3]
        assert [row[0] for row in recorder.read_rows(kinds=["redacted"], upto=2)] == [1]

    def test_recorded_at_never_goes_backwards(self, recorder):
        for i in range(20):
            recorder.append([ev(i)])
        times = [e.recorded_at for e in recorder.read()]
        assert times == sorted(times)

    def test_a_batch_recorded_at_a_given_time_never_goes_backwards(self, recorder):
        recorder.append([ev(0)], recorded_at=5_000)
        recorder.append([ev(1), ev(2)], recorded_at=9_000)
        recorder.append([ev(3)], recorded_at=7_000)  # earlier than the last: kept at the last
        assert [e.recorded_at for e in recorder.read()] == [5_000, 9_000, 9_000, 9_000]
        assert recorder.verify().ok

    def test_each_event_of_a_batch_recorded_at_its_own_time(self, recorder):
        """A hub's mirror copies many hub commits in one transaction, each at the hub's time."""
        recorder.append([ev(0)], recorded_at=5_000)
        recorder.append([ev(1), ev(2), ev(3), ev(4)], recorded_at=[6_000, 6_000, 4_000, 8_000], state={"k": "4"})
        recorder.append([ev(5)], recorded_at=7_000)
        assert [e.recorded_at for e in recorder.read()] == [5_000, 6_000, 6_000, 6_000, 8_000, 8_000]
        assert recorder.state("k") == "4" and recorder.seq_at(6_500) == 4 and recorder.verify().ok

    def test_activity_rows_are_the_stored_columns(self, recorder):
        recorder.append([ev(0), ev(1, layer="notes")])
        assert list(recorder.activity_rows(0, 2)) == [(e.seq, e.recorded_at, e.agent, e.layer, e.kind)
                                                       for e in recorder.read()]

    def test_verify_passes_then_finds_tampering(self, recorder, tamper):
        recorder.append([ev(i) for i in range(10)])
        assert recorder.verify().ok and recorder.verify().checked == 10
        tamper(6)
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 6

    def test_verify_names_each_damaged_row_once(self, recorder, tamper, execute):
        """Regression (nc10c L2): verify stopped at the first bad row, so a second damage further on was found only
        once the first was dealt with. Past a damaged row it checks on from that row's stored chain and seq."""
        from eventstore.recorder import LATER_PROBLEMS

        recorder.append([ev(i) for i in range(40)])
        tamper(3)
        execute("UPDATE events SET codec = 9 WHERE seq = 7")
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 3 and report.problem.startswith("digest mismatch")
        assert report.later == [(7, "unknown codec 9")] and report.more == 0 and report.checked == 2
        for seq in range(10, 40):
            tamper(seq)
        report = recorder.verify()
        assert [seq for seq, _ in report.later] == [7, *range(10, 10 + LATER_PROBLEMS - 1)]
        assert report.more == 30 - (LATER_PROBLEMS - 1)

    def test_verify_reports_a_codec_mindlog_never_writes(self, recorder, execute):
        """Regression (nc10c L1): a codec other than raw, zstd or redacted was read as raw, and verify said ok on a
        row changed outside mindlog (the digest does not cover the codec)."""
        recorder.append([ev(i) for i in range(5)])
        execute("UPDATE events SET codec = 9 WHERE seq = 3")
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 3 and report.problem == "unknown codec 9", report

    def test_chain_rows_start_at_the_row_before_and_find_a_broken_link(self, recorder, execute):
        """What a push checks before it sends (nc10c M0): the row at or before `after`, then every row to `upto`."""
        from eventstore.recorder import broken_link

        recorder.append([ev(i) for i in range(6)])
        assert [row[0] for row in recorder.chain_rows(2, 5)] == [2, 3, 4, 5]
        assert [row[0] for row in recorder.chain_rows(0, 3)] == [1, 2, 3]
        assert broken_link(recorder.chain_rows(0, 6), 0) is None and broken_link(recorder.chain_rows(3, 6), 3) is None
        execute("UPDATE events SET digest = chain WHERE seq = 4")
        assert broken_link(recorder.chain_rows(2, 6), 2) == 4 and broken_link(recorder.chain_rows(4, 6), 4) is None

    def test_state_starts_empty_and_keeps_the_last_value(self, recorder):
        assert recorder.state("pull:origin") is None
        recorder.set_state("pull:origin", "p1")
        recorder.set_state("pull:origin", "p2")
        recorder.set_state("push:origin", "7")
        assert (recorder.state("pull:origin"), recorder.state("push:origin")) == ("p2", "7")

    def test_state_commits_with_the_batch(self, recorder):
        assert recorder.append([ev(1), ev(2)], state={"pull:origin": "c2"}) == [1, 2]
        assert recorder.state("pull:origin") == "c2"
        event = ev(3)
        recorder.append([event])
        forged = new_event(AlwaysAdd(line="other"), agent="alice", layer="mind", id=event.id, ts=event.ts)
        with pytest.raises(IdConflict):
            recorder.append([ev(4), forged], state={"pull:origin": "c4"})
        assert recorder.state("pull:origin") == "c2" and recorder.head() == 3

    def test_verify_flag_checks_digests_of_a_trusted_log(self, recorder):
        event = ev(1)
        event.digest = "0" * 64
        with pytest.raises(DigestMismatch):
            recorder.append([ev(0), event], verify=True, state={"pull:origin": "x"})
        assert recorder.head() == 0 and recorder.state("pull:origin") is None

    def test_get_by_seq_and_recorded_at(self, recorder):
        recorder.append([ev(1), ev(2)])
        assert recorder.get_by_seq(2).body == AlwaysAdd(line="line 2")
        assert recorder.get_by_seq(3) is None
        assert recorder.recorded_at(1) == recorder.get_by_seq(1).recorded_at
        assert recorder.recorded_at(3) is None

    def test_fold_rows_are_the_stored_rows_undecoded(self, recorder):
        recorder.append([ev(1, "mind"), ev(2, "team"), ev(3, "mind")])
        rows = list(recorder.fold_rows(1, 3))
        assert [r[0] for r in rows] == [2, 3]
        seq, id, ts, layer, codec, body, agent = rows[0]
        event = recorder.get_by_seq(2)
        assert (id_text(bytes(id)), ts, layer, agent) == (event.id, event.ts, "team", "alice")
        assert decode_body(unpack_body(codec, bytes(body))) == event.body
        mind = rows[1]
        assert (mind[0], mind[3], mind[6]) == (3, None, None)  # the mind layer's: neither layer nor agent
        assert decode_body(unpack_body(mind[4], bytes(mind[5]))) == recorder.get_by_seq(3).body
        assert list(recorder.fold_rows(3, 3)) == []
        lean = list(recorder.fold_rows(1, 3, mind_ids=False))  # a mind event's id may be left out, no other's
        assert lean[0] == rows[0] and lean[1][0] == 3 and lean[1][1] in (None, mind[1]) and lean[1][2:] == mind[2:]

    def test_verify_reports_progress(self, recorder):
        recorder.append([ev(i) for i in range(5)])
        seen = []
        assert recorder.verify(progress=seen.append).ok
        assert seen == [1, 2, 3, 4, 5]

    def test_verify_checks_every_event_up_to_the_head_it_reports(self, recorder):
        """An append landing while verify runs is neither checked nor counted in the head it reports."""
        recorder.append([ev(i) for i in range(3)])
        head, appended = recorder.head, []

        def append_then_head():
            if not appended:
                appended.append(recorder.append([ev(9)]))
            return head()

        recorder.head = append_then_head
        report = recorder.verify()
        assert appended and report.ok and report.checked == report.head

    def test_the_chain_covers_seq_and_recorded_at(self, recorder, execute):
        recorder.append([ev(i) for i in range(4)])
        execute("UPDATE events SET recorded_at = recorded_at + 1 WHERE seq = 4")
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 4 and "chain" in report.problem

    def test_a_redaction_removes_bodies_in_its_layer_and_the_log_still_verifies(self, recorder, execute):
        events = [ev(i) for i in range(4)] + [ev(9, layer="loop")]
        recorder.append(events)
        stray = new_event(Redaction(target_ids=[events[0].id], reason="wrong layer"), agent="alice", layer="loop")
        redaction = new_event(Redaction(target_ids=[events[1].id, events[2].id, events[4].id], reason="leaked"),
                              agent="alice", layer="mind")
        assert recorder.append([stray]) == [6] and recorder.append([redaction]) == [7]
        bodies = [e.body for e in recorder.read()]
        assert bodies[0] == events[0].body and bodies[3] == events[3].body and bodies[4] == events[4].body
        for seq in (2, 3):
            gone = recorder.get_by_seq(seq)
            assert isinstance(gone.body, Redacted) and gone.body.original == "always.add"
            assert gone.body.reason == "leaked" and gone.body.by == redaction.id and gone.digest == events[seq - 1].digest
        stored = b"".join(bytes(row[8]) for row in recorder.read_rows())
        assert b"line 1" not in stored and b"line 2" not in stored and b"line 3" in stored
        report = recorder.verify()
        assert report.ok and report.checked == 7 and report.redacted == 2

    def test_of_two_redactions_of_a_target_the_first_in_a_pulled_batch_wins(self, recorder):
        """A pull appends in hub order; this log's own redaction of a target comes back at its hub place. When
        another agent's redaction of it is ahead of it there, the hub kept that one's reason: so does the log.
        A redaction of it that comes later (in the batch, or in a later one) changes nothing."""
        target = ev(1)
        own = new_event(Redaction(target_ids=[target.id], reason="mine"), agent="alice", layer="mind")
        theirs = new_event(Redaction(target_ids=[target.id], reason="theirs"), agent="bob", layer="mind")
        after = new_event(Redaction(target_ids=[target.id], reason="after"), agent="carol", layer="mind")
        recorder.append([target])
        recorder.append([own])
        assert recorder.get(target.id).body.reason == "mine"
        recorder.append([theirs, own, after])
        gone = recorder.get(target.id)
        assert (gone.body.reason, gone.body.by, gone.digest) == ("theirs", theirs.id, target.digest)
        recorder.append([target, theirs, own, after])  # the same pull again: nothing changes
        assert recorder.get(target.id) == gone and recorder.verify().ok

    def test_a_pulled_redaction_wins_over_an_own_one_not_pushed_yet(self, recorder):
        """Pulled before this log's own redaction of the target was pushed, another agent's is ahead of it in
        hub order (the own one will land after it): its reason wins at once, and the own one coming back later
        changes nothing. Without `unsent` the log's first stays."""
        target = ev(1)
        own = new_event(Redaction(target_ids=[target.id], reason="mine"), agent="alice", layer="mind")
        theirs = new_event(Redaction(target_ids=[target.id], reason="theirs"), agent="bob", layer="mind")
        later = new_event(Redaction(target_ids=[target.id], reason="later"), agent="carol", layer="mind")
        recorder.append([target])
        recorder.append([own])
        recorder.append([later])
        assert recorder.get(target.id).body.reason == "mine"
        recorder.append([theirs], unsent=[own.id])
        gone = recorder.get(target.id)
        assert (gone.body.reason, gone.body.by, gone.digest) == ("theirs", theirs.id, target.digest)
        recorder.append([own])
        recorder.append([later], unsent=[own.id])
        assert recorder.get(target.id) == gone and recorder.verify().ok

    def test_a_redacted_event_travels_and_verifies(self, untrusted_recorder):
        events = [ev(i) for i in range(3)]
        untrusted_recorder.append(events)
        untrusted_recorder.append([new_event(Redaction(target_ids=[events[1].id], reason="r"), agent="alice",
                                             layer="mind")])
        redacted = msgspec.json.decode(msgspec.json.encode(untrusted_recorder.get(events[1].id)), type=Event)
        assert isinstance(redacted.body, Redacted)
        redacted.seq = redacted.recorded_at = redacted.chain = None
        check_event(redacted)
        assert untrusted_recorder.append([redacted]) == [2]  # the same event: its digest did not change
        forged = msgspec.structs.replace(redacted, body=msgspec.structs.replace(redacted.body, body_hash="0" * 64))
        with pytest.raises(DigestMismatch):
            check_event(forged)
