"""Experiment definitions, one module per fabric."""

import tomllib
from importlib import resources

__all__ = ["SetByExperiment", "load_reference", "unfinished", "sticky_fault",
           "miscounted_cycles"]


class SetByExperiment(ValueError):
    """A ``--set`` of a configuration field that the experiment sets itself,
    so the value would be recorded in the result without taking effect.  A
    run of one named experiment is refused; a run of a whole fabric skips the
    experiment and runs the others."""


def load_reference(name):
    """The seed values in ``sim/reference/<name>.toml`` as a nested dict.

    Raises
    ------
    FileNotFoundError
        If there is no such reference file.
    tomllib.TOMLDecodeError
        If the file is not valid TOML.
    """
    return tomllib.loads(resources.files("sim.reference").joinpath(f"{name}.toml").read_text())


def unfinished(label, ended, cycles, *, stuck="{ended}", watchdog=None):
    """The start of the error for a run that did not finish, ``"{label}: ...; "``.

    ``ended`` is ``"stuck"`` (the watchdog saw no progress for
    ``watchdog_cycles``), written as ``stuck`` formats it (the mesh and PCIe
    say ``"run ended {ended}"``), or ``"timeout"``: traffic was still moving
    when the run's cycle limit ran out, which a slow configuration (long
    latencies, small windows) can reach; each fabric's limit grows with
    ``watchdog_cycles``, so the message says to raise it.  A stuck run's
    message gives ``watchdog``, the ``watchdog_cycles`` it ran with, when
    given: one set below the fabric's round trips stops runs that are only
    waiting for a reply, and the message should show it.
    """
    if ended == "timeout":
        return (f"{label}: still moving when its limit of {cycles} cycles ran out (no stall; "
                f"the limit grows with watchdog_cycles: raise it for a slower "
                f"configuration); ")
    quiet = f" (no progress for watchdog_cycles = {watchdog})" if watchdog is not None else ""
    return f"{label}: {stuck.format(ended=ended)} after {cycles} cycles{quiet}; "


def sticky_fault(label, ended, cycles, what="a buffer overflowed (credit protocol broken)"):
    """The error for a run that set a sticky fault flag of its top (each
    fabric's ``overflow``; the mesh's ``misrouted``), ``"{label}: {what}"``,
    with how the run ended when that was not ``done``.

    Such a flag is checked before a run's end: a flit written into a full
    buffer, or sent the wrong way, is the first fault, and the hang that
    often follows it (a credit counted twice, a flit dropped) is its
    consequence, so the fault must not be reported as only "stuck".
    """
    after = "" if ended == "done" else f" (the run then ended {ended} after {cycles} cycles)"
    return f"{label}: {what}{after}"


#: Clock edges the testbench counts past the top's cycle counter in a run
#: that ends done: :meth:`testbenches.common.RegisterTB.wait_for` returns at
#: the clock edge after ``done`` rises.
CLOCK_EDGES_PAST_DONE = 1


def miscounted_cycles(label, run):
    """The error for a finished run whose ``cycles`` counter disagrees with
    the testbench's count from the simulator's time (``run["clock_cycles"]``
    from :meth:`testbenches.common.RegisterTB.run`,
    less :data:`CLOCK_EDGES_PAST_DONE`), or ``None`` when they agree.  The
    DSM's and the mesh's results are counts over the design's ``cycles``: a
    cycle counter running fast or slow would move them all alike and pass
    every other check.  (The PCIe machine's bandwidths use its GPUs' ``now``
    stamps, which :func:`sim.experiments.pcie.check_run` checks the same
    way.)  A result without ``clock_cycles`` is not checked.
    """
    clock = run.get("clock_cycles")
    if clock is None or clock - CLOCK_EDGES_PAST_DONE == run["counters"]["cycles"]:
        return None
    return (f"{label}: the design counted {run['counters']['cycles']} cycles, the simulator's "
            f"clock {clock - CLOCK_EDGES_PAST_DONE}: the cycle counter is wrong")
