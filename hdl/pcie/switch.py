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

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, LinkDelay, StreamToLink, VcInputBuffer
from ..common.switch import CreditSwitch
from .link import N_FC
from .tlp import FcClass, tlp_layout

__all__ = ["Crossbar", "SocketLink"]


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

    Members
    -------
    i : In(CreditLink(tlp_layout(cfg), 3)).array(ports)
    o : Out(CreditLink(tlp_layout(cfg), 3)).array(ports)
    i_latency : In(8)
        Cycles every TLP beat spends crossing (``switch_latency_cycles``).
    o_overflow : Out(1)
        Sticky: a buffer overflowed.
    """

    def __init__(self, cfg, *, ports, port_of, out_credits):
        self.cfg = cfg
        self.ports = ports
        self.port_of = port_of
        self.out_credits = out_credits
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({"i": In(link).array(ports), "o": Out(link).array(ports),
                          "i_latency": In(8), "o_overflow": Out(1)})

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
                            out_credits=self.out_credits, n_vc=N_FC, packets=True)
        m.submodules.core = core
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
    ``i_latency`` cycles later reach the far root complex.

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
    o_busy : Out(32)
        Cycles the link had link time owed (was occupied), for its utilisation.
    o_overflow : Out(1)
        Sticky: a buffer overflowed.
    """

    def __init__(self, cfg, *, in_credits, out_credits):
        self.cfg = cfg
        self.in_credits = in_credits
        self.out_credits = out_credits
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({"i": In(link), "o": Out(link), "i_bytes_per_cycle": In(8),
                          "i_tlp_overhead_bytes": In(8), "i_latency": In(8),
                          "o_busy": Out(32), "o_overflow": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        layout = tlp_layout(cfg)
        m.submodules.inq = inq = VcInputBuffer(flit_layout=layout, depth=self.in_credits,
                                               n_vc=N_FC)
        wiring.connect(m, wiring.flipped(self.i), inq.i)
        m.submodules.send = send = StreamToLink(flit_layout=layout, credits=self.out_credits,
                                                n_vc=N_FC)
        # whole TLPs: a TLP that started keeps the link until its last beat
        busy = Signal()
        cur = Signal(range(N_FC))
        debt = Signal(16)
        free = debt < self.i_bytes_per_cycle
        moved = Signal()
        cost = Signal(16)
        # posted first, then completions, then non-posted requests (nothing passes
        # a posted write; completions pass reads)
        waiting = {k: inq.o[k].valid & inq.o[k].payload.head for k in range(N_FC)}
        ahead = {FcClass.P: [], FcClass.CPL: [FcClass.P], FcClass.NP: [FcClass.P, FcClass.CPL]}
        for c in range(N_FC):
            head = inq.o[c].payload
            go = inq.o[c].valid & free & Mux(busy, cur == c, head.head)
            for k in ahead[FcClass(c)]:
                go = go & (busy | ~waiting[k])
            m.d.comb += [send.i[c].valid.eq(go), send.i[c].payload.eq(inq.o[c].payload),
                         inq.o[c].ready.eq(go & send.i[c].ready)]
            with m.If(go & send.i[c].ready):
                m.d.comb += [moved.eq(1),
                             cost.eq(Mux(head.head, self.i_tlp_overhead_bytes,
                                         cfg.datapath_bytes))]
                m.d.sync += [busy.eq(~head.last), cur.eq(c)]
        left = debt + Mux(moved, cost, 0)
        m.d.sync += debt.eq(Mux(left > self.i_bytes_per_cycle, left - self.i_bytes_per_cycle, 0))
        with m.If(left != 0):
            m.d.sync += self.o_busy.eq(self.o_busy + 1)
        pipe = LinkDelay(flit_layout=layout, capacity=N_FC * self.out_credits, n_vc=N_FC)
        m.submodules.pipe = pipe
        m.d.comb += pipe.i_latency.eq(self.i_latency)
        wiring.connect(m, send.o, pipe.i)
        wiring.connect(m, pipe.o, wiring.flipped(self.o))
        m.d.comb += self.o_overflow.eq(pipe.o_overflow)
        return m
