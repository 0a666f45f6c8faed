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

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .queue import sync_fifo

__all__ = ["CreditLink", "CreditCounter", "VcInputBuffer", "LinkPipeline", "LinkDelay",
           "StreamToLink", "whole_packets"]


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

    Raises
    ------
    ValueError
        If ``n_vc`` is below 1.
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

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

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
    o_away : Out(n_vc)
        The channel's count is not ``depth``: flits of it are on the link or
        in the receiver's buffer.  Once the fabric is at rest every bit must
        be 0; one left set means a credit was lost or returned twice.

    Raises
    ------
    ValueError
        If ``depth`` is not a positive integer.
    """

    def __init__(self, *, n_vc=2, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.n_vc = n_vc
        self.depth = depth
        super().__init__({"i_return": In(n_vc), "i_take": In(n_vc), "o_avail": Out(n_vc),
                          "o_away": Out(n_vc)})

    def elaborate(self, platform):
        m = Module()
        for v in range(self.n_vc):
            count = Signal(range(self.depth + 1), init=self.depth, name=f"credits_vc{v}")
            m.d.comb += [self.o_avail[v].eq(count != 0), self.o_away[v].eq(count != self.depth)]
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

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

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

    Raises
    ------
    ValueError
        If ``depth`` is not a positive integer.
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
            queue = sync_fifo(width=self.flit_layout.size, depth=self.depth)
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


def whole_packets(m, link, queue, vc, depth, name):
    """The whole packets VC ``vc`` of a :class:`VcInputBuffer` holds: a
    ``Signal(range(depth + 1))`` called ``name``, added to ``m``, that
    counts the ``last`` flits in the queue, up when ``link`` (the buffer's
    input, a :class:`CreditLink` member) writes one of that VC, down when
    one leaves ``queue`` (its output stream ``o[vc]``).  Non-zero: the
    packet at the head is all in.  ``depth`` is the buffer's depth in flits."""
    count = Signal(range(depth + 1), name=name)
    came = link.valid & (link.flit.vc == vc) & link.flit.last
    went = queue.valid & queue.ready & queue.payload.last
    m.d.sync += count.eq(count + came - went)
    return count


class LinkPipeline(wiring.Component):
    """Pipeline registers on a :class:`CreditLink`: a wire or router stage
    that takes ``stages`` cycles to cross.

    Flits are delayed by ``stages`` clock cycles; credits return unregistered
    (a returning credit is a single wire and its delay only matters when
    buffers are shallower than the loop, which the callers size against).

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    stages : int
        Register stages, at least 0 (0: a plain connection).
    n_vc : int
        Virtual channels.

    Members
    -------
    i : In(CreditLink(flit_layout, n_vc))
        Upstream side.
    o : Out(CreditLink(flit_layout, n_vc))
        Downstream side, ``stages`` cycles later.

    Raises
    ------
    ValueError
        If ``stages`` is not a non-negative integer.
    """

    def __init__(self, *, flit_layout, stages, n_vc=2):
        if not isinstance(stages, int) or stages < 0:
            raise ValueError(f"stages must be a non-negative integer, not {stages!r}")
        self.stages = stages
        link = CreditLink(flit_layout, n_vc)
        super().__init__({"i": In(link), "o": Out(link)})

    def elaborate(self, platform):
        m = Module()
        valid, flit = self.i.valid, self.i.flit
        for k in range(self.stages):
            v = Signal(name=f"valid_{k}")
            f = Signal.like(flit, name=f"flit_{k}")
            m.d.sync += [v.eq(valid), f.eq(flit)]
            valid, flit = v, f
        m.d.comb += [self.o.valid.eq(valid), self.o.flit.eq(flit),
                     self.i.credit.eq(self.o.credit)]
        return m


class LinkDelay(wiring.Component):
    """A run-time latency on a :class:`CreditLink`: every flit leaves exactly
    ``i_latency`` cycles after it entered (0: a plain wire).

    Equivalent to a pipeline of ``i_latency`` register stages, but held in a
    FIFO of ``capacity`` flits with an entry time stamp each, so a long stage
    costs no more logic than a short one and its depth is a register, not a
    rebuild.  Credits pass straight back: the upstream sender's credits cover
    the flits inside the delay, so ``capacity`` must be at least those credits
    and the delay never overflows; with a latency longer than the credit loop
    the link's throughput falls to credits per loop, as a real pipeline's would.

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    capacity : int
        Flits held (at least the upstream sender's credits, summed over VCs).
    n_vc : int
        Virtual channels.

    Members
    -------
    i : In(CreditLink(flit_layout, n_vc))
        Upstream side.
    o : Out(CreditLink(flit_layout, n_vc))
        Downstream side.
    i_latency : In(8)
        Cycles from entry to exit; 0 passes flits straight through.  Change it
        only while the link is idle.
    o_overflow : Out(1)
        Sticky: a flit arrived with the FIFO full (capacity below the credits).

    Raises
    ------
    ValueError
        If ``capacity`` is not a positive integer.
    """

    def __init__(self, *, flit_layout, capacity, n_vc=2):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, not {capacity!r}")
        self.flit_layout = flit_layout
        self.capacity = capacity
        link = CreditLink(flit_layout, n_vc)
        super().__init__({"i": In(link), "o": Out(link), "i_latency": In(8),
                          "o_overflow": Out(1)})

    def elaborate(self, platform):
        m = Module()
        size = self.flit_layout.size
        m.submodules.queue = queue = sync_fifo(width=size + 9, depth=self.capacity)
        now = Signal(9)
        m.d.sync += now.eq(now + 1)
        stamp = queue.r_data[size:]
        age = Signal(9)
        m.d.comb += age.eq(now - stamp)
        # A flit written in cycle t is readable from t + 1, when its age is 1.
        go = queue.r_rdy & (age >= self.i_latency)
        wire = self.i_latency == 0
        m.d.comb += [
            queue.w_data.eq(Cat(self.i.flit.as_value(), now)),
            queue.w_en.eq(self.i.valid & ~wire),
            queue.r_en.eq(go),
            self.o.valid.eq(Mux(wire, self.i.valid, go)),
            self.o.flit.eq(Mux(wire, self.i.flit.as_value(), queue.r_data[:size])),
            self.i.credit.eq(self.o.credit),
        ]
        with m.If(self.i.valid & ~queue.w_rdy):
            m.d.sync += self.o_overflow.eq(1)
        return m


class StreamToLink(wiring.Component):
    """Put per-VC flit streams on one :class:`CreditLink`.

    Each cycle a round-robin arbiter picks one VC whose stream is valid and
    for which a credit is held; the flit goes out through a register (one
    cycle), or straight through with ``registered=False``.  The sender side of
    every endpoint-to-network connection.

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout; the flit's ``vc`` field is overwritten with the stream's
        index.
    credits : int
        Credits per VC: the receiver's buffer depth in flits.
    n_vc : int
        Virtual channels.
    registered : bool
        Register the link's flit (default), or drive it combinationally from
        the chosen stream (for a FIFO's read side that needs no extra stage).

    Members
    -------
    i : In(stream.Signature(flit_layout)).array(n_vc)
        One stream per VC.
    o : Out(CreditLink(flit_layout, n_vc))
        The link.
    o_credits_away : Out(n_vc)
        The VC's sender does not hold all ``credits`` (see
        :attr:`CreditCounter.o_away`): 0 for every VC once the fabric is at rest.

    Raises
    ------
    ValueError
        If ``credits`` is not a positive integer, or ``n_vc`` is below 1.
    """

    def __init__(self, *, flit_layout, credits, n_vc=2, registered=True):
        if not isinstance(credits, int) or credits < 1:
            raise ValueError(f"credits must be a positive integer, not {credits!r}")
        self.flit_layout = flit_layout
        self.credits = credits
        self.n_vc = n_vc
        self.registered = registered
        super().__init__({
            "i": In(stream.Signature(flit_layout)).array(n_vc),
            "o": Out(CreditLink(flit_layout, n_vc)),
            "o_credits_away": Out(n_vc),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.credits = credits = CreditCounter(n_vc=self.n_vc, depth=self.credits)
        m.submodules.arb = arb = RoundRobin(self.n_vc)
        m.d.comb += [credits.i_return.eq(self.o.credit), self.o_credits_away.eq(credits.o_away)]
        for v in range(self.n_vc):
            m.d.comb += [
                arb.requests[v].eq(self.i[v].valid & credits.o_avail[v]),
                self.i[v].ready.eq(arb.grant[v]),
                credits.i_take[v].eq(arb.grant[v]),
            ]
        flit = Signal(self.flit_layout)
        m.d.comb += flit.eq(Array(p.payload.as_value() for p in self.i)[arb.grant_index])
        domain = m.d.sync if self.registered else m.d.comb
        domain += [self.o.valid.eq(arb.valid), self.o.flit.eq(flit),
                   self.o.flit.vc.eq(arb.grant_index)]
        return m
