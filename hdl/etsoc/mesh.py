"""Top level: the ET-SoC-1 mesh of 36 cells with its 32 compute shires
(seed 002, "Where the shires are: a 6x6 mesh", "What the numbers say" items 1-2).

Every cell has a five-port mesh router clocked by the mesh clock (400 MHz);
routes are dimension-ordered (X first, then Y), so every route is a shortest
path through all 36 cells, the four non-compute cells included.  Each
compute shire meets its router at one point, through clock-domain-crossing
FIFOs into and out of the minion clock (600 MHz) and a mesh stop that keeps
the shire's request flits on the mesh within a window.  A register port
configures the engines once per run, a counter port reads them, and a
watchdog flags a run that stops moving.
"""

import enum

from amaranth import Array, Cat, ClockDomain, Const, Module, Mux, Signal
from amaranth.hdl import DomainRenamer
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from ..common.arbiter import RoundRobin
from ..common.cdc import LinkCdc
from ..common.credit import CreditLink, LinkDelay, LinkPipeline
from ..common.flit import VC, flit_layout
from ..common.shared import SharedModule
from ..common.switch import CreditSwitch
from ..common.watchdog import Watchdog
from .config import MeshConfig
from .engine import MsgKind
from .shire import ENGINE_COUNTERS, MESH_STOP_ACK, Shire, is_mesh_stop_ack

__all__ = ["Port", "MeshRouter", "MeshStop", "ShirePort", "EtSocMesh", "MeshReg",
           "mesh_registers", "make_flit_layout", "counter_names", "ENGINE_COUNTERS", "GLOBAL",
           "ALL_MINIONS"]

#: ``cfg_addr`` bit that selects the mesh-wide registers (:class:`MeshReg`).
GLOBAL = 1 << 14
#: ``cfg_addr`` bit that writes one engine register of every minion at once
#: (``ALL_MINIONS | reg``), as a configuration bus broadcast does.
ALL_MINIONS = 1 << 15


class MeshReg(enum.IntEnum):
    """Mesh-wide run-time registers at ``cfg_addr = GLOBAL | reg`` (8 bits each):
    the stage latencies the seed does not disclose (minion cycles), the
    engines' send window, the ACK spacing and the mesh stops' window (flits)."""

    SEND_CYCLES = 0      #: engine_send_cycles
    RECV_CYCLES = 1      #: engine_recv_cycles
    TREE_CYCLES = 2      #: tree_edge_cycles
    XBAR_CYCLES = 3      #: crossbar_cycles
    PORT_CYCLES = 4      #: mesh_port_cycles
    WINDOW_FLITS = 5     #: send_window_flits
    ACK_FLITS = 6        #: ack_flits
    MESH_WINDOW_FLITS = 7  #: mesh_window_flits


def mesh_registers(cfg):
    """``{MeshReg: value}`` of the run-time latency and window fields of ``cfg``."""
    return {MeshReg.SEND_CYCLES: cfg.engine_send_cycles, MeshReg.RECV_CYCLES: cfg.engine_recv_cycles,
            MeshReg.TREE_CYCLES: cfg.tree_edge_cycles, MeshReg.XBAR_CYCLES: cfg.crossbar_cycles,
            MeshReg.PORT_CYCLES: cfg.mesh_port_cycles,
            MeshReg.WINDOW_FLITS: cfg.send_window_flits, MeshReg.ACK_FLITS: cfg.ack_flits,
            MeshReg.MESH_WINDOW_FLITS: cfg.mesh_window_flits}


class Port(enum.IntEnum):
    """Router port index."""

    LOCAL = 0  #: the cell's shire (or nothing, in a non-compute cell)
    EAST = 1   #: x + 1
    WEST = 2   #: x - 1
    NORTH = 3  #: y - 1
    SOUTH = 4  #: y + 1


def make_flit_layout(cfg):
    """Flit layout of the mesh: ``flit_bytes`` of data, 10-bit global minion
    indices in ``src``/``dst``, and in ``addr`` the flit's index in its message
    modulo 256 (the receiver uses only its low bits, the word in the register
    file)."""
    return flit_layout(data_bits=cfg.flit_bytes * 8, addr_bits=8, node_bits=10,
                       route_bits=1, mask_bits=1)


class MeshRouter(wiring.Component):
    """Five-port mesh router; its cell ``(i_x, i_y)`` is a port, so one
    Verilog module serves every router (:class:`~hdl.common.shared.SharedModule`).
    Clock: mesh clock (domain ``sync``; the top renames it to ``mesh``).

    An input-queued crossbar (:class:`~hdl.common.switch.CreditSwitch`) with a
    FIFO per VC (request, response), round-robin output arbitration and
    credits, followed by ``cfg.router_hop_mesh_cycles - 2`` link stages, so a
    flit takes ``router_hop_mesh_cycles`` mesh cycles per hop (4 by default:
    "4 mesh cycles each way at 400 MHz", seed 002 "What the numbers say" 2).

    Routing is dimension-ordered: X until the destination column, then Y,
    then the local port.  The destination cell is the placement of the flit's
    destination shire (``dst[9:5]``).

    Parameters
    ----------
    cfg : MeshConfig
        Uses ``placement``, ``mesh_cols``, ``mesh_rows``,
        ``router_hop_mesh_cycles`` and ``link_buffer_flits``.
    flit_layout : StructLayout
        Flit layout (``node_bits`` 10).
    checks : bool
        Build the route check, ``o_misrouted`` (``False`` for synthesis: it
        is a checker, not part of the router).

    Members
    -------
    i_x, i_y : In(ceil(log2(max(mesh_cols, mesh_rows, 2))))
        The router's cell; hold them constant.
    i : In(CreditLink(flit_layout)).array(5)
        Input links, indexed by :class:`Port`.
    o : Out(CreditLink(flit_layout)).array(5)
        Output links, indexed by :class:`Port`.
    o_flits, o_stalls : Out(32).array(5)
        Flits sent and stall cycles per output (mesh cycles).
    o_occupied : Out(10)
        Bit ``port * 2 + vc``: that input buffer holds a flit.
    o_no_credit : Out(10)
        Bit ``port * 2 + vc``: that output holds no credit.
    o_wants : Out(10).array(5)
        Bit ``vc * 5 + out`` of element ``port``: a flit of VC ``vc`` at input
        ``port`` waits for output ``out`` (the stall snapshot of
        :class:`~hdl.common.switch.CreditSwitch`).
    o_credits_away : Out(10)
        Bit ``port * 2 + vc``: that output does not hold all its credits (all
        0 once the mesh is at rest).
    o_overflow : Out(1)
        Sticky: a buffer overflowed (credit protocol broken).
    o_misrouted : Out(5)
        Sticky, bit ``port`` (0 without ``checks``): a flit left that output
        when dimension order would not send it there.  East only while its
        destination column is east of the router, west likewise, north and
        south only in its destination column, and local only at its
        destination cell.  Checked on what leaves the crossbar, apart from
        the route the inputs choose, so a route that is one hop too long or
        takes Y before X (same hop count, same latency) is caught.
    """

    def __init__(self, cfg, flit_layout, *, checks=True):
        self.cfg = cfg
        self.flit_layout = flit_layout
        self.checks = bool(checks)
        link = CreditLink(flit_layout)
        coord = range(max(cfg.mesh_cols, cfg.mesh_rows, 2))   # at least one bit wide
        super().__init__({
            "i_x": In(coord), "i_y": In(coord),
            "i": In(link).array(5), "o": Out(link).array(5),
            "o_flits": Out(32).array(5), "o_stalls": Out(32).array(5), "o_overflow": Out(1),
            "o_occupied": Out(10), "o_no_credit": Out(10), "o_wants": Out(10).array(5),
            "o_credits_away": Out(10), "o_misrouted": Out(5),
        })

    def destination_cell(self, flit):
        """``(x, y)``, values of the cell of ``flit``'s destination shire
        (``dst[9:5]``) in ``cfg.placement``."""
        coord = range(max(self.cfg.mesh_cols, self.cfg.mesh_rows, 2))   # at least one bit wide
        shire = flit.dst[5:10]
        return (Array(Const(c[0], coord) for c in self.cfg.placement)[shire],
                Array(Const(c[1], coord) for c in self.cfg.placement)[shire])

    def route(self, m, flit, i):
        """The output, a ``Signal(Port)`` driven in ``m``, that input ``i``
        sends ``flit`` to: dimension order, X first, then Y, then local."""
        tx, ty = self.destination_cell(flit)
        out = Signal(Port, name=f"route_{i}")
        with m.If(tx > self.i_x):
            m.d.comb += out.eq(Port.EAST)
        with m.Elif(tx < self.i_x):
            m.d.comb += out.eq(Port.WEST)
        with m.Elif(ty < self.i_y):
            m.d.comb += out.eq(Port.NORTH)
        with m.Elif(ty > self.i_y):
            m.d.comb += out.eq(Port.SOUTH)
        with m.Else():
            m.d.comb += out.eq(Port.LOCAL)
        return out

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        depth = cfg.link_buffer_flits
        m.submodules.switch = switch = CreditSwitch(
            flit_layout=self.flit_layout, n_in=5, n_out=5, route=self.route, depth=depth,
            out_credits=depth)
        for p in range(5):
            wiring.connect(m, wiring.flipped(self.i[p]), switch.i[p])
            pipe = LinkPipeline(flit_layout=self.flit_layout,
                                stages=cfg.router_hop_mesh_cycles - 2)
            m.submodules[f"link{p}"] = pipe
            wiring.connect(m, switch.o[p], pipe.i)
            wiring.connect(m, pipe.o, wiring.flipped(self.o[p]))
            m.d.comb += [self.o_flits[p].eq(switch.o_flits[p]),
                         self.o_stalls[p].eq(switch.o_stalls[p]),
                         self.o_wants[p].eq(switch.o_wants[p])]
        m.d.comb += [self.o_overflow.eq(switch.o_overflow),
                     self.o_occupied.eq(switch.o_occupied),
                     self.o_no_credit.eq(switch.o_no_credit),
                     self.o_credits_away.eq(switch.o_credits_away)]
        if self.checks:
            for p in Port:
                out = switch.o[p]
                tx, ty = self.destination_cell(out.flit)
                here_x, here_y = tx == self.i_x, ty == self.i_y
                allowed = {Port.EAST: tx > self.i_x, Port.WEST: tx < self.i_x,
                           Port.NORTH: here_x & (ty < self.i_y),
                           Port.SOUTH: here_x & (ty > self.i_y),
                           Port.LOCAL: here_x & here_y}[p]
                with m.If(out.valid & ~allowed):
                    m.d.sync += self.o_misrouted[p].eq(1)
        return m


def counter_names(cfg):
    """Names of the readable counters, in ``rd_addr`` order.

    ``cycles`` and ``idle_cycles`` (cycles since the start, and since an
    engine or a router last moved a flit) count minion cycles (600 MHz), as
    do the engines' time stamps (``first_rx``, ``last_rx``,
    ``first_stray_cycle``).
    ``s<shire>.m<k>.state`` packs, low bit first: done, init_done, verify_done,
    sleeping (in a credit wait with no credit), window_broken (sticky: more
    flits in flight than ``send_window_flits``); bits 8 to 23 hold the
    credits received and not yet taken.
    ``errors`` holds the stray flits counted in bits 0-15 and the first one's
    ``{valid, source[9:0]}`` in bits 16-26, ``first_stray_cycle`` the minion
    cycle (since reset) it arrived at;
    ``ready_from`` / ``blocked_ready`` are ``{valid, source[9:0]}``;
    ``tx_sum`` / ``rx_sum`` are :func:`~hdl.etsoc.engine.flit_sum` totals.
    ``router_<x>_<y>.occupied``, ``.no_credit`` and ``.in<port>.wants`` are
    the router's stall snapshot (see :class:`MeshRouter`), sampled from the
    mesh clock domain: read them only once the mesh has stopped moving.
    ``router_<x>_<y>.credits_away``, ``s<s>.credits_away`` (see
    :class:`~hdl.etsoc.shire.Shire`) and ``s<s>.port_credits_away`` (see
    :class:`ShirePort`) name the senders not holding all their credits: all
    0 once the mesh is at rest.  ``router_<x>_<y>.misrouted`` is the
    router's sticky route check (:attr:`MeshRouter.o_misrouted`, one bit per
    output) and ``misrouted`` is set while any of them is: 0 always.
    ``stops_busy`` has bit ``s`` set while shire ``s``'s mesh stop has
    request flits in flight or owes an ACK (:attr:`ShirePort.o_idle` low): 0
    once the mesh is at rest.
    """
    names = ["cycles", "stuck", "idle_cycles", "overflow", "misrouted", "stops_busy"]
    for s in range(cfg.compute_shires):
        for k in range(cfg.minions_per_shire):
            names += [f"s{s}.m{k}.{c}" for c in ENGINE_COUNTERS]
    for y in range(cfg.mesh_rows):
        for x in range(cfg.mesh_cols):
            names += [f"router_{x}_{y}.occupied", f"router_{x}_{y}.no_credit",
                      f"router_{x}_{y}.credits_away", f"router_{x}_{y}.misrouted"]
            names += [f"router_{x}_{y}.in{p}.wants" for p in range(len(Port))]
    for s in range(cfg.compute_shires):
        names += [f"s{s}.credits_away", f"s{s}.port_credits_away"]
    return names


class MeshStop(wiring.Component):
    """A shire's mesh stop, between its clock crossing and its router's local
    port: the window of request flits the shire may have on the mesh, and the
    acknowledgements that close it (seed 002, "Message size and bandwidth":
    "1 KB round trips between all 496 shire pairs add 12 cycles per hop up to
    5 hops and 27-36 per hop beyond, so the sender seems to have a limited
    number of packets in flight").  Clock: mesh clock (domain ``sync``; the
    :class:`ShirePort` renames it to ``mesh``).

    Sending side: the flits bound for the router, ``i_up``, pass to ``o_up``
    unchanged in the same cycle.  The stop counts the request-channel flits
    that leave and are not yet acknowledged, and hands a request credit the
    router returns back upstream only while those flits plus the request
    credits upstream holds stay within ``i_window_flits``.  So the window adds
    no latency and never holds a response flit (READY, ACK, credit).

    Receiving side: ``i_arrive`` taps the flits the router hands the shire.
    Each request flit raises its source shire's owed count; a count goes back
    to that shire's stop as one ``ACK`` flit on ``o`` (minion 0 to minion 0,
    ``data[MESH_STOP_ACK]`` set, the count in ``data[0:16]``) once it reaches
    ``i_ack_flits`` or when a message's last flit arrives.  Sources with
    counts due take turns, round robin.  An ACK to this stop is counted as it
    passes the tap; the :class:`ShirePort` then drops it.
    With ``i_window_flits`` 0 nothing is counted and no ACK is sent.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout (``node_bits`` 10).
    credits : int
        Request credits upstream starts with (the router's local input
        buffer, ``link_buffer_flits``).

    Members
    -------
    i_shire : In(5)
        Logical shire ID, the source of the ACKs sent.  Hold it constant.
    i_window_flits : In(8)
        Request flits on the mesh unacknowledged, at most, once the first
        ``credits`` have gone (0: no window).  Change it only while
        ``o_idle``.
    i_ack_flits : In(8)
        Request flits taken in from one source shire per ACK (1 or more).
        Counts below it wait for a message's last flit, so the counts every
        other shire may hold back, ``(i_ack_flits - 1)`` each, must sum to
        less than the window (:class:`~hdl.etsoc.config.MeshConfig` checks).
    i_up : In(CreditLink(flit_layout)); o_up : Out(CreditLink(flit_layout))
        Flits from the clock crossing, and the link on to the router.
    i_arrive_valid : In(1); i_arrive : In(flit_layout)
        A flit the router hands the shire this cycle.
    o : Out(stream.Signature(flit_layout))
        ACK flits to other shires' stops (response channel).
    o_in_flight : Out(16)
        Request flits sent on the mesh and not yet acknowledged.
    o_idle : Out(1)
        Nothing in flight and no count owed (registered).
    o_credits_away : Out(1)
        The router's ``credits`` request credits are not all accounted for:
        those upstream holds and those kept back here do not sum to
        ``credits`` (0 once the mesh is at rest; with a window smaller than
        ``credits`` some stay kept back, so upstream alone may hold fewer).
    o_error : Out(1)
        Sticky: the window did not hold (the flits in flight and the request
        credits upstream holds summed to more than ``i_window_flits``, or
        than ``credits`` if that is more), an ACK counted more flits than
        were in flight, or a count owed to a source shire outgrew its counter
        (only possible when stops' windows differ or one changed while flits
        were on the mesh).

    Raises
    ------
    ValueError
        If ``credits`` is not a positive integer.
    """

    def __init__(self, *, flit_layout, credits):
        if not isinstance(credits, int) or credits < 1:
            raise ValueError(f"credits must be a positive integer, not {credits!r}")
        self.flit_layout = flit_layout
        self.credits = credits
        link = CreditLink(flit_layout)
        super().__init__({"i_shire": In(5), "i_window_flits": In(8), "i_ack_flits": In(8),
                          "i_up": In(link), "o_up": Out(link),
                          "i_arrive_valid": In(1), "i_arrive": In(flit_layout),
                          "o": Out(stream.Signature(flit_layout)), "o_in_flight": Out(16),
                          "o_idle": Out(1), "o_error": Out(1), "o_credits_away": Out(1)})

    def elaborate(self, platform):
        m = Module()
        window = self.i_window_flits
        on = window != 0
        arrive = self.i_arrive
        arriving = self.i_arrive_valid & on
        # --- sending side: the window, by holding back request credits ---
        m.d.comb += [self.o_up.valid.eq(self.i_up.valid), self.o_up.flit.eq(self.i_up.flit),
                     self.i_up.credit[VC.RSP].eq(self.o_up.credit[VC.RSP])]
        sent = self.i_up.valid & (self.i_up.flit.vc == VC.REQ)
        returned = self.o_up.credit[VC.REQ]
        held = Signal(range(self.credits + 1), init=self.credits)   # upstream's
        pending = Signal(range(self.credits + 1))                    # kept back here
        in_flight = self.o_in_flight
        # the router hands this port only flits for this shire
        ack_here = arriving & is_mesh_stop_ack(arrive)
        acked = Mux(ack_here, arrive.data[:16], 0)
        give = Signal()
        m.d.comb += give.eq((returned | (pending != 0)) & (~on | (in_flight + held + 1 <= window)))
        m.d.comb += [self.i_up.credit[VC.REQ].eq(give),
                     self.o_credits_away.eq(held + pending != self.credits)]
        m.d.sync += [held.eq(held - sent + give), pending.eq(pending + returned - give),
                     in_flight.eq(in_flight + (sent & on) - acked)]
        with m.If(ack_here & (acked > in_flight + (sent & on))):
            m.d.sync += self.o_error.eq(1)
        # A credit goes back upstream only while the sum stays within the
        # window, and sending or an ACK never raises it: it never exceeds
        # the window, or the credits upstream starts with if those are more.
        with m.If(on & (in_flight + held > Mux(window > self.credits, window, self.credits))):
            m.d.sync += self.o_error.eq(1)

        # --- receiving side: a count owed to each source shire ---
        took = arriving & (arrive.vc == VC.REQ)
        source = arrive.src[5:10]
        # A source's count never exceeds its flits in flight, which with its
        # upstream's credits stay within max(i_window_flits, credits), as long
        # as every stop has the same window and it changes only while the mesh
        # is quiet: 8 bits for the 8-bit window, wider only for more credits.
        # A count that would wrap all the same is an error.
        most = max(255, self.credits)
        owed = Array(Signal(range(most + 1), name=f"owed{s}") for s in range(32))
        flush = Signal(32)
        m.submodules.pick = pick = RoundRobin(32)
        for s in range(32):
            m.d.comb += pick.requests[s].eq((owed[s] != 0)
                                            & ((owed[s] >= self.i_ack_flits) | flush[s]))
        to = pick.grant_index
        out = self.o.payload
        m.d.comb += [self.o.valid.eq(pick.valid), pick.take.eq(self.o.ready),
                     out.kind.eq(MsgKind.ACK), out.vc.eq(VC.RSP), out.last.eq(1),
                     out.src.eq(Cat(Const(0, 5), self.i_shire)), out.dst.eq(Cat(Const(0, 5), to)),
                     out.data.eq(owed[to] | (1 << MESH_STOP_ACK))]
        acked_out = self.o.valid & self.o.ready
        for s in range(32):
            mine = took & (source == s)
            gone = acked_out & (to == s)
            m.d.sync += owed[s].eq(Mux(gone, 0, owed[s]) + mine)
            with m.If(mine & ~gone & (owed[s] == most)):
                m.d.sync += self.o_error.eq(1)
            with m.If(mine & arrive.last):
                m.d.sync += flush[s].eq(1)
            with m.Elif(gone):
                m.d.sync += flush[s].eq(0)
        # registered, as it crosses into the minion clock
        m.d.sync += self.o_idle.eq((in_flight == 0) & ~Cat(*(o != 0 for o in owed)).any())
        return m


class ShirePort(wiring.Component):
    """Where a shire meets its router: the shire-to-mesh stage each way and the
    clock-domain crossings between the minion clock (domain ``sync``, 600
    MHz) and the mesh clock (domain ``mesh``, 400 MHz); seed 002, "Where the
    shires are": each shire meets the mesh at a single point.  One Verilog
    module serves every shire's port (:class:`~hdl.common.shared.SharedModule`).

    Up: ``i_up`` -> :class:`~hdl.common.credit.LinkDelay` of ``i_latency``
    minion cycles -> :class:`~hdl.common.cdc.LinkCdc` -> :class:`MeshStop`
    -> ``o_up``; down the mirror image, the mesh stop tapping the flits as
    they leave the router.  The stop's ACKs join the response channel at the
    crossing's mesh-clock end; an ACK arriving for this stop ends at the
    tap, its response credit going straight back to the router.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout (``node_bits`` 10).
    depth : int
        Credits per VC on each side (``link_buffer_flits``).

    Members
    -------
    i_up : In(CreditLink(flit_layout))
        From the shire (minion clock).
    o_up : Out(CreditLink(flit_layout))
        To the router's local input (mesh clock).
    i_down : In(CreditLink(flit_layout))
        From the router's local output (mesh clock).
    o_down : Out(CreditLink(flit_layout))
        To the shire (minion clock).
    i_latency : In(8)
        The shire-to-mesh stage, minion cycles (``mesh_port_cycles``).
    i_shire : In(5)
        Logical shire ID (hold it constant).
    i_window_flits, i_ack_flits : In(8)
        The mesh stop's window and ACK spacing (``mesh_window_flits``,
        ``ack_flits``; minion clock, synchronised into the mesh clock: change
        them only while ``o_idle``).
    o_idle : Out(1)
        The mesh stop has nothing in flight and owes no ACK (synchronised
        into the minion clock).
    o_overflow : Out(1)
        Sticky: a buffer overflowed (credit protocol broken), or the mesh
        stop's window did not hold, or it was acknowledged more flits than it
        sent or counted more than it can hold (:class:`MeshStop` ``o_error``).
    o_credits_away : Out(4)
        A sender towards the router or the shire does not hold all its
        credits; all 0 at rest.  Bit 0 (mesh clock): the router's request
        credits, held by the up crossing or kept back by the mesh stop's
        window (:attr:`MeshStop.o_credits_away`); bit 1 (mesh clock): the up
        crossing's response credits; bits 2-3 (minion clock): the down
        crossing's request and response credits.
    """

    def __init__(self, *, flit_layout, depth):
        self.flit_layout, self.depth = flit_layout, depth
        link = CreditLink(flit_layout)
        super().__init__({"i_up": In(link), "o_up": Out(link), "i_down": In(link),
                          "o_down": Out(link), "i_latency": In(8), "i_shire": In(5),
                          "i_window_flits": In(8), "i_ack_flits": In(8), "o_idle": Out(1),
                          "o_overflow": Out(1), "o_credits_away": Out(4)})

    def elaborate(self, platform):
        m = Module()
        layout, depth = self.flit_layout, self.depth
        m.submodules.up_pipe = up_pipe = LinkDelay(flit_layout=layout, capacity=2 * depth)
        m.submodules.up = up = LinkCdc(flit_layout=layout, depth=depth, out_credits=depth,
                                       i_domain="sync", o_domain="mesh", inject_vc=VC.RSP)
        m.submodules.stop = stop = DomainRenamer("mesh")(
            MeshStop(flit_layout=layout, credits=depth))
        for name in ("i_shire", "i_window_flits", "i_ack_flits"):
            m.submodules[f"sync_{name}"] = FFSynchronizer(getattr(self, name),
                                                           getattr(stop, name), o_domain="mesh")
        m.submodules.sync_idle = FFSynchronizer(stop.o_idle, self.o_idle, o_domain="sync")
        stop_error = Signal()
        m.submodules.sync_error = FFSynchronizer(stop.o_error, stop_error, o_domain="sync")
        m.submodules.down = down = LinkCdc(flit_layout=layout, depth=depth, out_credits=depth,
                                           i_domain="mesh", o_domain="sync")
        m.submodules.down_pipe = down_pipe = LinkDelay(flit_layout=layout, capacity=2 * depth)
        m.d.comb += [up_pipe.i_latency.eq(self.i_latency),
                     down_pipe.i_latency.eq(self.i_latency),
                     self.o_overflow.eq(up_pipe.o_overflow | down_pipe.o_overflow
                                        | up.o_overflow | down.o_overflow | stop_error),
                     self.o_credits_away.eq(Cat(stop.o_credits_away, up.o_credits_away[VC.RSP],
                                                down.o_credits_away))]
        wiring.connect(m, wiring.flipped(self.i_up), up_pipe.i)
        wiring.connect(m, up_pipe.o, up.i)
        wiring.connect(m, up.o, stop.i_up)
        wiring.connect(m, stop.o_up, wiring.flipped(self.o_up))
        wiring.connect(m, stop.o, up.i_inject)
        m.d.comb += [stop.i_arrive_valid.eq(self.i_down.valid), stop.i_arrive.eq(self.i_down.flit)]
        # The stop's ACKs end here, counted: they take no place in the
        # crossing or the shire.  Each returns its response credit to the
        # router at once; when the crossing returns one in the same cycle, one
        # of the two waits in ``late`` (one credit a cycle goes back).  The
        # router holds ``depth`` response credits, so at most that many wait.
        drop = self.i_down.valid & (self.i_down.flit.vc == VC.RSP) & is_mesh_stop_ack(
            self.i_down.flit)
        late = Signal(range(depth + 1))
        back = down.i.credit[VC.RSP] | drop | (late != 0)
        m.d.comb += [down.i.valid.eq(self.i_down.valid & ~drop), down.i.flit.eq(self.i_down.flit),
                     self.i_down.credit[VC.REQ].eq(down.i.credit[VC.REQ]),
                     self.i_down.credit[VC.RSP].eq(back)]
        m.d.mesh += late.eq(late + down.i.credit[VC.RSP] + drop - back)
        wiring.connect(m, down.o, down_pipe.i)
        wiring.connect(m, down_pipe.o, wiring.flipped(self.o_down))
        return m


class EtSocMesh(wiring.Component):
    """The mesh (6x6 by default) with its compute shires (32 by default).  Clocks: ``clk`` (minion,
    600 MHz) and ``mesh_clk`` (mesh, 400 MHz), each with its reset; assert both
    resets together.

    Parameters
    ----------
    cfg : MeshConfig
        Structural fields shape the RTL (see :class:`MeshConfig`).
    checks : bool
        Build the minions' data checks and the routers' route checks
        (``False`` for synthesis, see :class:`~hdl.etsoc.engine.MinionEngine`
        and :class:`MeshRouter`; then ``verify_done`` never rises).

    Members
    -------
    mesh_clk, mesh_rst : In(1)
        Clock and synchronous reset of the mesh domain (400 MHz).  The reset
        passes one flip-flop clocked by ``mesh_clk``: the first ``mesh_clk``
        edge after ``mesh_rst`` falls still resets the mesh, which runs from
        the second.  The minion domain's ``clk`` and ``rst`` are added by the
        Verilog back end, which stages ``rst`` the same way
        (:func:`sim.build.convert_hierarchy`); Amaranth's simulator, which
        drives that domain itself, does not.
    cfg_we : In(1)
        Write ``cfg_data`` to register ``cfg_addr``.
    cfg_addr : In(16)
        ``{0, 0, minion[9:0], reg[3:0]}``: register ``reg``
        (:class:`~hdl.etsoc.engine.EngineReg`) of global minion ``minion``;
        ``{1, 0, 10'b0, reg[3:0]}`` (:data:`ALL_MINIONS` ``| reg``): register
        ``reg`` of every minion in one write;
        ``{0, 1, 10'b0, reg[3:0]}`` (:data:`GLOBAL` ``| reg``): a :class:`MeshReg`.
    cfg_data : In(32)
        Register value.
    ctl_init, ctl_start, ctl_verify : In(1)
        One-cycle pulses: fill every register file; start every engine;
        checksum every register file.
    init_done, done, verify_done : Out(1)
        Every engine filled and every mesh stop idle (:class:`MeshStop`: the
        last run's ACKs home, so a run never starts with the window part
        used); every engine's messages sent and received; every checksum
        ready.
    stuck : Out(1)
        Watchdog: no engine and no router moved a flit for
        ``watchdog_cycles`` minion cycles while the run was not done.
    rd_addr : In(16)
        Counter index (see :func:`counter_names`).
    rd_data : Out(32)
        Counter value (combinational).
    """

    def __init__(self, cfg=None, *, checks=True):
        self.cfg = cfg or MeshConfig()
        self.checks = bool(checks)
        super().__init__({
            "mesh_clk": In(1), "mesh_rst": In(1),
            "cfg_we": In(1), "cfg_addr": In(16), "cfg_data": In(32),
            "ctl_init": In(1), "ctl_start": In(1), "ctl_verify": In(1),
            "init_done": Out(1), "done": Out(1), "verify_done": Out(1), "stuck": Out(1),
            "rd_addr": In(16), "rd_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.domains.mesh = mesh = ClockDomain("mesh")
        # The mesh clock's reset goes through one flip-flop of that clock before
        # it fans out, as the top's minion-clock reset does (sim.build): the
        # mesh runs from the second mesh_clk edge after mesh_rst falls.
        mesh_rst_staged = Signal(init=1, reset_less=True)
        m.d.mesh += mesh_rst_staged.eq(self.mesh_rst)
        m.d.comb += [mesh.clk.eq(self.mesh_clk), mesh.rst.eq(mesh_rst_staged)]
        layout = make_flit_layout(cfg)
        depth = cfg.link_buffer_flits

        routers = {}
        for y in range(cfg.mesh_rows):
            for x in range(cfg.mesh_cols):
                router = SharedModule(MeshRouter, "etsoc_mesh_router", cfg=cfg,
                                      flit_layout=layout, checks=self.checks)
                m.submodules[f"router_{x}_{y}"] = DomainRenamer("mesh")(router)
                m.d.comb += [router.i_x.eq(x), router.i_y.eq(y)]
                routers[x, y] = router
        for (x, y), router in routers.items():
            for port, (dx, dy), back in ((Port.EAST, (1, 0), Port.WEST),
                                         (Port.SOUTH, (0, 1), Port.NORTH)):
                other = routers.get((x + dx, y + dy))
                if other is not None:
                    wiring.connect(m, router.o[port], other.i[back])
                    wiring.connect(m, other.o[back], router.i[port])

        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        latency = {reg: Signal(8, name=f"latency_{reg.name.lower()}") for reg in MeshReg}
        with m.If(self.cfg_we & self.cfg_addr[14]):
            with m.Switch(self.cfg_addr[:4]):
                for reg, sig in latency.items():
                    with m.Case(reg):
                        m.d.sync += sig.eq(self.cfg_data)
        shires = []
        stops_idle, ports = [], []
        overflow = [r.o_overflow for r in routers.values()]
        for s, cell in enumerate(cfg.placement):
            shire = SharedModule(Shire, "etsoc_shire", cfg=cfg, flit_layout=layout,
                                 checks=self.checks)
            m.submodules[f"shire{s}"] = shire
            m.d.comb += [shire.i_shire.eq(s),
                         shire.i_we.eq(self.cfg_we & ~self.cfg_addr[14]
                                       & (self.cfg_addr[15] | (self.cfg_addr[9:14] == s))),
                         shire.i_all.eq(self.cfg_addr[15]),
                         shire.i_minion.eq(self.cfg_addr[4:9]),
                         shire.i_reg.eq(self.cfg_addr[:4]), shire.i_data.eq(self.cfg_data),
                         shire.i_init.eq(self.ctl_init), shire.i_start.eq(self.ctl_start),
                         shire.i_verify.eq(self.ctl_verify), shire.i_now.eq(now),
                         shire.i_send_cycles.eq(latency[MeshReg.SEND_CYCLES]),
                         shire.i_recv_cycles.eq(latency[MeshReg.RECV_CYCLES]),
                         shire.i_tree_cycles.eq(latency[MeshReg.TREE_CYCLES]),
                         shire.i_xbar_cycles.eq(latency[MeshReg.XBAR_CYCLES]),
                         shire.i_window_flits.eq(latency[MeshReg.WINDOW_FLITS]),
                         shire.i_ack_flits.eq(latency[MeshReg.ACK_FLITS])]
            shires.append(shire)
            overflow.append(shire.o_overflow)
            port = SharedModule(ShirePort, "etsoc_shire_port", domains=("sync", "mesh"),
                                flit_layout=layout, depth=depth)
            m.submodules[f"port{s}"] = port
            m.d.comb += [port.i_latency.eq(latency[MeshReg.PORT_CYCLES]), port.i_shire.eq(s),
                         port.i_window_flits.eq(latency[MeshReg.MESH_WINDOW_FLITS]),
                         port.i_ack_flits.eq(latency[MeshReg.ACK_FLITS])]
            stops_idle.append(port.o_idle)
            ports.append(port)
            overflow.append(port.o_overflow)
            wiring.connect(m, shire.o_mesh, port.i_up)
            wiring.connect(m, port.o_up, routers[cell].i[Port.LOCAL])
            wiring.connect(m, routers[cell].o[Port.LOCAL], port.i_down)
            wiring.connect(m, port.o_down, shire.i_mesh)

        m.d.comb += [
            self.init_done.eq(Cat(*(sh.o_init_done for sh in shires), *stops_idle).all()),
            self.done.eq(Cat(*(sh.o_done for sh in shires)).all()),
            self.verify_done.eq(Cat(*(sh.o_verify_done for sh in shires)).all()),
        ]

        # --- watchdog -----------------------------------------------------
        running = Signal()
        with m.If(self.ctl_init):
            m.d.sync += running.eq(0)
        with m.Elif(self.ctl_start):
            m.d.sync += running.eq(1)
        # A flit leaving a router is progress too: with a mesh clock slow
        # against the minions' a long route leaves every engine quiet for
        # many minion cycles while its flits move.  The mesh-clock toggle
        # crosses to the minion clock in two flip-flops; a change seen there
        # is progress (a mesh far faster than the minions may toggle twice
        # between samples, but then its routes are short in minion cycles).
        mesh_moved = Signal()
        with m.If(Cat(*(r.o[p].valid for r in routers.values() for p in Port)).any()):
            m.d.mesh += mesh_moved.eq(~mesh_moved)
        moved_seen, moved_last = Signal(), Signal()
        m.submodules.sync_mesh_moved = FFSynchronizer(mesh_moved, moved_seen, o_domain="sync")
        m.d.sync += moved_last.eq(moved_seen)
        m.submodules.watchdog = watchdog = Watchdog(cfg.watchdog_cycles)
        m.d.comb += [watchdog.i_clear.eq(self.ctl_init | self.ctl_start),
                     watchdog.i_active.eq(running & ~self.done),
                     watchdog.i_progress.eq(Cat(*(sh.o_progress for sh in shires)).any()
                                            | (moved_seen != moved_last)),
                     self.stuck.eq(watchdog.o_stuck)]

        # --- counters -------------------------------------------------------
        # Engine counters are read through their shire: shire s holds indices
        # base + s * per_shire onwards (counter_names order).
        head = [watchdog.o_cycles, self.stuck, watchdog.o_idle, Cat(*overflow).any(),
                Cat(*(r.o_misrouted for r in routers.values())).any(),
                ~Cat(*stops_idle)]
        per_shire = cfg.minions_per_shire * len(ENGINE_COUNTERS)
        tail_base = len(head) + len(shires) * per_shire
        tail = []
        for y in range(cfg.mesh_rows):
            for x in range(cfg.mesh_cols):
                router = routers[x, y]
                tail += [router.o_occupied, router.o_no_credit, router.o_credits_away,
                         router.o_misrouted, *router.o_wants]
        for shire, port in zip(shires, ports, strict=True):
            tail += [shire.o_credits_away, port.o_credits_away]
        assert tail_base + len(tail) == len(counter_names(cfg))
        for s, shire in enumerate(shires):
            m.d.comb += shire.i_rd_addr.eq(self.rd_addr - (len(head) + s * per_shire))
        with m.Switch(self.rd_addr):
            for i, v in enumerate(head):
                with m.Case(i):
                    m.d.comb += self.rd_data.eq(v)
            for i, v in enumerate(tail):
                with m.Case(tail_base + i):
                    m.d.comb += self.rd_data.eq(v)
            with m.Default():
                for s, shire in enumerate(shires):
                    base = len(head) + s * per_shire
                    with m.If((self.rd_addr >= base) & (self.rd_addr < base + per_shire)):
                        m.d.comb += self.rd_data.eq(shire.o_rd_data)
        return m
