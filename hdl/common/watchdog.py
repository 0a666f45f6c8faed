"""Run-cycle counter and stall watchdog shared by the fabric tops.

A top counts the cycles of a run and declares it stuck when nothing has moved
for a configured number of cycles; on ``stuck`` the testbench reads the
stall snapshot every switch keeps (:class:`~hdl.common.switch.CreditSwitch`
``o_occupied``, ``o_no_credit``, ``o_wants``) and ``sim.stall`` prints it.
"""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Watchdog"]


class Watchdog(wiring.Component):
    """Counts a run's cycles and raises ``o_stuck`` after ``limit`` cycles
    without progress.  Clock: the top's clock (``sync``).

    Parameters
    ----------
    limit : int
        Cycles without ``i_progress`` that end a run as stuck, at least 1.

    Members
    -------
    i_clear : In(1)
        Start of a run: counters and ``o_stuck`` return to 0.
    i_active : In(1)
        The run is under way (started and not done).
    i_progress : In(1)
        Something moved this cycle (a flit, a beat, a busy engine).
    o_cycles : Out(32)
        Cycles of the run so far: active and not stuck (wraps at 2**32).
    o_idle : Out(32)
        Cycles since the last progress.
    o_stuck : Out(1)
        Sticky until ``i_clear``: ``limit`` cycles passed with no progress.

    Raises
    ------
    ValueError
        If ``limit`` is not a positive integer.
    """

    def __init__(self, limit):
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, not {limit!r}")
        self.limit = limit
        super().__init__({"i_clear": In(1), "i_active": In(1), "i_progress": In(1),
                          "o_cycles": Out(32), "o_idle": Out(32), "o_stuck": Out(1)})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.i_clear):
            m.d.sync += [self.o_cycles.eq(0), self.o_idle.eq(0), self.o_stuck.eq(0)]
        with m.Elif(self.i_active & ~self.o_stuck):
            m.d.sync += self.o_cycles.eq(self.o_cycles + 1)
            with m.If(self.i_progress):
                m.d.sync += self.o_idle.eq(0)
            with m.Else():
                m.d.sync += self.o_idle.eq(self.o_idle + 1)
                with m.If(self.o_idle + 1 >= self.limit):
                    m.d.sync += self.o_stuck.eq(1)
        return m
