"""A run's phases with their estimates, its ETA, and the line when a phase overruns (``planning.progress``).

Unit tests with a hand-driven clock (no model), then one real ``belief-eval`` run of the bundled model: its
stderr shows every phase in order with the estimate the run planned, and the run's rates are stored for the next
estimate."""

from __future__ import annotations

import io

from belief_tasks.planning import progress
from belief_tasks.planning.progress import Progress, duration


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make() -> tuple[Progress, Clock, io.StringIO]:
    clock, out = Clock(), io.StringIO()
    return Progress(out=out, now=clock, watch=False, started=clock.t), clock, out


def test_duration_is_written_for_people():
    assert [duration(s) for s in (0, 12.4, 61, 250, 3600, 3725)] == [
        "0 s",
        "12 s",
        "1 min 01 s",
        "4 min 10 s",
        "1 h 00 min",
        "1 h 02 min",
    ]


def test_a_phase_line_carries_its_estimate_the_phase_before_and_the_runs_eta():
    p, clock, out = make()
    p.phase(progress.BUILDING_TASKS)
    clock.t += 20
    p.set_plan(
        {progress.LOADING_MODEL: 10, progress.scoring_phase("loglikelihood"): 100, progress.REPORT: 30},
        {progress.scoring_phase("loglikelihood"): "5 requests"},
        summary="planned",
    )
    p.phase(progress.LOADING_MODEL)
    clock.t += 12
    p.phase(progress.scoring_phase("loglikelihood"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "belief-eval progress: building tasks"
    # 20 s ran before the plan; 10 + 100 + 30 s are still to run
    assert lines[1].startswith("belief-eval progress: planned; estimated total 2 min 40 s, ETA ")
    assert lines[2].startswith(
        "belief-eval progress: loading the model: estimated 10 s; building tasks took 20 s; "
        "run 20 s so far of an estimated 2 min 40 s, ETA "
    )
    # the model took 12 s, 2 s over: the total grows by those 2 s
    assert lines[3].startswith(
        "belief-eval progress: scoring log-likelihoods (5 requests): estimated 1 min 40 s; "
        "loading the model took 12 s (estimated 10 s); run 32 s so far of an estimated "
        "2 min 42 s, ETA "
    )


def test_a_phase_begins_once_and_the_finish_line_compares_with_the_plan():
    p, clock, out = make()
    p.set_plan({progress.RECORDING: 4, progress.WRITING: 6})
    p.phase(progress.RECORDING)
    clock.t += 5
    p.phase(progress.RECORDING)  # polled again while it runs: one phase
    p.phase(progress.WRITING)
    clock.t += 3
    p.phase(progress.RECORDING)  # a phase already done is not begun again
    measured = p.finish()
    assert measured == {progress.RECORDING: 5, progress.WRITING: 3}
    last = out.getvalue().splitlines()[-1]
    assert last == (
        "belief-eval progress: writing results took 3 s (estimated 6 s); finished in 8 s; the estimated "
        "phases took 8 s against 10 s estimated"
    )
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("belief-eval progress: recording and aggregating results") for line in lines) == 1


def test_a_phase_begun_before_its_estimate_is_announced_with_it():
    """The first scoring phase begins when the requests are built, its estimate comes once they are counted: its
    line waits for the plan; the phase before it ends in a line of its own."""
    p, clock, out = make()
    p.phase(progress.BUILDING_REQUESTS)
    clock.t += 4
    p.phase(progress.scoring_phase("loglikelihood"), announce=False)
    clock.t += 2
    p.set_plan({progress.scoring_phase("loglikelihood"): 60}, summary="counted 10 requests")
    p.announce()
    p.announce()  # once
    lines = out.getvalue().splitlines()
    assert lines[1] == "belief-eval progress: building requests took 4 s"
    assert lines[2].startswith("belief-eval progress: counted 10 requests; estimated total 1 min 04 s, ETA ")
    assert lines[3].startswith("belief-eval progress: scoring log-likelihoods: estimated 1 min 00 s; run 6 s so far")
    assert len(lines) == 4


def test_polls_run_on_the_watchdog_and_a_failing_one_is_dropped():
    import threading

    p = Progress(out=io.StringIO())
    calls, two = [], threading.Event()

    def counting():
        calls.append(1)
        if len(calls) >= 2:
            two.set()

    def failing():
        raise RuntimeError("no state")

    p.add_poll(failing)
    p.add_poll(counting)
    assert two.wait(10)
    p.finish()
    assert "no more phases from" in p.out.getvalue() and "RuntimeError: no state" in p.out.getvalue()
    assert failing not in p._polls and counting in p._polls


def test_a_phase_far_past_its_estimate_gets_a_line_and_again_when_it_has_doubled():
    p, clock, out = make()
    p.set_plan({progress.scoring_phase("generate_until"): 40})
    p.phase(progress.scoring_phase("generate_until"))
    clock.t += 79  # 1.98x: not yet
    assert p.check_overrun() is None
    clock.t += 2  # 2.03x
    line = p.check_overrun()
    assert line.startswith("generating answers and samples has run 1 min 21 s, 2.0x its estimate of 40 s")
    assert "ETA is later than shown" in line
    assert p.check_overrun() is None  # said once
    clock.t += 80  # 4.03x: not yet twice the 2.03x of the last line
    assert p.check_overrun() is None
    clock.t += 2  # 4.08x
    assert p.check_overrun().startswith("generating answers and samples has run 2 min 43 s, 4.1x")


def test_a_short_phase_is_not_called_late_before_the_floor():
    p, clock, out = make()
    p.set_plan({progress.LOADING_MODEL: 2})
    p.phase(progress.LOADING_MODEL)
    clock.t += progress.OVERRUN_FLOOR - 1  # 14x its 2 s, but under the floor
    assert p.check_overrun() is None
    clock.t += 2
    assert "15.5x its estimate" in p.check_overrun()


def test_without_an_open_run_the_hooks_do_nothing(capsys):
    assert progress.current() is None
    progress.phase(progress.REPORT)
    ends = progress.evaluate_begins(object(), {})
    ends()
    assert capsys.readouterr().err == ""


def test_startup_holds_the_time_before_the_run_opened():
    age = progress.process_age()
    assert 0 < age < 24 * 3600  # this test process has run for a while
