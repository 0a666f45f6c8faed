"""Credit-flow-controlled links with virtual channels.

Every hop of a fabric is a :class:`CreditLink`: the sender holds one credit
counter per virtual channel, initialised to the receiver's buffer depth for
that channel; it may put a flit of channel ``v`` on the link only while it
holds a credit for ``v``, and the receiver returns one credit (a one-cycle
pulse on ``credit[v]``) each time it frees a slot of ``v``.  The two VCs
share the link's single flit per cycle, as seed 000's "Virtual Channels,
Credits, and Deadlock" describes: logical queues multiplexed over one
physical lane.
"""

from amaranth import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CreditLink", "CreditCounter", "VcInputBuffer"]


class CreditLink(wiring.Signature):
    """Signature of one directional, credit-flow-controlled lane.

    Parameters
    ----------
    flit_layout : StructLayout
        Layout of the flit (see :func:`hdl.common.flit.flit_layout`); must have
        a ``vc`` field.
    n_vc : int
        Number of virtual channels (2: request and response).

    Members
    -------
    valid : Out(1)
        A flit is on the link this cycle (one flit per cycle at most).
    flit : Out(flit_layout)
        The flit; ``flit.vc`` names its channel.
    credit : In(n_vc)
        One pulse per freed receiver slot, one bit per channel.
    """

    def __init__(self, flit_layout, n_vc=2):
        if n_vc < 1:
            raise ValueError(f"n_vc must be at least 1, not {n_vc!r}")
        self.flit_layout = flit_layout
        self.n_vc = n_vc
        super().__init__({
            "valid": Out(1),
            "flit": Out(flit_layout),
            "credit": In(n_vc),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and other.flit_layout == self.flit_layout
                and other.n_vc == self.n_vc)

    def __hash__(self):
        return hash((type(self), self.n_vc))

    def __repr__(self):
        return f"CreditLink({self.flit_layout!r}, n_vc={self.n_vc})"


class CreditCounter(wiring.Component):
    """Per-VC credit counters held by a link's sender.

    Parameters
    ----------
    n_vc : int
        Number of virtual channels.
    depth : int
        Credits per channel at reset: the receiver's buffer depth in flits.

    Members
    -------
    i_return : In(n_vc)
        Credit pulses from the receiver (connect to the link's ``credit``).
    i_take : In(n_vc)
        The sender puts a flit of that channel on the link this cycle.  Must
        only be asserted while ``o_avail`` is set for the channel.
    o_avail : Out(n_vc)
        At least one credit is held for the channel.
    """

    def __init__(self, *, n_vc=2, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.n_vc = n_vc
        self.depth = depth
        super().__init__({"i_return": In(n_vc), "i_take": In(n_vc), "o_avail": Out(n_vc)})

    def elaborate(self, platform):
        m = Module()
        for v in range(self.n_vc):
            count = Signal(range(self.depth + 1), init=self.depth, name=f"credits_vc{v}")
            m.d.comb += self.o_avail[v].eq(count != 0)
            with m.If(self.i_return[v] & ~self.i_take[v]):
                m.d.sync += count.eq(count + 1)
            with m.Elif(~self.i_return[v] & self.i_take[v]):
                m.d.sync += count.eq(count - 1)
        return m


class VcInputBuffer(wiring.Component):
    """Receiver side of a :class:`CreditLink`: one FIFO per virtual channel.

    A flit written at a clock edge can leave at the next one, so together
    with the sender's output register a hop costs two cycles.  The credit for
    a slot goes back one cycle after the flit leaves.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Slots per channel, in flits; the sender's initial credits.
    n_vc : int
        Number of virtual channels.

    Members
    -------
    i : In(CreditLink(flit_layout, n_vc))
        The incoming link.
    o : Out(stream.Signature(flit_layout)).array(n_vc)
        Head of each channel's queue.
    o_overflow : Out(1)
        Sticky: a flit arrived with no free slot, i.e. the sender broke the
        credit protocol.  Never set in a correct design.
    o_occupied : Out(n_vc)
        The channel's queue holds at least one flit (for stuck-traffic reports).
    """

    def __init__(self, *, flit_layout, depth, n_vc=2):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.flit_layout = flit_layout
        self.depth = depth
        self.n_vc = n_vc
        super().__init__({
            "i": In(CreditLink(flit_layout, n_vc)),
            "o": Out(stream.Signature(flit_layout)).array(n_vc),
            "o_overflow": Out(1),
            "o_occupied": Out(n_vc),
        })

    def elaborate(self, platform):
        m = Module()
        for v in range(self.n_vc):
            queue = fifo.SyncFIFO(width=self.flit_layout.size, depth=self.depth)
            m.submodules[f"vc{v}"] = queue
            write = self.i.valid & (self.i.flit.vc == v)
            m.d.comb += [
                queue.w_data.eq(self.i.flit),
                queue.w_en.eq(write),
                self.o[v].payload.eq(queue.r_data),
                self.o[v].valid.eq(queue.r_rdy),
                queue.r_en.eq(self.o[v].ready),
                self.o_occupied[v].eq(queue.r_rdy),
            ]
            m.d.sync += self.i.credit[v].eq(queue.r_rdy & self.o[v].ready)
            with m.If(write & ~queue.w_rdy):
                m.d.sync += self.o_overflow.eq(1)
        return m
