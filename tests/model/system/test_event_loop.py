"""The scheduler's event ordering key: (time, priority, sequence)."""

import pytest

from heteroreason.model.system.event_loop import EventLoop, Priority


def test_ordering_key_time_then_priority_then_sequence():
    loop = EventLoop()
    seen = []
    loop.at(5.0, Priority.DRAFT, seen.append, "draft@5")
    loop.at(5.0, Priority.VERDICT, seen.append, "verdict@5")
    loop.at(1.0, Priority.START, seen.append, "start@1")
    loop.at(5.0, Priority.TRANSFER, seen.append, "transfer@5")
    loop.at(5.0, Priority.DRAFT, seen.append, "draft@5 second")
    loop.at(5.0, Priority.START, seen.append, "start@5")
    assert loop.run() == 5.0
    assert seen == ["start@1", "transfer@5", "verdict@5", "draft@5", "draft@5 second",
                    "start@5"]
    assert loop.events == 6


def test_handlers_may_schedule_at_the_current_instant_but_not_before():
    loop = EventLoop()
    seen = []

    def first():
        seen.append("first")
        loop.at(loop.now, Priority.TRANSFER, seen.append, "same instant, scheduled later")
        with pytest.raises(ValueError, match=r"^event at 1\.0 ms scheduled in the past \(now 2\.0 "
                                             r"ms\)$"):
            loop.at(loop.now - 1, Priority.TRANSFER, seen.append, "never")

    loop.at(2.0, Priority.START, first)
    loop.run()
    assert seen == ["first", "same instant, scheduled later"]
