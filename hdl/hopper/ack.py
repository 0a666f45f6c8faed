"""Coalescing write-acknowledgement unit (seed 000, "What NVIDIA's Patent Tells Us").

"A destination SM may count how many acknowledgments it owes each source and
return an accumulated count when a threshold is reached or the bus is idle."
This is what lets bidirectional stores and TMA puts keep 94-96 % of their
one-way rate while bidirectional reads lose about 23 %.
"""

from amaranth import Array, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.arbiter import RoundRobin
from ..common.flit import VC, Kind

__all__ = ["AckCoalescer"]


class AckCoalescer(wiring.Component):
    """Counts write-data flits owed an acknowledgement, per source SM.

    An ACK flit to source ``s`` carrying the owed count leaves when that count
    reaches ``threshold`` flits, or, with any count owed, when the SM's
    injection path is idle (``i_idle``).  The count travels in the low 16 bits
    of the flit's data.  Clock: SM clock (``sync``).

    An ACK names no shared-memory address, so its ``addr`` field carries the
    unit's ACK sequence number times ``line_words``: the GPCMMU route hash
    (:class:`~hdl.hopper.fabric.RouteHash`) then interleaves successive ACKs
    over the four routes packet by packet, the seed's "simple deterministic
    cache-line or packet interleave", instead of sending every ACK of a
    source-destination pair down one lane.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    n_nodes : int
        Number of SM slots (sources).
    line_words : int
        Words per hashed line of the route hash (128 B / 32 B = 4); the ACK
        sequence number steps ``addr`` by this much rounded up to a power of
        two, as the hash rounds its line.

    Members
    -------
    i_slot : In(range(n_nodes))
        This SM's slot (the ACK flits' ``src``); hold it constant.
    i_written : In(1)
        A write-data flit from ``i_src`` was absorbed this cycle.
    i_src : In(range(n_nodes))
        Its source slot.
    i_idle : In(1)
        Nothing else waits to leave this SM.
    i_threshold : In(16)
        Owed flits that force an ACK (at least 1).
    o : Out(stream.Signature(flit_layout))
        ACK flits (response VC).
    o_owed : Out(32)
        Flits owed an acknowledgement, summed over sources.

    Raises
    ------
    ValueError
        If ``n_nodes`` or ``line_words`` is not a positive integer.
    """

    def __init__(self, *, flit_layout, n_nodes, line_words=1):
        for name, value in (("n_nodes", n_nodes), ("line_words", line_words)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.line_shift = (line_words - 1).bit_length()
        self.flit_layout = flit_layout
        self.n_nodes = n_nodes
        super().__init__({
            "i_slot": In(range(n_nodes)),
            "i_written": In(1),
            "i_src": In(range(n_nodes)),
            "i_idle": In(1),
            "i_threshold": In(16),
            "o": Out(stream.Signature(flit_layout)),
            "o_owed": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n_nodes
        owed = Array(Signal(16, name=f"owed{s}") for s in range(n))
        m.submodules.arb = arb = RoundRobin(n)
        for s in range(n):
            m.d.comb += arb.requests[s].eq(
                ~self.o.valid & ((owed[s] >= self.i_threshold) | (self.i_idle & (owed[s] != 0))))

        # Taking a count into the output register and a new arrival can meet in one cycle.
        for s in range(n):
            arrive = self.i_written & (self.i_src == s)
            with m.If(arb.grant[s]):
                m.d.sync += owed[s].eq(arrive)
            with m.Elif(arrive):
                m.d.sync += owed[s].eq(owed[s] + 1)

        flit = self.o.payload
        seq = Signal(max(len(flit.addr) - self.line_shift, 1))
        with m.If(arb.valid):
            m.d.sync += seq.eq(seq + 1)
            m.d.sync += [
                self.o.valid.eq(1),
                flit.kind.eq(Kind.ACK),
                flit.vc.eq(VC.RSP),
                flit.src.eq(self.i_slot),
                flit.dst.eq(arb.grant_index),
                flit.data.eq(owed[arb.grant_index]),
                flit.last.eq(1),
                flit.addr.eq(seq << self.line_shift),
                flit.mask.eq(0),
            ]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        total = 0
        for s in range(n):
            total = total + owed[s]
        m.d.comb += self.o_owed.eq(total + (self.o.valid * flit.data[:16]))
        return m
