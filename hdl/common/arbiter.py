"""Round-robin arbiter."""

from amaranth import Array, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RoundRobin", "StreamMerge"]


class RoundRobin(wiring.Component):
    """Combinational round-robin arbiter with a registered priority pointer.

    Each cycle it grants the lowest-numbered requester at or above the
    pointer, wrapping around; after a grant is taken the pointer moves just
    past the winner, so every persistent requester is served within ``n``
    grants.

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    n : int
        Number of requesters, at least 1.

    Members
    -------
    requests : In(n)
        One bit per requester.
    grant : Out(n)
        One-hot grant, zero when nobody requests.
    grant_index : Out(range(max(n, 2)))
        Index of the granted requester (valid when ``valid``); one bit wide
        even for ``n`` = 1.
    valid : Out(1)
        Some requester was granted.
    take : In(1)
        The grant is used this cycle (default 1); the pointer moves only then,
        so a grant offered to a busy consumer stays put.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.
    """

    def __init__(self, n):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        self.n = n
        super().__init__({
            "requests": In(n),
            "grant": Out(n),
            "grant_index": Out(range(max(n, 2))),
            "valid": Out(1),
            "take": In(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        pointer = Signal(range(max(n, 2)))
        upper = Signal(n)
        for i in range(n):
            m.d.comb += upper[i].eq(self.requests[i] & (pointer <= i))
        # Later assignments win, so walking downwards leaves the lowest index.
        for candidates in (self.requests, upper):
            for i in reversed(range(n)):
                with m.If(candidates[i]):
                    m.d.comb += self.grant_index.eq(i)
        m.d.comb += self.valid.eq(self.requests.any())
        for i in range(n):
            m.d.comb += self.grant[i].eq(self.valid & (self.grant_index == i))
        with m.If(self.valid & self.take):
            m.d.sync += pointer.eq(0 if n == 1 else
                                   (self.grant_index + 1) % n)
        return m


class StreamMerge(wiring.Component):
    """Round-robin merge of ``n`` flit streams into one, without buffering.

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    layout : ShapeCastable
        Payload shape.
    n : int
        Number of inputs, at least 1.

    Members
    -------
    i : In(stream.Signature(layout)).array(n)
        Inputs; input ``k`` is offered the output when the arbiter picks it.
    o : Out(stream.Signature(layout))
        Output: valid whenever some input is valid.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.
    """

    def __init__(self, layout, n):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        self.n = n
        super().__init__({
            "i": In(stream.Signature(layout)).array(n),
            "o": Out(stream.Signature(layout)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.arb = arb = RoundRobin(self.n)
        for k in range(self.n):
            m.d.comb += [
                arb.requests[k].eq(self.i[k].valid),
                self.i[k].ready.eq(arb.grant[k] & self.o.ready),
            ]
        m.d.comb += [
            self.o.valid.eq(arb.valid),
            self.o.payload.eq(Array(p.payload.as_value() for p in self.i)[arb.grant_index]),
            arb.take.eq(self.o.ready),
        ]
        return m
