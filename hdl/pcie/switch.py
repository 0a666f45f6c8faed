"""PCIe switch, root complex and the link between the sockets (seed 001,
"1. Introduction": "four per side, each group reaching a single CPU through a
PCIe switch"; "3.2.3": peer access "keeps traffic off the PCIe-to-CPU path").

Both the switch and the root complex are packet-atomic crossbars
(:class:`~hdl.common.switch.CreditSwitch` with ``packets``) routing every TLP
by its target node: a switch sends a TLP for one of its own GPUs straight to
that GPU's port, peer to peer, without touching its upstream port, and
everything else up; a root complex sends a TLP for a GPU of its socket down
to that GPU's switch and everything else over the socket link.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, LinkDelay, StreamToLink, VcInputBuffer
from ..common.switch import CreditSwitch
from .link import N_FC
from .tlp import HOST_NODE, FcClass, TlpType, tlp_layout

__all__ = ["Crossbar", "SocketLink", "SocketReadTracker", "RootPort"]


def _is_host(beat):
    """The TLP of ``beat`` goes to or comes from a host memory."""
    return (beat.dst >= HOST_NODE) | (beat.src >= HOST_NODE)


def _peer_head(beat, kind):
    """``beat`` is the header beat of a peer-to-peer TLP of ``kind``."""
    return beat.head & (beat.kind == kind) & ~_is_host(beat)


def _whole_tlps(m, inq, send, allow):
    """Move whole TLPs from the class queues ``inq.o`` to ``send.i``, a TLP
    that started keeping the output until its last beat.  Between TLPs the
    classes that can start one take turns (``send``'s round robin over the
    classes holding credits); posted writes stay able to pass the others since
    each class has its own queue and credits.  A read or completion may pass a
    posted write queued before it, which PCIe allows only with Relaxed
    Ordering: the model's copies do not depend on that order.  ``allow(c,
    beat)`` gates each beat of class ``c``.  Returns the per-class signals that
    a beat moved this cycle."""
    busy = Signal()
    cur = Signal(range(N_FC))
    moved = []
    for c in range(N_FC):
        beat = inq.o[c].payload
        go = inq.o[c].valid & allow(c, beat) & Mux(busy, cur == c, beat.head)
        m.d.comb += [send.i[c].valid.eq(go), send.i[c].payload.eq(beat),
                     inq.o[c].ready.eq(go & send.i[c].ready)]
        moved.append(go & send.i[c].ready)
        with m.If(moved[-1]):
            m.d.sync += [busy.eq(~beat.last), cur.eq(c)]
    return moved


def _byte_budget(m, budget, charge, busy):
    """Time owed on a resource that pays ``budget`` bytes per cycle: each cycle
    ``charge`` (a 16-bit Signal the caller drives) joins what is owed and
    ``budget`` is paid off; ``busy`` counts the cycles anything was owed.
    Returns whether less than two cycles' budget is owed (a new charge may
    start) and the bytes owed (16 bits).

    Allowing two cycles' worth gives the resource a queue of one cycle: a
    charge smaller than a cycle's budget (a 32 B beat on a 36 B/ns socket
    link) is paid in the same cycle as what the last charge left, so while
    the charges keep up with ``budget`` a TLP takes its bytes over
    ``budget`` whatever the beat width.  Letting a charge start only below
    one cycle's budget lost the part of a cycle a 32 B beat left unused: a
    128 B peer-to-peer write took 7 cycles on the socket link where its
    249 B need 6.92."""
    debt = Signal(16)
    left = debt + charge
    m.d.sync += debt.eq(Mux(left > budget, left - budget, 0))
    with m.If(left != 0):
        m.d.sync += busy.eq(busy + 1)
    return debt < budget * 2, debt


class Crossbar(wiring.Component):
    """A switch or root complex: ``ports`` ports, a cut-through latency on every
    input, packet-atomic arbitration on every output.  Clock: 1 GHz.

    Parameters
    ----------
    cfg : PcieConfig
        ``switch_buffer_beats`` per class at each input.
    ports : int
        Port count.
    port_of : callable
        ``port_of(dst) -> Value``: output port of a TLP for node ``dst`` (4 bits).
    out_credits : int
        Beats per class the next stage takes at each output.
    store_forward : bool
        Give the inputs ``i_store_forward``: a set bit makes that input
        store and forward whole TLPs (a PCIe switch does so from a port whose
        link trained slower than the one it forwards to, so that a TLP never
        holds the faster output while it trickles in); the others cut
        through.  ``switch_buffer_beats`` must then hold a whole TLP.

    Members
    -------
    i : In(CreditLink(tlp_layout(cfg), 3)).array(ports)
    o : Out(CreditLink(tlp_layout(cfg), 3)).array(ports)
    i_latency : In(8)
        Cycles every TLP beat spends crossing (``switch_latency_cycles``).
    i_store_forward : In(ports)
        Only with ``store_forward``: bit ``port`` makes that input store and
        forward.
    o_occupied, o_no_credit : Out(ports * 3)
        Bit ``port * 3 + class``: that input buffer holds a beat; that output
        holds no credit (the stall snapshot of
        :class:`~hdl.common.switch.CreditSwitch`).
    o_wants : Out(ports * 3).array(ports)
        Bit ``class * ports + out`` of element ``port``: a beat of that class
        at input ``port`` waits for output ``out``.
    o_credits_away : Out(ports * 3)
        Bit ``port * 3 + class``: that output does not hold all its credits
        (all 0 once the machine is at rest).
    o_overflow : Out(1)
        Sticky: a buffer overflowed.
    """

    def __init__(self, cfg, *, ports, port_of, out_credits, store_forward=False):
        self.cfg = cfg
        self.ports = ports
        self.port_of = port_of
        self.out_credits = out_credits
        self.store_forward = store_forward
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({"i": In(link).array(ports), "o": Out(link).array(ports),
                          "i_latency": In(8), "o_overflow": Out(1),
                          "o_occupied": Out(ports * N_FC), "o_no_credit": Out(ports * N_FC),
                          "o_wants": Out(ports * N_FC).array(ports),
                          "o_credits_away": Out(ports * N_FC),
                          **({"i_store_forward": In(ports)} if store_forward else {})})

    @property
    def in_credits(self):
        """Beats per class each input takes (the credits its sender holds)."""
        return self.cfg.switch_buffer_beats

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        layout = tlp_layout(cfg)
        depth = cfg.switch_buffer_beats
        core = CreditSwitch(flit_layout=layout, n_in=self.ports, n_out=self.ports,
                            route=lambda m, flit, i: self.port_of(flit.dst), depth=depth,
                            out_credits=self.out_credits, n_vc=N_FC, packets=True,
                            store_forward=self.store_forward)
        m.submodules.core = core
        if self.store_forward:
            m.d.comb += core.i_store_forward.eq(self.i_store_forward)
        m.d.comb += [self.o_occupied.eq(core.o_occupied), self.o_no_credit.eq(core.o_no_credit),
                     self.o_credits_away.eq(core.o_credits_away)]
        m.d.comb += [self.o_wants[p].eq(core.o_wants[p]) for p in range(self.ports)]
        overflow = [core.o_overflow]
        for p in range(self.ports):
            pipe = LinkDelay(flit_layout=layout, capacity=N_FC * depth, n_vc=N_FC)
            m.submodules[f"pipe{p}"] = pipe
            m.d.comb += pipe.i_latency.eq(self.i_latency)
            wiring.connect(m, wiring.flipped(self.i[p]), pipe.i)
            wiring.connect(m, pipe.o, core.i[p])
            wiring.connect(m, core.o[p], wiring.flipped(self.o[p]))
            overflow.append(pipe.o_overflow)
        m.d.comb += self.o_overflow.eq(sum(o.as_unsigned() for o in overflow) != 0)
        return m


class SocketLink(wiring.Component):
    """The link between the two sockets' root complexes, one direction.
    Clock: 1 GHz.

    Peer-to-peer TLPs cross it at ``i_bytes_per_cycle`` with
    ``i_tlp_overhead_bytes`` of link time per TLP on top of its payload (the
    socket link's packet headers and the root complexes' forwarding), then
    ``i_latency`` cycles later reach the far root complex.  TLPs to and from
    host memory are the link's own memory traffic: a header costs one beat
    (``datapath_bytes``) like a data beat.  Each peer-to-peer TLP the other
    direction carries costs this one ``i_return_bytes`` of link time (its
    link-layer acknowledgement and credit return), and a peer-to-peer read
    request waits for room in the :class:`SocketReadTracker`.

    Parameters
    ----------
    cfg : PcieConfig
    in_credits : int
        Beats per class its input buffer holds (the near root complex's credits).
    out_credits : int
        Beats per class the far root complex takes.

    Members
    -------
    i : In(CreditLink(tlp_layout(cfg), 3))
        TLP beats from the near root complex.
    o : Out(CreditLink(tlp_layout(cfg), 3))
        TLP beats to the far root complex.
    i_bytes_per_cycle, i_tlp_overhead_bytes, i_latency : In(8)
        Run-time timing (``socket_bytes_per_cycle``, ``socket_tlp_overhead_bytes``,
        ``socket_latency_cycles``).
    i_return_bytes : In(8)
        Link time, bytes, each peer-to-peer TLP sent the other way costs this
        direction (``socket_return_bytes``), while it owes less than
        :attr:`RETURN_BACKLOG_BYTES`.
    i_returns : In(1)
        A peer-to-peer TLP entered the other direction this cycle.
    i_read_room : In(17)
        Bytes of peer-to-peer read a request may ask for now (the
        :class:`SocketReadTracker`'s room): a peer-to-peer read request asking
        for more waits at the head of its queue.
    o_read_want : Out(13)
        Bytes asked for by the peer-to-peer read request at the head of the
        non-posted queue, 0 if none.
    o_read_sent : Out(13)
        Bytes asked for by the peer-to-peer read request that entered the link
        this cycle, 0 if none.
    o_cpl_sent, o_cpl_arrived : Out(13)
        Payload bytes of the peer-to-peer completion whose header entered the
        link, and whose header left it at the far root complex, this cycle (0 if
        none).
    o_peer_head : Out(1)
        A peer-to-peer TLP entered the link this cycle.
    o_busy : Out(32)
        Cycles the link had link time owed (was occupied), for its utilisation.
    o_read_wait : Out(32)
        Cycles a peer-to-peer read request waited at the head of its queue for
        room in the read trackers.
    o_credits_away : Out(3)
        Bit ``class``: the link's sender to the far root complex does not hold
        all its credits for the next hop
        (:attr:`~hdl.common.credit.CreditCounter.o_away`); all 0 once the
        machine is at rest.
    o_overflow : Out(1)
        Sticky: a buffer overflowed.
    """

    #: Link time owed, bytes, beyond which a return is not charged (it
    #: coalesces into the returns already owed).  Never reached while the
    #: returns take less of the link than it has; it keeps a link whose
    #: returns alone would overrun it (``socket_return_bytes`` above a TLP's
    #: cost) from owing without bound while idle.
    RETURN_BACKLOG_BYTES = 1024

    def __init__(self, cfg, *, in_credits, out_credits):
        self.cfg = cfg
        self.in_credits = in_credits
        self.out_credits = out_credits
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({"i": In(link), "o": Out(link), "i_bytes_per_cycle": In(8),
                          "i_tlp_overhead_bytes": In(8), "i_latency": In(8),
                          "i_return_bytes": In(8), "i_returns": In(1), "o_peer_head": Out(1),
                          "i_read_room": In(17), "o_read_want": Out(13),
                          "o_read_sent": Out(13),
                          "o_cpl_sent": Out(13), "o_cpl_arrived": Out(13),
                          "o_busy": Out(32), "o_read_wait": Out(32), "o_overflow": Out(1),
                          "o_credits_away": Out(N_FC)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        layout = tlp_layout(cfg)
        m.submodules.inq = inq = VcInputBuffer(flit_layout=layout, depth=self.in_credits,
                                               n_vc=N_FC)
        wiring.connect(m, wiring.flipped(self.i), inq.i)
        m.submodules.send = send = StreamToLink(flit_layout=layout, credits=self.out_credits,
                                                n_vc=N_FC)
        m.d.comb += self.o_credits_away.eq(send.o_credits_away)
        cost = Signal(16)
        charge = Signal(16)
        free, debt = _byte_budget(m, self.i_bytes_per_cycle, charge, self.o_busy)
        # returns beyond RETURN_BACKLOG_BYTES owed coalesce into those queued
        m.d.comb += charge.eq(cost + Mux(self.i_returns & (debt < self.RETURN_BACKLOG_BYTES),
                                         self.i_return_bytes, 0))
        # a peer-to-peer read starts only with room for it in the read trackers
        read = inq.o[FcClass.NP].payload
        no_room = _peer_head(read, TlpType.MRD) & (read.length > self.i_read_room)
        moved = _whole_tlps(m, inq, send,
                            lambda c, beat: (free & ~no_room) if c == FcClass.NP else free)
        with m.If(inq.o[FcClass.NP].valid & no_room):
            m.d.sync += self.o_read_wait.eq(self.o_read_wait + 1)
        # a peer-to-peer TLP costs the forwarding overhead on top of its payload; a
        # host-memory TLP is the socket link's own memory traffic and costs a beat
        for c in range(N_FC):
            beat = inq.o[c].payload
            with m.If(moved[c]):
                m.d.comb += cost.eq(Mux(beat.head, Mux(_is_host(beat), cfg.datapath_bytes,
                                                       self.i_tlp_overhead_bytes),
                                        cfg.datapath_bytes))
                with m.If(beat.head & ~_is_host(beat)):
                    m.d.comb += self.o_peer_head.eq(1)
        cpl = inq.o[FcClass.CPL].payload
        m.d.comb += [
            self.o_read_want.eq(Mux(inq.o[FcClass.NP].valid & _peer_head(read, TlpType.MRD),
                                    read.length, 0)),
            self.o_read_sent.eq(Mux(moved[FcClass.NP] & _peer_head(read, TlpType.MRD),
                                    read.length, 0)),
            self.o_cpl_sent.eq(Mux(moved[FcClass.CPL] & _peer_head(cpl, TlpType.CPLD),
                                   cpl.length, 0)),
            self.o_cpl_arrived.eq(Mux(self.o.valid & _peer_head(self.o.flit, TlpType.CPLD),
                                      self.o.flit.length, 0)),
        ]
        pipe = LinkDelay(flit_layout=layout, capacity=N_FC * self.out_credits, n_vc=N_FC)
        m.submodules.pipe = pipe
        m.d.comb += pipe.i_latency.eq(self.i_latency)
        wiring.connect(m, send.o, pipe.i)
        wiring.connect(m, pipe.o, wiring.flipped(self.o))
        m.d.comb += self.o_overflow.eq(pipe.o_overflow)
        return m


class SocketReadTracker(wiring.Component):
    """The two root complexes' trackers of peer-to-peer reads across the socket
    link.  Clock: 1 GHz.

    Each socket's root complex holds ``i_bytes`` bytes of tracker room for
    the peer-to-peer reads that cross the socket link, in either direction:
    the reads its own GPUs send to the other socket and the reads the other
    socket's GPUs send to its GPUs share one pool.  A read request enters the
    socket link only when both root complexes have room for the bytes it asks
    for; the completer's root complex frees them as the completions enter the
    link back, the requester's as they arrive over it.  Host-memory reads do
    not use the trackers.  The seed does not describe the trackers: they are
    the socket link's outstanding-request limit, sized on the one row they
    bind, the 8-GPU ring of pull kernels (seed 001, "3.2.4": "Cross socket,
    8-GPU ring 22, 21, 22, 11, ..."), where each root complex carries one
    pull each way.

    Members
    -------
    i_bytes : In(16)
        Tracker room per root complex, bytes (``socket_read_bytes``).
    i_read_want, i_read_sent, i_cpl_sent, i_cpl_arrived : In(ArrayLayout(13, 2))
        Element ``d``: the same-named outputs of the socket link from socket
        ``d`` to socket ``1 - d``.
    o_room : Out(ArrayLayout(17, 2))
        Element ``d``: bytes a peer-to-peer read request entering that
        direction may ask for this cycle.  The direction whose turn it is
        claims first, and the turn passes to the other when it starts a read
        (round robin); the other sees the room less what the read waiting in
        the first direction asks for, if that read fits.
    i_clear : In(1)
        Start a new run: forget the peak and give the first turn to the
        reads from socket 0 (which direction claims the shared room first
        alternates with each read sent), so that a run does not depend on the
        runs before it.
    o_peak : Out(17)
        The most bytes either root complex held at once since ``i_clear``.
    o_held : Out(17)
        The most bytes either root complex holds now: 0 at rest, every read's
        room freed by its completions.
    """

    def __init__(self):
        super().__init__({"i_bytes": In(16), "i_clear": In(1),
                          "i_read_want": In(data.ArrayLayout(13, 2)),
                          "i_read_sent": In(data.ArrayLayout(13, 2)),
                          "i_cpl_sent": In(data.ArrayLayout(13, 2)),
                          "i_cpl_arrived": In(data.ArrayLayout(13, 2)),
                          "o_room": Out(data.ArrayLayout(17, 2)), "o_peak": Out(17),
                          "o_held": Out(17)})

    def elaborate(self, platform):
        m = Module()
        held = [Signal(17, name=f"held{k}") for k in range(2)]
        most = Mux(held[0] > held[1], held[0], held[1])
        room = Mux(self.i_bytes > most, self.i_bytes - most, 0)
        m.d.comb += self.o_held.eq(most)
        turn = Signal()
        with m.If(self.i_clear):
            m.d.sync += turn.eq(0)      # each run starts with direction 0's turn
        with m.Elif(Mux(turn, self.i_read_sent[1], self.i_read_sent[0]) != 0):
            m.d.sync += turn.eq(~turn)
        for d in range(2):
            # direction d claims first on its turn; otherwise it sees the room
            # less what the other direction's waiting read takes if it fits
            other = self.i_read_want[1 - d]
            m.d.comb += self.o_room[d].eq(Mux((turn == d) | (other > room), room, room - other))
        sent = self.i_read_sent[0] + self.i_read_sent[1]
        for k in range(2):
            # socket k's root complex: completions it sends back free what it
            # served, completions arriving from the other socket what it asked for
            m.d.sync += held[k].eq(held[k] + sent - self.i_cpl_sent[k]
                                   - self.i_cpl_arrived[1 - k])
        with m.If(self.i_clear):
            m.d.sync += self.o_peak.eq(0)
        with m.Elif(most > self.o_peak):
            m.d.sync += self.o_peak.eq(most)
        return m


class RootPort(wiring.Component):
    """A root complex's downstream port, between the PCIe link to its switch and
    the root complex's crossbar.  Clock: 1 GHz.

    Every byte moved between the port and host memory, write data coming up
    and read data going down, draws on one budget of ``i_host_bytes_per_cycle``
    (seed 001, "3.2.2": two staged copies through one socket halve, as "both
    links traverse the same PCIe-switch-to-CPU path, so they contend", and a
    staged copy within one socket runs slower than across two; "3.2.1" offers,
    as the author's hypothesis, that "scheduling the D2H and H2D halves within
    one socket contends for the same CPU resources more heavily").  A
    host-memory TLP with data starts only while the port owes less than two
    cycles' budget, and then owes its payload bytes.  Peer-to-peer TLPs pass
    without cost.

    Parameters
    ----------
    cfg : PcieConfig
    up_credits : int
        Beats per class the root complex's input takes.
    down_credits : int
        Beats per class the link's transmit queue takes.

    Members
    -------
    link_i : In(CreditLink(tlp_layout(cfg), 3))
        TLPs from the link (up); its sender holds :attr:`link_credits` per class.
    root_o : Out(CreditLink(tlp_layout(cfg), 3))
        TLPs to the root complex.
    root_i : In(CreditLink(tlp_layout(cfg), 3))
        TLPs from the root complex (down); its sender holds ``down_credits``.
    link_o : Out(CreditLink(tlp_layout(cfg), 3))
        TLPs to the link.
    i_host_bytes_per_cycle : In(8)
        ``root_host_bytes_per_cycle``.
    o_host_busy : Out(32)
        Cycles the port owed host-memory time (for its utilisation).
    o_credits_away : Out(6)
        Bit ``class`` (up, towards the root complex) and ``3 + class``
        (down, towards the link): that sender does not hold all its credits
        (all 0 once the machine is at rest).
    """

    #: Beats per class the port's input from the link holds.
    link_credits = 32

    def __init__(self, cfg, *, up_credits, down_credits):
        self.cfg = cfg
        self.up_credits = up_credits
        self.down_credits = down_credits
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({"link_i": In(link), "root_o": Out(link), "root_i": In(link),
                          "link_o": Out(link), "i_host_bytes_per_cycle": In(8),
                          "o_host_busy": Out(32), "o_credits_away": Out(2 * N_FC)})

    def elaborate(self, platform):
        m = Module()
        layout = tlp_layout(self.cfg)
        owed = Signal(16)
        free, _ = _byte_budget(m, self.i_host_bytes_per_cycle, owed, self.o_host_busy)

        def charged(beat):
            return beat.head & _is_host(beat) & (beat.kind != TlpType.MRD)
        costs, away = [], []
        for name, src, dst, depth, credits in (
                ("up", self.link_i, self.root_o, self.link_credits, self.up_credits),
                ("down", self.root_i, self.link_o, self.down_credits, self.down_credits)):
            inq = VcInputBuffer(flit_layout=layout, depth=depth, n_vc=N_FC)
            send = StreamToLink(flit_layout=layout, credits=credits, n_vc=N_FC)
            m.submodules[f"{name}_in"] = inq
            m.submodules[f"{name}_send"] = send
            wiring.connect(m, wiring.flipped(src), inq.i)
            wiring.connect(m, send.o, wiring.flipped(dst))
            away.append(send.o_credits_away)
            moved = _whole_tlps(m, inq, send, lambda c, beat: ~charged(beat) | free)
            cost = Signal(16, name=f"{name}_cost")
            for c in range(N_FC):
                beat = inq.o[c].payload
                with m.If(moved[c] & charged(beat)):
                    m.d.comb += cost.eq(beat.length)
            costs.append(cost)
        m.d.comb += [owed.eq(costs[0] + costs[1]), self.o_credits_away.eq(Cat(*away))]
        return m
