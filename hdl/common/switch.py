"""Input-queued crossbar with per-VC credit flow control.

Every switching block of the fabrics (TPC arbiter, GPC ingress, the GX
planes, GPC egress) is one :class:`CreditSwitch` with its own route
function, so arbitration, buffering, credits and performance counters are
written once.
"""

from amaranth import Array, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .credit import CreditCounter, CreditLink, VcInputBuffer

__all__ = ["CreditSwitch"]


class CreditSwitch(wiring.Component):
    """``n_in`` x ``n_out`` crossbar; one flit per output per cycle.

    Each input has one :class:`~hdl.common.credit.VcInputBuffer` (a FIFO per
    VC).  Each output has a :class:`~hdl.common.arbiter.RoundRobin` over every
    (input, VC) queue head that routes to it and for whose VC the output holds
    a downstream credit, and an output register, so a flit spends two cycles
    per hop (output register, then the next hop's input FIFO).  Arbitration is
    per flit: flits carry their own address, so packets may interleave.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    n_in, n_out : int
        Port counts.
    route : callable
        ``route(m, flit, input_index) -> Value``: output index of a head flit
        (a combinational expression; may add logic to ``m``).
    depth : int
        Input buffer slots per VC, in flits.
    out_credits : int
        Credits per VC at each output: the downstream buffer depth, in flits.
    n_vc : int
        Virtual channels.

    Members
    -------
    i : In(CreditLink).array(n_in)
        Input links.
    o : Out(CreditLink).array(n_out)
        Output links.
    o_flits : Out(32).array(n_out)
        Flits sent on each output since reset (wraps at 2**32).
    o_stalls : Out(32).array(n_out)
        Cycles in which some flit waited for the output (lost arbitration or
        no credit) since reset.
    o_occupied : Out(n_in * n_vc)
        Bit ``i * n_vc + v``: input ``i``'s VC ``v`` queue is not empty.
    o_overflow : Out(1)
        Sticky: some input buffer overflowed (credit protocol broken).

    Raises
    ------
    ValueError
        If a port count, depth or credit count is not a positive integer.
    """

    def __init__(self, *, flit_layout, n_in, n_out, route, depth, out_credits, n_vc=2):
        for name, value in (("n_in", n_in), ("n_out", n_out), ("depth", depth),
                            ("out_credits", out_credits)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.flit_layout = flit_layout
        self.n_in, self.n_out, self.n_vc = n_in, n_out, n_vc
        self.route = route
        self.depth = depth
        self.out_credits = out_credits
        link = CreditLink(flit_layout, n_vc)
        super().__init__({
            "i": In(link).array(n_in),
            "o": Out(link).array(n_out),
            "o_flits": Out(32).array(n_out),
            "o_stalls": Out(32).array(n_out),
            "o_occupied": Out(n_in * n_vc),
            "o_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n_req = self.n_in * self.n_vc
        heads = []      # per requester: (stream, destination index signal, vc)
        overflow = []
        for i in range(self.n_in):
            buf = VcInputBuffer(flit_layout=self.flit_layout, depth=self.depth, n_vc=self.n_vc)
            m.submodules[f"in{i}"] = buf
            wiring.connect(m, wiring.flipped(self.i[i]), buf.i)
            overflow.append(buf.o_overflow)
            for v in range(self.n_vc):
                dest = Signal(range(max(self.n_out, 2)), name=f"dest_{i}_{v}")
                m.d.comb += dest.eq(self.route(m, buf.o[v].payload, i))
                m.d.comb += self.o_occupied[i * self.n_vc + v].eq(buf.o_occupied[v])
                heads.append((buf.o[v], dest, v))
        m.d.comb += self.o_overflow.eq(_any(overflow))

        payloads = Array(h[0].payload.as_value() for h in heads)
        pop_terms = [[] for _ in range(n_req)]
        for o in range(self.n_out):
            credits = CreditCounter(n_vc=self.n_vc, depth=self.out_credits)
            arb = RoundRobin(n_req)
            m.submodules[f"credits{o}"] = credits
            m.submodules[f"arb{o}"] = arb
            m.d.comb += credits.i_return.eq(self.o[o].credit)
            waiting = Signal(n_req, name=f"waiting{o}")
            for r, (head, dest, v) in enumerate(heads):
                wants = head.valid & (dest == o)
                m.d.comb += [
                    waiting[r].eq(wants),
                    arb.requests[r].eq(wants & credits.o_avail[v]),
                ]
                pop_terms[r].append(arb.grant[r])
            for v in range(self.n_vc):
                m.d.comb += credits.i_take[v].eq(
                    _any([arb.grant[r] for r, h in enumerate(heads) if h[2] == v]))
            m.d.sync += [
                self.o[o].valid.eq(arb.valid),
                self.o[o].flit.eq(payloads[arb.grant_index]),
            ]
            with m.If(arb.valid):
                m.d.sync += self.o_flits[o].eq(self.o_flits[o] + 1)
            with m.If((waiting & ~arb.grant).any()):
                m.d.sync += self.o_stalls[o].eq(self.o_stalls[o] + 1)
        for r, (head, _, _) in enumerate(heads):
            m.d.comb += head.ready.eq(_any(pop_terms[r]))
        return m


def _any(bits):
    """OR of a list of 1-bit values (0 for an empty list)."""
    result = 0
    for bit in bits:
        result = result | bit
    return result
