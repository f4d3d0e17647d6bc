"""The hub's fan-out paces its wake-ups by what they cost (sync/fanout.py): a commit wakes the waiting
long-polls at once when the hub is quiet; commits landing while the last wake-up's pause runs are told
together at its end; a long-poll that found only commits not yet told waits for that wake-up."""

import asyncio
import time

from sync.fanout import Fanout

COST = 0.025  # seconds of pause per woken long-poll: large enough to see on a loaded machine (4 woken: MAX_WAKE_INTERVAL)


async def waiters(fanout: Fanout, after: int, count: int, layers=("insights",)) -> list[asyncio.Task]:
    tasks = [asyncio.create_task(fanout.wait(after, list(layers), 5.0)) for _ in range(count)]
    await asyncio.sleep(0)  # each has registered
    return tasks


async def settle() -> None:
    """Lets the woken tasks run (a future set now resumes its task on the loop's next turns)."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_quiet_hub_wakes_at_once_and_a_busy_one_after_the_pause():
    async def scenario():
        fanout = Fanout(cost=COST)
        first = await waiters(fanout, 0, 4)
        woke = time.monotonic()  # the pause of this wake-up is counted from here
        fanout.advance(1, {"insights"})
        await settle()
        assert all(task.done() for task in first)  # quiet: told the moment the commit lands
        assert fanout.head == 1

        second = await waiters(fanout, 1, 2)
        fanout.advance(2, {"insights"})
        fanout.advance(3, {"insights"})  # both within the 4 * COST pause the first wake-up set
        await settle()
        assert not any(task.done() for task in second) and fanout.head == 1
        assert fanout.deferred(1, ["insights"]) and not fanout.deferred(3, ["insights"])
        assert not fanout.deferred(1, ["notes"])  # what is pending touches no layer of its
        results = await asyncio.gather(*second)
        waited = time.monotonic() - woke
        assert results == [True, True] and fanout.head == 3
        assert 4 * COST <= waited < 1.0  # told together, at the end of the pause

        await asyncio.sleep(2 * COST + 0.01)  # the pause of the second wake-up (2 woken) is over
        third = await waiters(fanout, 3, 1)
        fanout.advance(4, {"insights"})
        await settle()
        assert third[0].done()

    asyncio.run(scenario())


def test_a_paced_wake_up_keeps_the_layers_of_every_commit_it_tells():
    async def scenario():
        fanout = Fanout(cost=COST)
        fanout.advance(1, {"other"})  # nobody waits: no pause
        await waiters(fanout, 0, 1, layers=("other",))  # returns at once, head 1 > 0
        insights = await waiters(fanout, 1, 1)
        decisions = await waiters(fanout, 1, 1, layers=("decisions",))
        unrelated = await waiters(fanout, 1, 1, layers=("notes",))
        fanout.advance(2, {"insights"})  # wakes insights now, pauses COST
        await settle()
        assert insights[0].done() and not decisions[0].done()
        fanout.advance(3, {"decisions"})
        fanout.advance(4, {"other"})
        assert await decisions[0] is True
        await settle()
        assert not unrelated[0].done()  # no commit of its layer: still waiting
        unrelated[0].cancel()

    asyncio.run(scenario())


def test_a_wake_up_of_a_layers_thirty_two_consumers_holds_the_next_for_the_window_then_tells_it():
    """The default pacing (WAKE_COST_SECONDS): a commit right after 32 long-polls were woken is told no
    sooner than 32 * 2 ms later (at 0.5 ms per long-poll the consumers made most of a pull request per
    push at 32 agents), and still well within the fan-out target; a long-poll behind what was told
    already returns at once."""

    async def scenario():
        fanout = Fanout()
        consumers = await waiters(fanout, 0, 32)
        started = time.monotonic()  # before the wake-up: its window is counted from its own clock reading
        fanout.advance(1, {"insights"})
        await settle()
        assert all(task.done() for task in consumers)
        late = await waiters(fanout, 1, 32)
        fanout.advance(2, {"insights"})
        await settle()
        assert not any(task.done() for task in late) and fanout.deferred(1, ["insights"])
        assert await asyncio.wait_for(fanout.wait(0, ["insights"], 5.0), 0.01) is True  # told already: at once
        assert await asyncio.gather(*late) == [True] * 32
        waited = time.monotonic() - started
        assert 32 * 0.002 <= waited < 1.0, waited

    asyncio.run(scenario())


def test_long_polls_that_stop_waiting_before_any_commit_do_not_pile_up():
    """A long-poll whose client left (or whose time ran out) stays in the waiters' list until a commit wakes
    the others: on a hub without commits, long-polls that come and go piled up there without end."""

    async def scenario():
        fanout = Fanout()
        staying = await waiters(fanout, 0, 3)
        for _ in range(5_000):
            gone = await waiters(fanout, 0, 2)
            for task in gone:
                task.cancel()
            await settle()
        assert fanout.waiting == 3 and len(fanout._waiters) <= 2 * 64
        fanout.advance(1, {"insights"})
        assert await asyncio.gather(*staying) == [True] * 3
        many = await waiters(fanout, 1, 5_000)  # a peak, all woken: the next prune comes as soon again
        fanout.advance(2, {"insights"})
        await asyncio.gather(*many)
        for _ in range(1_000):
            for task in await waiters(fanout, 2, 2):
                task.cancel()
            await settle()
        assert len(fanout._waiters) <= 2 * 64

    asyncio.run(scenario())



def test_long_polls_given_a_wait_end_together_when_their_slot_ends_and_a_woken_one_keeps_its_answer():
    """`listen(..., wait)`: the fan-out cancels a long-poll's future once its wait is over (never sooner; at most
    END_SLOT later); the long-polls whose waits end in one slot share one timer, and one a commit woke meanwhile
    keeps its answer."""
    async def scenario():
        fanout = Fanout(cost=0.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        ending = [fanout.listen(0, ["insights"], 0.2) for _ in range(3)]
        woken = fanout.listen(0, ["other"], 0.2)
        assert len(fanout._ends) == 1  # one slot, one timer
        fanout.advance(1, {"other"})
        await settle()
        assert woken.result() is True and not any(future.done() for future in ending)
        while not all(future.done() for future in ending):
            await asyncio.sleep(0.005)
        assert loop.time() - started >= 0.2 and all(future.cancelled() for future in ending)
        assert woken.result() is True and not fanout._ends

    asyncio.run(scenario())
