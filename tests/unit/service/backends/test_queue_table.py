"""Process mode's queue bound (service.backends.queues): the engine's table of queue depths in
shared memory, one column per front-end; a batcher admits only within HEADWISE_MAX_QUEUE over
every front-end's queue, and a front-end started again in a slot starts it empty."""

from __future__ import annotations

import asyncio
import time

import pytest

from headwise.service.backends.queues import QueueTable
from headwise.service.engine.batching import Batcher
from headwise.service.engine.work import Job, Limits
from headwise.service.errors import Overloaded


def test_each_front_end_sees_the_others_depth_not_its_own(tmp_path):
    table = QueueTable.create(tmp_path / "q", queues=2)
    mapped = QueueTable(tmp_path / "q", 2)  # as a front-end process maps it
    a, b = table.front_end(0, 4).queue(1), mapped.front_end(3, 4).queue(1)
    a.set(5)
    b.set(2)
    assert (a.elsewhere(), b.elsewhere()) == (2, 5)
    assert table.front_end(1, 4).queue(0).elsewhere() == 0  # another queue
    mapped.front_end(0, 4)  # a front-end started again in slot 0: the dead one's queue is gone
    assert b.elsewhere() == 0


def test_a_slot_outside_the_table_is_refused(tmp_path):
    table = QueueTable.create(tmp_path / "q", queues=1)
    with pytest.raises(ValueError, match="slot 5000 of 6000"):
        table.front_end(5000, 6000)
    with pytest.raises(ValueError, match="queue 1 is outside"):
        table.front_end(0, 2).queue(1)


def test_a_batcher_admits_within_the_bound_over_every_front_end(tmp_path):
    table = QueueTable.create(tmp_path / "q", queues=1)
    here, there = table.front_end(0, 2).queue(0), table.front_end(1, 2).queue(0)

    async def go():
        batcher = Batcher(Limits(1024, 64, 0.0, 4), [8])
        batcher.shared = here
        there.set(3)  # another front-end holds 3 of the 4
        batcher.submit(Job(1, ["a"]))
        assert here.row[0] == 1  # its own depth, written as it changed
        with pytest.raises(Overloaded, match=r"queue full \(4 inputs waiting across the front-ends\)"):
            batcher.submit(Job(1, ["b"]))
        there.set(0)
        batcher.submit(Job(2, ["b", "c"]))
        assert here.row[0] == 3

    asyncio.run(go())


def test_the_run_clock_says_how_long_the_run_now_running_has_lasted(tmp_path):
    from headwise.service.backends.queues import RunClock

    engine = RunClock.create(tmp_path / "clock")
    supervisor = RunClock(tmp_path / "clock")  # as another process maps it
    assert supervisor.running_for() == 0.0
    engine.started()
    time.sleep(0.05)
    assert 0.04 < supervisor.running_for() < 5
    engine.ended()
    assert supervisor.running_for() == 0.0


def test_heartbeats_say_how_long_each_front_end_has_been_silent(tmp_path):
    from headwise.service.backends.queues import Heartbeats

    supervisor = Heartbeats.create(tmp_path / "beats")
    front_end = Heartbeats(tmp_path / "beats")  # as a front-end process maps it
    assert supervisor.silent_for(3) == 0.0  # not watched until it beats
    front_end.beat(3)
    time.sleep(0.05)
    assert 0.04 < supervisor.silent_for(3) < 5 and supervisor.silent_for(2) == 0.0
    front_end.beat(3)
    assert supervisor.silent_for(3) < 1.0  # the beat just given, not the one 0.05 s before
    front_end.rest(3)  # it drains: not watched
    assert supervisor.silent_for(3) == 0.0
