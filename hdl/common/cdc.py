"""Clock-domain crossing of a credit-flow-controlled link."""

from amaranth import Module
from amaranth.hdl import DomainRenamer
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import StreamMerge
from .credit import CreditLink, StreamToLink, VcInputBuffer

__all__ = ["LinkCdc"]


class LinkCdc(wiring.Component):
    """A :class:`~hdl.common.credit.CreditLink` from clock domain ``i_domain``
    to ``o_domain``.

    The upstream sender sees an ordinary receiver (a :class:`VcInputBuffer`
    of ``depth`` flits per VC, credits in ``i_domain``); each VC then crosses
    in its own asynchronous FIFO (Gray-coded pointers through two-flop
    synchronisers, so a flit takes two to three ``o_domain`` cycles to become
    visible), and a :class:`StreamToLink` in ``o_domain`` sends it on, straight
    from the FIFO's read side, with the downstream credits.  One FIFO per VC keeps a blocked request from holding
    a response at the crossing.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Flits per VC in the input buffer and in each asynchronous FIFO (the
        latter at least 2, rounded up to a power of two by Amaranth).
    out_credits : int
        Credits per VC on the output link (the downstream buffer depth).
    i_domain, o_domain : str
        Clock domains of the input and output links.
    n_vc : int
        Virtual channels.
    inject_vc : int or None
        With a VC index, flits offered on ``i_inject`` (``o_domain``) join
        that VC's flits from the crossing, round robin, just before the output
        link (no buffering, no added latency).

    Members
    -------
    i : In(CreditLink(flit_layout, n_vc))
        Input link, clocked by ``i_domain``.
    o : Out(CreditLink(flit_layout, n_vc))
        Output link, clocked by ``o_domain``.
    o_overflow : Out(1)
        Sticky, ``i_domain``: a flit arrived with its input buffer full (the
        upstream sender broke the credit protocol).
    o_credits_away : Out(n_vc)
        ``o_domain``: the output does not hold all ``out_credits`` of the VC
        (:attr:`~hdl.common.credit.CreditCounter.o_away`); all 0 at rest.
    i_inject : In(stream.Signature(flit_layout))
        Only with ``inject_vc``: flits to send on VC ``inject_vc``, clocked by
        ``o_domain``.

    Raises
    ------
    ValueError
        If ``inject_vc`` is not None or a VC index.
    """

    def __init__(self, *, flit_layout, depth, out_credits, i_domain, o_domain, n_vc=2,
                 inject_vc=None):
        if inject_vc is not None and inject_vc not in range(n_vc):
            raise ValueError(f"inject_vc must be None or a VC index from 0 to {n_vc - 1}, "
                             f"not {inject_vc!r}")
        self.flit_layout = flit_layout
        self.inject_vc = inject_vc
        self.depth = depth
        self.out_credits = out_credits
        self.i_domain, self.o_domain = i_domain, o_domain
        self.n_vc = n_vc
        link = CreditLink(flit_layout, n_vc)
        members = {"i": In(link), "o": Out(link), "o_overflow": Out(1),
                   "o_credits_away": Out(n_vc)}
        if inject_vc is not None:
            members["i_inject"] = In(stream.Signature(flit_layout))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.buffer = buffer = DomainRenamer(self.i_domain)(
            VcInputBuffer(flit_layout=self.flit_layout, depth=self.depth, n_vc=self.n_vc))
        m.submodules.send = send = DomainRenamer(self.o_domain)(
            StreamToLink(flit_layout=self.flit_layout, credits=self.out_credits,
                         n_vc=self.n_vc, registered=False))
        wiring.connect(m, wiring.flipped(self.i), buffer.i)
        m.d.comb += [self.o_overflow.eq(buffer.o_overflow),
                     self.o_credits_away.eq(send.o_credits_away)]
        wiring.connect(m, send.o, wiring.flipped(self.o))
        for v in range(self.n_vc):
            # Amaranth's AsyncFIFO needs two entries; with one buffer slot the
            # second is never filled, as the buffer feeds it only what it holds.
            cross = fifo.AsyncFIFO(width=self.flit_layout.size, depth=max(self.depth, 2),
                                   w_domain=self.i_domain, r_domain=self.o_domain)
            m.submodules[f"cross{v}"] = cross
            m.d.comb += [
                cross.w_data.eq(buffer.o[v].payload),
                cross.w_en.eq(buffer.o[v].valid),
                buffer.o[v].ready.eq(cross.w_rdy),
            ]
            into = send.i[v]
            if v == self.inject_vc:
                merge = DomainRenamer(self.o_domain)(StreamMerge(self.flit_layout, 2))
                m.submodules.inject = merge
                wiring.connect(m, wiring.flipped(self.i_inject), merge.i[1])
                wiring.connect(m, merge.o, into)
                into = merge.i[0]
            m.d.comb += [into.payload.eq(cross.r_data), into.valid.eq(cross.r_rdy),
                         cross.r_en.eq(into.ready)]
        return m
