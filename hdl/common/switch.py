"""Input-queued crossbar with per-VC credit flow control.

Every switching block of the fabrics (the GPC's TPC arbiter, GPCARB
ingress, GX planes and GPCARB egress; the ET-SoC-1's mesh router,
neighbourhood switches and shire crossbar; the PCIe switches' and root
complexes' crossbars) is one :class:`CreditSwitch` with its own route
function, so arbitration, buffering, credits and performance counters are
written once.
"""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .queue import sync_fifo
from .credit import CreditCounter, CreditLink, VcInputBuffer, whole_packets

__all__ = ["CreditSwitch"]


class CreditSwitch(wiring.Component):
    """``n_in`` x ``n_out`` crossbar; one flit per output per cycle.

    Each input has one :class:`~hdl.common.credit.VcInputBuffer` (a FIFO per
    VC).  Each output allocates in two stages: a
    :class:`~hdl.common.arbiter.RoundRobin` per VC over the (input, VC) queue
    heads that route to it, then a round robin over the VCs for which the
    output holds a downstream credit.  A VC's pointer moves only when that VC
    is granted, so a requester waiting for credit is served within ``n_in``
    grants of its VC once credit is back, however busy the other VC is.  An
    output register follows, so a flit spends two cycles per hop (output
    register, then the next hop's input FIFO).  Arbitration is per flit:
    flits carry their own address, so packets may interleave.

    Clock: ``sync``, renamed by its fabric (see :mod:`hdl.common`); every
    count of cycles here is of that clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    n_in, n_out : int
        Port counts.
    route : callable
        ``route(m, flit, input_index) -> Value``: output index of a head flit
        (a combinational expression; may add logic to ``m``).
    depth : int or sequence of int
        Input buffer slots per VC, in flits: one value for every input, or one
        per input.
    out_credits : int or sequence of int
        Credits per VC at each output: the downstream buffer depth, in flits;
        one value for every output, or one per output.
    n_vc : int
        Virtual channels.
    voq : bool
        Virtual output queues: each input keeps one queue per (VC, output),
        sharing the VC's ``depth`` credits, so a flit waiting for a busy output
        never blocks one behind it bound elsewhere (no head-of-line blocking,
        which would cap a saturated crossbar near 59 % of its lanes).
    packets : bool
        Packet-atomic outputs: once an output grants a head flit whose
        ``last`` is 0, it grants only that (input, VC) queue until the flit
        with ``last`` set has gone, so packets never interleave on an output
        (a PCIe TLP, say).  Default: per-flit arbitration.
    store_forward : bool
        With ``packets`` and FIFO inputs: the port ``i_store_forward`` (one
        bit per input) makes that input store and forward, offering a
        packet's head only once its ``last`` flit is in the buffer, so a
        packet arriving slowly (from a link slower than the output) never
        holds an output while its flits trickle in.  The buffer must then
        hold a whole packet (``depth`` at least the longest packet's flits).

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
    o_no_credit : Out(n_out * n_vc)
        Bit ``o * n_vc + v``: output ``o`` holds no credit for VC ``v``.
    o_credits_away : Out(n_out * n_vc)
        Bit ``o * n_vc + v``: output ``o`` does not hold all its credits for
        VC ``v`` (:attr:`~hdl.common.credit.CreditCounter.o_away`).  All 0
        once the fabric is at rest; a bit left set is a credit lost or
        returned twice on that link.
    o_wants : Out(n_out * n_vc).array(n_in)
        Bit ``v * n_out + o`` of element ``i``: a flit of VC ``v`` at input
        ``i`` waits for output ``o`` this cycle.  With ``o_occupied`` and
        ``o_no_credit`` this is the switch's part of a stall snapshot.
    o_overflow : Out(1)
        Sticky: some input buffer overflowed (credit protocol broken).
    i_store_forward : In(n_in)
        Only with ``store_forward``: bit ``i`` makes input ``i`` store and
        forward whole packets.

    Raises
    ------
    ValueError
        If a port count, depth or credit count is not a positive integer, or
        ``store_forward`` is asked for without ``packets`` or with ``voq``.
    """

    def __init__(self, *, flit_layout, n_in, n_out, route, depth, out_credits, n_vc=2,
                 voq=False, packets=False, store_forward=False):
        for name, value in (("n_in", n_in), ("n_out", n_out)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if store_forward and (voq or not packets):
            raise ValueError("store_forward needs packets=True and FIFO inputs (voq=False)")

        def per_port(name, value, n):
            values = (value,) * n if not isinstance(value, (tuple, list)) else tuple(value)
            if len(values) != n or not all(isinstance(v, int) and not isinstance(v, bool)
                                           and v >= 1 for v in values):
                raise ValueError(f"{name} must be a positive integer or {n} of them, "
                                 f"not {value!r}")
            return values

        self.depths = per_port("depth", depth, n_in)
        self.out_credit_counts = per_port("out_credits", out_credits, n_out)
        self.flit_layout = flit_layout
        self.n_in, self.n_out, self.n_vc = n_in, n_out, n_vc
        self.route = route
        self.depth = depth
        self.out_credits = out_credits
        self.voq = voq
        self.packets = packets
        self.store_forward = store_forward
        link = CreditLink(flit_layout, n_vc)
        super().__init__({
            "i": In(link).array(n_in),
            "o": Out(link).array(n_out),
            "o_flits": Out(32).array(n_out),
            "o_stalls": Out(32).array(n_out),
            "o_occupied": Out(n_in * n_vc),
            "o_no_credit": Out(n_out * n_vc),
            "o_credits_away": Out(n_out * n_vc),
            "o_wants": Out(n_out * n_vc).array(n_in),
            "o_overflow": Out(1),
            **({"i_store_forward": In(n_in)} if store_forward else {}),
        })

    def elaborate(self, platform):
        m = Module()
        if self.voq:
            heads, overflow = self._voq_inputs(m)
        else:
            heads, overflow = self._fifo_inputs(m)
        self._outputs(m, heads)
        m.d.comb += self.o_overflow.eq(_any(overflow))
        return m

    def _voq_inputs(self, m):
        heads = []
        overflow = []
        for i in range(self.n_in):
            link = self.i[i]
            dest = Signal(range(max(self.n_out, 2)), name=f"dest_{i}")
            m.d.comb += dest.eq(self.route(m, link.flit, i))
            for v in range(self.n_vc):
                pops = []
                occupied = []
                for o in range(self.n_out):
                    queue = sync_fifo(width=self.flit_layout.size, depth=self.depths[i])
                    m.submodules[f"voq{i}_{v}_{o}"] = queue
                    write = link.valid & (link.flit.vc == v) & (dest == o)
                    m.d.comb += [queue.w_data.eq(link.flit), queue.w_en.eq(write)]
                    head = stream.Signature(self.flit_layout).create(path=(f"voq{i}_{v}_{o}",))
                    m.d.comb += [head.payload.eq(queue.r_data), head.valid.eq(queue.r_rdy),
                                 queue.r_en.eq(head.ready)]
                    heads.append((head, o, v, i))
                    pops.append(queue.r_rdy & head.ready)
                    occupied.append(queue.r_rdy)
                    flag = Signal(name=f"overflow{i}_{v}_{o}")
                    with m.If(write & ~queue.w_rdy):
                        m.d.sync += flag.eq(1)
                    overflow.append(flag)
                # Several outputs may drain one input's VC in a cycle; the credits
                # go back one per cycle (the link refills one slot per cycle).
                owed = Signal(range(self.n_out * self.depths[i] + 1), name=f"owed_{i}_{v}")
                popped = sum(p.as_unsigned() for p in pops)
                m.d.sync += owed.eq(owed + popped - (owed != 0))
                m.d.comb += link.credit[v].eq(owed != 0)
                m.d.comb += self.o_occupied[i * self.n_vc + v].eq(_any(occupied))
        return heads, overflow

    def _fifo_inputs(self, m):
        heads = []      # per requester: (stream, destination index, vc, input)
        overflow = []
        for i in range(self.n_in):
            buf = VcInputBuffer(flit_layout=self.flit_layout, depth=self.depths[i],
                                n_vc=self.n_vc)
            m.submodules[f"in{i}"] = buf
            wiring.connect(m, wiring.flipped(self.i[i]), buf.i)
            overflow.append(buf.o_overflow)
            for v in range(self.n_vc):
                dest = Signal(range(max(self.n_out, 2)), name=f"dest_{i}_{v}")
                m.d.comb += dest.eq(self.route(m, buf.o[v].payload, i))
                m.d.comb += self.o_occupied[i * self.n_vc + v].eq(buf.o_occupied[v])
                head = buf.o[v]
                if self.store_forward:
                    head = self._whole_packets(m, buf, i, v)
                heads.append((head, dest, v, i))
        return heads, overflow

    def _whole_packets(self, m, buf, i, v):
        """Input ``i``'s VC ``v`` head, offered (while ``i_store_forward[i]``)
        only once the buffer holds the packet's ``last`` flit
        (:func:`~hdl.common.credit.whole_packets`)."""
        queue = buf.o[v]
        lasts = whole_packets(m, self.i[i], queue, v, self.depths[i], f"lasts_{i}_{v}")
        head = stream.Signature(self.flit_layout).create(path=(f"whole{i}_{v}",))
        m.d.comb += [head.payload.eq(queue.payload),
                     head.valid.eq(queue.valid & (~self.i_store_forward[i] | (lasts != 0))),
                     queue.ready.eq(head.ready)]
        return head

    def _outputs(self, m, heads):
        pop_terms = [[] for _ in heads]
        for o in range(self.n_out):
            # Requesters of this output: every head whose route may name it.
            cands = [(r, h) for r, h in enumerate(heads)
                     if not isinstance(h[1], int) or h[1] == o]
            n = len(cands)
            credits = CreditCounter(n_vc=self.n_vc, depth=self.out_credit_counts[o])
            m.submodules[f"credits{o}"] = credits
            m.d.comb += credits.i_return.eq(self.o[o].credit)
            for v in range(self.n_vc):
                m.d.comb += [self.o_no_credit[o * self.n_vc + v].eq(~credits.o_avail[v]),
                             self.o_credits_away[o * self.n_vc + v].eq(credits.o_away[v])]
            waiting = Signal(n, name=f"waiting{o}")
            grant = Signal(n, name=f"grant{o}")
            allowed = Const((1 << n) - 1, n)
            if self.packets:
                # a packet in progress keeps the output until its last flit
                locked = Signal(name=f"locked{o}")
                holder = Signal(n, name=f"holder{o}")
                allowed = Signal(n, name=f"allowed{o}")
                m.d.comb += allowed.eq(Mux(locked, holder, (1 << n) - 1))
                last = _any([grant[k] & h[0].payload.last for k, (r, h) in enumerate(cands)])
                with m.If(grant.any()):
                    m.d.sync += [locked.eq(~last), holder.eq(grant)]
            # Two-stage allocation: a round robin per VC over that VC's
            # requesters, then a round robin over the VCs that hold a credit.
            # A VC's pointer moves only when that VC wins, so another VC's
            # traffic never pushes it past a requester stalled for credit.
            vc_arb = RoundRobin(self.n_vc)
            m.submodules[f"vc_arb{o}"] = vc_arb
            for v in range(self.n_vc):
                members = [k for k, (r, h) in enumerate(cands) if h[2] == v]
                if not members:
                    continue
                arb = RoundRobin(len(members))
                m.submodules[f"arb{o}_{v}"] = arb
                for j, k in enumerate(members):
                    head, dest, _, i = cands[k][1]
                    # A virtual output queue's destination is a constant, a FIFO head's a signal.
                    wants = head.valid & (dest == o)
                    m.d.comb += [
                        waiting[k].eq(wants),
                        self.o_wants[i][v * self.n_out + o].eq(wants),
                        arb.requests[j].eq(wants & allowed[k]),
                        grant[k].eq(arb.grant[j] & vc_arb.grant[v]),
                    ]
                m.d.comb += [
                    vc_arb.requests[v].eq(arb.valid & credits.o_avail[v]),
                    arb.take.eq(vc_arb.grant[v]),
                    credits.i_take[v].eq(vc_arb.grant[v]),
                ]
            for k, (r, h) in enumerate(cands):
                pop_terms[r].append(grant[k])
            # one-hot grant: the payload is the OR of the granted head's bits
            flit = _any([Mux(grant[k], h[0].payload.as_value(), 0) for k, (r, h) in enumerate(cands)])
            m.d.sync += [
                self.o[o].valid.eq(vc_arb.valid),
                self.o[o].flit.eq(flit),
            ]
            with m.If(vc_arb.valid):
                m.d.sync += self.o_flits[o].eq(self.o_flits[o] + 1)
            with m.If((waiting & ~grant).any()):
                m.d.sync += self.o_stalls[o].eq(self.o_stalls[o] + 1)
        for r, (head, *_) in enumerate(heads):
            m.d.comb += head.ready.eq(_any(pop_terms[r]))


def _any(bits):
    """OR of a list of 1-bit values (0 for an empty list)."""
    result = 0
    for bit in bits:
        result = result | bit
    return result
