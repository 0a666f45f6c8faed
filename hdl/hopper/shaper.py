"""Per-SM injection shaper (seed 000, "A 32-Byte Lane with a 2/3 Per-SM Allocation").

The seed's measurements point to a hard, non-work-conserving limiter on the
SM's injection path set to 4/6 of one 32 B lane: one SM reaches about
21.3 B/cycle even when the rest of its CPC is idle, and cold bursts reveal
no material rate above it ("a very small hidden bucket remains possible").
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.arbiter import RoundRobin
from ..common.credit import CreditCounter, CreditLink
from ..common.flit import VC

__all__ = ["InjectionShaper"]


class InjectionShaper(wiring.Component):
    """Shapes an SM's outgoing flits to ``i_flits`` per ``i_cycles`` (default 2 per 3).

    A token count grows by ``flits`` each cycle up to ``flits + cycles - 1``;
    sending a flit costs ``cycles`` tokens.  Under steady demand this gives
    exactly ``flits`` flits in every ``cycles`` cycles; after idling it allows
    a burst of at most ``(flits + cycles - 1) / cycles`` flits above the rate
    (two back to back at 2/3: the small bucket the seed leaves open).
    Between the two VCs: with ``i_response_burst`` = 0 it alternates
    round-robin; with ``k`` > 0 the non-blocking response VC goes first, but a
    waiting request flit is sent after at most ``k`` response flits in a row,
    so requests are never starved.  A VC is eligible only while the next hop
    (TPC arbiter) holds a credit for it.

    Clock: SM clock (``sync``).

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout (32 B of data in the seed's GPC, ``flit_bytes``).
    credits : int
        Next hop's buffer depth per VC, in flits.

    Members
    -------
    i_flits, i_cycles : In(4), In(4)
        Shaping ratio, 1 <= flits <= cycles <= 15 (run-time setting).
    i_response_burst : In(4)
        VC policy: 0 round-robin, k > 0 responses first, at most k in a row
        while a request waits (run-time setting).
    i_shared_vc : In(1)
        Unsafe test mode (run-time): responses are sent on the request VC with
        its credits, so requests and responses share every buffer of the
        fabric, which can then deadlock (a request/response protocol needs
        its responses on a channel requests cannot block).
    i_req, i_rsp : In(stream.Signature(flit_layout))
        Request-VC and response-VC flits from the SM endpoint.
    o : Out(CreditLink(flit_layout))
        Injection link to the TPC arbiter.
    o_flits : Out(32)
        Flits injected since reset.
    o_stalls : Out(32)
        Cycles with a flit waiting but none sent (shaper or credit), since reset.
    o_credits_away : Out(2)
        Per VC, the shaper does not hold all ``credits`` for the TPC
        arbiter's buffer (:attr:`~hdl.common.credit.CreditCounter.o_away`):
        0 once the fabric is at rest.

    Raises
    ------
    ValueError
        If ``credits`` is not a positive integer.
    """

    def __init__(self, *, flit_layout, credits):
        if not isinstance(credits, int) or credits < 1:
            raise ValueError(f"credits must be a positive integer, not {credits!r}")
        self.credits = credits
        super().__init__({
            "i_flits": In(4, init=2), "i_cycles": In(4, init=3), "i_response_burst": In(4),
            "i_shared_vc": In(1),
            "i_req": In(stream.Signature(flit_layout)),
            "i_rsp": In(stream.Signature(flit_layout)),
            "o": Out(CreditLink(flit_layout)),
            "o_flits": Out(32),
            "o_stalls": Out(32),
            "o_credits_away": Out(2),
        })

    def elaborate(self, platform):
        m = Module()
        cap = Signal(5)
        m.d.comb += cap.eq(self.i_flits + self.i_cycles - 1)
        tokens = Signal(5)
        grown = Signal(6)
        m.d.comb += grown.eq(tokens + self.i_flits)

        m.submodules.credits = credits = CreditCounter(depth=self.credits)
        m.submodules.arb = arb = RoundRobin(2)
        m.d.comb += [credits.i_return.eq(self.o.credit), self.o_credits_away.eq(credits.o_away)]
        inputs = {VC.REQ: self.i_req, VC.RSP: self.i_rsp}
        allowed = Signal()
        m.d.comb += allowed.eq(tokens >= self.i_cycles)
        # the channel each stream's flits travel on (shared: both on REQ)
        rsp_vc = Mux(self.i_shared_vc, VC.REQ, VC.RSP)
        channel = {VC.REQ: VC.REQ, VC.RSP: rsp_vc}
        eligible = {vc: allowed & port.valid & credits.o_avail.bit_select(channel[vc], 1)
                    for vc, port in inputs.items()}
        streak = Signal(4)
        hold_requests = Signal()
        m.d.comb += hold_requests.eq((self.i_response_burst != 0) & eligible[VC.RSP]
                                     & (streak < self.i_response_burst))
        m.d.comb += [arb.requests[VC.RSP].eq(eligible[VC.RSP]),
                     arb.requests[VC.REQ].eq(eligible[VC.REQ] & ~hold_requests)]
        # Count responses sent while a request waits, whether or not this
        # cycle had a token: the limit is on responses overtaking a request.
        with m.If(arb.grant[VC.REQ] | ~self.i_req.valid):
            m.d.sync += streak.eq(0)
        with m.Elif(arb.grant[VC.RSP] & (streak < self.i_response_burst)):
            m.d.sync += streak.eq(streak + 1)
        for vc, port in inputs.items():
            m.d.comb += port.ready.eq(arb.grant[vc])
        m.d.comb += [credits.i_take[VC.REQ].eq(arb.grant[VC.REQ]
                                               | (arb.grant[VC.RSP] & self.i_shared_vc)),
                     credits.i_take[VC.RSP].eq(arb.grant[VC.RSP] & ~self.i_shared_vc)]

        m.d.sync += self.o.valid.eq(arb.valid)
        with m.If(arb.grant[VC.RSP]):
            m.d.sync += [self.o.flit.eq(self.i_rsp.payload), self.o.flit.vc.eq(rsp_vc)]
        with m.Else():
            m.d.sync += self.o.flit.eq(self.i_req.payload)

        # Check before refill: a send needs `cycles` tokens; each cycle adds `flits`.
        left = Signal(6)
        m.d.comb += left.eq(grown - Mux(arb.valid, self.i_cycles, 0))
        m.d.sync += tokens.eq(Mux(left > cap, cap, left))
        with m.If(arb.valid):
            m.d.sync += self.o_flits.eq(self.o_flits + 1)
        with m.Elif(self.i_req.valid | self.i_rsp.valid):
            m.d.sync += self.o_stalls.eq(self.o_stalls + 1)
        return m

