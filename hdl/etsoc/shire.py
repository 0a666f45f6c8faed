"""Shire network (seed 002, "Inside a shire, only the tree edges are fast",
"Reduction trees").

A shire holds 32 minions in four neighbourhoods of eight.  Inside a
neighbourhood the reduction-tree edges of levels 0-2 form the fast network;
every other message inside the shire, and every message to or from the mesh,
goes through the shire crossbar, which also holds the shire's single mesh
port ("Minion 31 of each shire gives the same numbers as minion 0, so each
shire meets the mesh at a single point").  The shire's barrier unit
(:class:`ShireBarrier`) hangs off the crossbar too.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, LinkDelay, StreamToLink, VcInputBuffer
from ..common.flit import VC
from ..common.shared import SharedModule
from ..common.switch import CreditSwitch
from .config import tree_edge
from .engine import MinionEngine, MsgKind

__all__ = ["ENGINE_COUNTERS", "ENGINE_STATE_FLAGS", "MESH_STOP_ACK", "Shire", "ShireBarrier", "engine_counters",
           "is_mesh_stop_ack"]

#: Per-engine counters, in address order within an engine.
ENGINE_COUNTERS = ("tx_msgs", "rx_msgs", "first_rx", "last_rx", "checksum", "errors",
                   "ready_from", "blocked_ready", "state", "tx_sum", "rx_sum",
                   "first_stray_cycle")

#: The one-bit flags of an engine's ``state`` counter, low bit first, each the
#: :class:`MinionEngine` output ``o_<flag>``; bits 8 to 23 hold ``o_credits``.
ENGINE_STATE_FLAGS = ("done", "init_done", "verify_done", "sleeping", "window_broken")


def engine_counters(e):
    """The values of :data:`ENGINE_COUNTERS` of engine ``e`` (a
    :class:`MinionEngine`), each at most 32 bits; the packed ones are described
    by :func:`hdl.etsoc.mesh.counter_names`."""
    return [e.o_tx_msgs, e.o_rx_msgs, e.o_first_rx, e.o_last_rx, e.o_checksum,
            Cat(e.o_errors, e.o_first_stray), e.o_ready_from, e.o_blocked_ready,
            Cat(*(getattr(e, f"o_{flag}") for flag in ENGINE_STATE_FLAGS),
                Const(0, 8 - len(ENGINE_STATE_FLAGS)), e.o_credits),
            e.o_tx_sum, e.o_rx_sum, e.o_first_stray_cycle]


def is_barrier_unit_flit(flit):
    """True for the flit kinds addressed to a shire's :class:`ShireBarrier`
    (their ``dst`` names a minion of that shire; the kind selects the unit)."""
    return (flit.kind == MsgKind.FLB) | (flit.kind == MsgKind.CREDIT_MCAST)


#: ``data`` bit that marks an ``ACK`` flit as one mesh stop's to another's
#: (:class:`~hdl.etsoc.mesh.MeshStop`); the count is in ``data[0:16]``.
MESH_STOP_ACK = 16


def is_mesh_stop_ack(flit):
    """1-bit value, true for the ``ACK`` flits a :class:`~hdl.etsoc.mesh.MeshStop`
    sends to another shire's stop."""
    return (flit.kind == MsgKind.ACK) & flit.data[MESH_STOP_ACK]


class ShireBarrier(wiring.Component):
    """A shire's fast-local-barrier counter and credit fan-out (seed 002,
    "barrier counters in every shire"; "What it means": "a 32-minion FLB plus
    credit barrier").  Clock: minion clock (600 MHz).

    One flit in or out per cycle, on the response channel:

    * ``FLB`` (``data[0:6]`` = members) raises the count; the arriving minion
      gets ``FLB_RESULT`` with ``data[0]`` = 1 when the count reached the
      members (the count then starts again from 0), else 0.
    * ``CREDIT_MCAST`` (``data[0:32]`` = a mask of the shire's minions) sends
      one ``CREDIT`` to each minion of the mask, lowest first, one per cycle;
      no flit is taken in meanwhile.

    The chip has several barrier counters per shire; the model has one, so
    barriers in one shire do not overlap.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout (``node_bits`` 10).

    Members
    -------
    i_shire : In(5)
        Logical shire ID; credits go to ``shire << 5 | k``.  Hold it constant.
    i : In(stream.Signature(flit_layout))
        ``FLB`` and ``CREDIT_MCAST`` flits; any other kind is dropped and counted.
    o : Out(stream.Signature(flit_layout))
        ``FLB_RESULT`` and ``CREDIT`` flits.
    o_errors : Out(8)
        Flits of another kind taken in (saturates at 255).
    """

    def __init__(self, *, flit_layout):
        self.flit_layout = flit_layout
        flit = stream.Signature(flit_layout)
        super().__init__({"i_shire": In(5), "i": In(flit), "o": Out(flit), "o_errors": Out(8)})

    def elaborate(self, platform):
        m = Module()
        count = Signal(6)
        fan = Signal(32)
        fan_src = Signal(10)
        flit = self.i.payload
        free = ~self.o.valid | self.o.ready
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        out = self.o.payload
        common = [out.vc.eq(VC.RSP), out.last.eq(1), out.addr.eq(0)]
        lowest = Signal(5)
        for k in reversed(range(32)):
            with m.If(fan[k]):
                m.d.comb += lowest.eq(k)
        with m.If(fan.any()):
            with m.If(free):
                m.d.sync += [self.o.valid.eq(1), out.kind.eq(MsgKind.CREDIT), out.src.eq(fan_src),
                             out.dst.eq(Cat(lowest, self.i_shire)), out.data.eq(0),
                             fan.eq(fan & (fan - 1))] + common
        with m.Else():
            m.d.comb += self.i.ready.eq(free)
            with m.If(self.i.valid & free):
                with m.If(flit.kind == MsgKind.FLB):
                    last = (count + 1)[:6] == flit.data[:6]
                    m.d.sync += [count.eq(Mux(last, 0, count + 1)),
                                 self.o.valid.eq(1), out.kind.eq(MsgKind.FLB_RESULT),
                                 out.src.eq(flit.dst), out.dst.eq(flit.src),
                                 out.data.eq(last)] + common
                with m.Elif(flit.kind == MsgKind.CREDIT_MCAST):
                    m.d.sync += [fan.eq(flit.data[:32]), fan_src.eq(flit.src)]
                with m.Elif(self.o_errors != 255):
                    m.d.sync += self.o_errors.eq(self.o_errors + 1)
        return m


class Shire(wiring.Component):
    """One compute shire: its minions' engines, neighbourhood switches and crossbar.
    Clock: minion clock (600 MHz, domain ``sync``).

    One Verilog module serves every shire of a build
    (:class:`~hdl.common.shared.SharedModule`): the shire's ID is a port, and
    the engines' register and counter ports are reached through the shire's.

    Parameters
    ----------
    cfg : MeshConfig
        ``neighbourhoods`` x ``minions_per_neighbourhood`` minions are built,
        with buffers of ``link_buffer_flits`` per VC, and
        ``crossbar_buffer_flits`` per VC where the crossbar's stage enters
        a neighbourhood.
    flit_layout : StructLayout
        Flit layout (``node_bits`` 10).
    checks : bool
        Build the engines' data checks (``False`` for synthesis, see
        :class:`~hdl.etsoc.engine.MinionEngine`).

    Members
    -------
    i_shire : In(5)
        Logical shire ID (0..31); minion ``k`` has global index ``shire << 5 |
        k``.  Hold it constant.
    o_mesh : Out(CreditLink(flit_layout))
        Flits leaving the shire for the mesh.
    i_mesh : In(CreditLink(flit_layout))
        Flits from the mesh.
    o_overflow : Out(1)
        Sticky: some buffer overflowed (credit protocol broken), or the
        barrier unit was sent a flit it does not handle.
    o_credits_away : Out(neighbourhoods + 3)
        A sender of the shire does not hold all its credits (all 0 once the
        shire is at rest): bit 0 some minion's link into its neighbourhood
        switch, bit ``1 + nb`` an output of neighbourhood switch ``nb``, then
        an output of the crossbar, then the barrier unit's sender.
    i_send_cycles, i_recv_cycles : In(8)
        Engine latencies, to every engine (see :class:`MinionEngine`).
    i_tree_cycles : In(8)
        Latency of every delivery from a neighbourhood switch to its minion
        (the fast network's stage; minion cycles).
    i_xbar_cycles : In(8)
        Latency of every crossbar output towards a neighbourhood (the
        crossbar's stage; minion cycles).  The mesh output has none: its stage
        is the mesh port's, outside the shire.
    i_window_flits, i_ack_flits : In(8)
        The engines' send window and ACK spacing (see :class:`MinionEngine`).
    i_we, i_minion : In(1), In(5); i_reg : In(4); i_data : In(32)
        Write ``i_data`` to register ``i_reg`` of minion ``i_minion`` of this
        shire (a minion that is not built ignores it).
    i_all : In(1)
        With ``i_we``: write register ``i_reg`` of every minion of this shire,
        whatever ``i_minion``.
    i_init, i_start, i_verify : In(1); i_now : In(32)
        To every engine (see :class:`MinionEngine`).
    o_init_done, o_done, o_verify_done : Out(1)
        Every engine's; ``o_progress`` : Out(1), some engine's.
    i_rd_addr : In(ceil(log2(minions * 12))); o_rd_data : Out(32)
        Counter ``i_rd_addr % 12`` (:data:`ENGINE_COUNTERS` order, see
        :func:`engine_counters`) of minion ``i_rd_addr // 12``
        (combinational).
    """

    def __init__(self, cfg, flit_layout, *, checks=True):
        self.cfg = cfg
        self.flit_layout = flit_layout
        self.checks = bool(checks)
        link = CreditLink(flit_layout)
        n_counters = cfg.minions_per_shire * len(ENGINE_COUNTERS)
        super().__init__({"i_shire": In(5),
                          "o_mesh": Out(link), "i_mesh": In(link), "o_overflow": Out(1),
                          "o_credits_away": Out(cfg.neighbourhoods + 3),
                          "i_send_cycles": In(8), "i_recv_cycles": In(8),
                          "i_tree_cycles": In(8), "i_xbar_cycles": In(8),
                          "i_window_flits": In(8), "i_ack_flits": In(8),
                          "i_we": In(1), "i_all": In(1), "i_minion": In(5), "i_reg": In(4),
                          "i_data": In(32), "i_init": In(1), "i_start": In(1), "i_verify": In(1),
                          "i_now": In(32),
                          "o_init_done": Out(1), "o_done": Out(1), "o_verify_done": Out(1),
                          "o_progress": Out(1),
                          "i_rd_addr": In(range(n_counters)), "o_rd_data": Out(32)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        mpn, nbs = cfg.minions_per_neighbourhood, cfg.neighbourhoods
        depth = cfg.link_buffer_flits
        xdepth = cfg.crossbar_buffer_flits
        layout = self.flit_layout
        levels = max(mpn - 1, 0).bit_length()
        # edge[a * mpn + b]: minions a and b of a neighbourhood share a tree edge
        edges = Const(sum(1 << (a * mpn + b) for a in range(mpn) for b in range(mpn)
                          if tree_edge(a, b, levels)), max(mpn * mpn, 1))
        lbits = max(mpn - 1, 0).bit_length()
        overflow = []

        def local(index):
            return index % mpn if mpn > 1 else 0

        engines = []
        for k in range(cfg.minions_per_shire):
            engine = SharedModule(MinionEngine, "etsoc_minion_engine", flit_layout=layout,
                                  registers=cfg.registers,
                                  flits_per_register=cfg.flits_per_register,
                                  checks=self.checks)
            m.submodules[f"engine{k}"] = engine
            m.d.comb += [engine.i_minion.eq(Cat(Const(k, 5), self.i_shire)),
                         engine.i_we.eq(self.i_we & (self.i_all | (self.i_minion == k))),
                         engine.i_reg.eq(self.i_reg), engine.i_data.eq(self.i_data),
                         engine.i_init.eq(self.i_init), engine.i_start.eq(self.i_start),
                         engine.i_verify.eq(self.i_verify), engine.i_now.eq(self.i_now),
                         engine.i_send_cycles.eq(self.i_send_cycles),
                         engine.i_recv_cycles.eq(self.i_recv_cycles),
                         engine.i_window_flits.eq(self.i_window_flits),
                         engine.i_ack_flits.eq(self.i_ack_flits)]
            engines.append(engine)
        m.d.comb += [
            self.o_init_done.eq(Cat(*(e.o_init_done for e in engines)).all()),
            self.o_done.eq(Cat(*(e.o_done for e in engines)).all()),
            self.o_verify_done.eq(Cat(*(e.o_verify_done for e in engines)).all()),
            self.o_progress.eq(Cat(*(e.o_progress for e in engines)).any()),
        ]
        with m.Switch(self.i_rd_addr):
            for i, value in enumerate(v for e in engines for v in engine_counters(e)):
                with m.Case(i):
                    m.d.comb += self.o_rd_data.eq(value)

        xbar_pipes, minions_away = [], []
        for nb in range(nbs):
            def nb_route(m, flit, i, nb=nb):
                if i == mpn:        # from the crossbar: always for this neighbourhood
                    return flit.dst[:5] % mpn if mpn > 1 else 0
                dst_local = flit.dst[:5]
                same = (flit.dst[5:10] == self.i_shire) & (dst_local // mpn == nb)
                if mpn == 1:
                    return mpn
                a = Const(i, lbits)
                pair = (a * mpn + dst_local[:lbits]) if lbits else 0
                fast = same & edges.bit_select(pair, 1) & ~is_barrier_unit_flit(flit)
                return fast.as_unsigned() * dst_local[:lbits] + (~fast).as_unsigned() * mpn

            switch = CreditSwitch(flit_layout=layout, n_in=mpn + 1, n_out=mpn + 1, route=nb_route,
                                  depth=(depth,) * mpn + (xdepth,), out_credits=depth)
            m.submodules[f"nb{nb}"] = switch
            overflow.append(switch.o_overflow)
            for k in range(mpn):
                minion = nb * mpn + k
                engine = engines[minion]
                send = StreamToLink(flit_layout=layout, credits=depth)
                m.submodules[f"send{minion}"] = send
                minions_away.append(send.o_credits_away.any())
                wiring.connect(m, engine.o_req, send.i[VC.REQ])
                wiring.connect(m, engine.o_rsp, send.i[VC.RSP])
                wiring.connect(m, send.o, switch.i[k])
                fast = LinkDelay(flit_layout=layout, capacity=2 * depth)
                m.submodules[f"deliver{minion}"] = fast
                m.d.comb += fast.i_latency.eq(self.i_tree_cycles)
                overflow.append(fast.o_overflow)
                wiring.connect(m, switch.o[k], fast.i)
                arrive = VcInputBuffer(flit_layout=layout, depth=depth)
                m.submodules[f"arrive{minion}"] = arrive
                wiring.connect(m, fast.o, arrive.i)
                wiring.connect(m, arrive.o[VC.REQ], engine.i_req)
                wiring.connect(m, arrive.o[VC.RSP], engine.i_rsp)
                overflow.append(arrive.o_overflow)
            xbar_pipes.append(switch)

        def xbar_route(m, flit, i):
            here = flit.dst[5:10] == self.i_shire
            nb_of = flit.dst[:5] // mpn if nbs > 1 else 0
            return Mux(here, Mux(is_barrier_unit_flit(flit), nbs + 1, nb_of), nbs)

        # crossbar ports: 0..nbs-1 neighbourhoods, nbs the mesh, nbs+1 the barrier unit
        xbar = CreditSwitch(flit_layout=layout, n_in=nbs + 2, n_out=nbs + 2, route=xbar_route,
                            depth=depth, out_credits=(xdepth,) * nbs + (depth,) * 2)
        m.submodules.xbar = xbar
        overflow.append(xbar.o_overflow)
        for nb, switch in enumerate(xbar_pipes):
            wiring.connect(m, switch.o[mpn], xbar.i[nb])
            down = LinkDelay(flit_layout=layout, capacity=2 * xdepth)
            m.submodules[f"xbar_out{nb}"] = down
            m.d.comb += down.i_latency.eq(self.i_xbar_cycles)
            overflow.append(down.o_overflow)
            wiring.connect(m, xbar.o[nb], down.i)
            wiring.connect(m, down.o, switch.i[mpn])
        wiring.connect(m, xbar.o[nbs], wiring.flipped(self.o_mesh))
        wiring.connect(m, wiring.flipped(self.i_mesh), xbar.i[nbs])
        stray = Signal()
        barrier = ShireBarrier(flit_layout=layout)
        m.submodules.barrier = barrier
        m.d.comb += barrier.i_shire.eq(self.i_shire)
        barrier_in = VcInputBuffer(flit_layout=layout, depth=depth)
        barrier_out = StreamToLink(flit_layout=layout, credits=depth)
        m.submodules.barrier_in = barrier_in
        m.submodules.barrier_out = barrier_out
        wiring.connect(m, xbar.o[nbs + 1], barrier_in.i)
        wiring.connect(m, barrier_in.o[VC.RSP], barrier.i)
        # nothing routes requests here; one that arrives is dropped and counted
        m.d.comb += barrier_in.o[VC.REQ].ready.eq(1)
        wiring.connect(m, barrier.o, barrier_out.i[VC.RSP])
        m.d.comb += barrier_out.i[VC.REQ].valid.eq(0)
        wiring.connect(m, barrier_out.o, xbar.i[nbs + 1])
        with m.If(barrier_in.o[VC.REQ].valid):
            m.d.sync += stray.eq(1)
        overflow += [barrier_in.o_overflow, barrier.o_errors.any(), stray]
        m.d.comb += [self.o_overflow.eq(sum(o.as_unsigned() for o in overflow) != 0),
                     self.o_credits_away.eq(Cat(Cat(*minions_away).any(),
                                                *(s.o_credits_away.any() for s in xbar_pipes),
                                                xbar.o_credits_away.any(),
                                                barrier_out.o_credits_away.any()))]
        return m
