"""The seed's machine: eight GPUs under two PCIe switches, one per socket, two
root complexes with their root ports and host memories, and the link between
the sockets (seed 001, "1. Introduction":
"eight GPUs on a host, four per side, each group reaching a single CPU
through a PCIe switch"; "3. Experimental Setup": "dual-socket with eight GPUs
on PCIe 4.0 x16").

A test bench programs the GPUs' copies and the timing registers through
``cfg_*``, pulses ``ctl_start``, waits for ``done`` (or ``stuck``) and reads
counters through ``rd_addr`` / ``rd_data``.
"""

import enum

from amaranth import Array, Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.shared import SharedModule
from ..common.watchdog import Watchdog
from .config import GT_PER_S, gpu_switch
from .gpu import GpuEndpoint
from .host import HostMemory
from .link import LinkTiming, PcieLink
from .switch import Crossbar, RootPort, SocketLink, SocketReadTracker
from .tlp import HOST_NODE

__all__ = ["SysReg", "GLOBAL", "PcieSystem", "system_registers", "counter_names",
           "GPU_COUNTERS", "HOST_COUNTERS", "link_names", "crossbars"]

#: ``cfg_addr`` bit selecting the machine-wide registers (:class:`SysReg`).
GLOBAL = 1 << 8


class SysReg(enum.IntEnum):
    """Machine-wide run-time registers at ``cfg_addr = GLOBAL | reg``."""

    LANE_BYTES = 0         #: link bytes per cycle (lanes x GT/s / 8)
    BLOCKS_PER_PERIOD = 1  #: 128b/130b blocks per 65 cycles (GT/s / 2)
    SKP_BLOCKS = 2         #: skp_interval_blocks
    SKP_CYCLES = 3         #: cycles of one SKP ordered set (128 / GT/s)
    ACK_EVERY = 4          #: ack_every_tlps
    FC_EVERY = 5           #: update_fc_every_credits
    LINK_LATENCY = 6       #: link_latency_cycles
    SWITCH_LATENCY = 7     #: switch_latency_cycles
    SOCKET_BYTES = 8       #: socket_bytes_per_cycle
    SOCKET_OVERHEAD = 9    #: socket_tlp_overhead_bytes
    SOCKET_LATENCY = 10    #: socket_latency_cycles
    HOST_BYTES = 11        #: root_host_bytes_per_cycle
    CHUNK_LOG2 = 12        #: log2 of staging_chunk_bytes
    EVENT_CYCLES = 13      #: host_event_cycles
    RETRAIN = 14           #: retrained_gpu + 1 (0: none) | lane bytes << 8 | blocks per
                           #: period << 16 | SKP cycles << 24, of the retrained link,
                           #: | 1 << 31 when it is slower than the others (its
                           #: switch port then stores and forwards)
    SOCKET_READ_BYTES = 15  #: socket_read_bytes
    SOCKET_RETURN = 16     #: socket_return_bytes


def system_registers(cfg):
    """``{SysReg: value}`` of the run-time fields of ``cfg``."""
    gt = GT_PER_S[cfg.generation]
    return {SysReg.LANE_BYTES: cfg.link_bytes_per_cycle, SysReg.BLOCKS_PER_PERIOD: gt // 2,
            SysReg.SKP_BLOCKS: cfg.skp_interval_blocks, SysReg.SKP_CYCLES: 128 // gt,
            SysReg.ACK_EVERY: cfg.ack_every_tlps, SysReg.FC_EVERY: cfg.update_fc_every_credits,
            SysReg.LINK_LATENCY: cfg.link_latency_cycles,
            SysReg.SWITCH_LATENCY: cfg.switch_latency_cycles,
            SysReg.SOCKET_BYTES: cfg.socket_bytes_per_cycle,
            SysReg.SOCKET_OVERHEAD: cfg.socket_tlp_overhead_bytes,
            SysReg.SOCKET_LATENCY: cfg.socket_latency_cycles,
            SysReg.HOST_BYTES: cfg.root_host_bytes_per_cycle,
            SysReg.CHUNK_LOG2: cfg.staging_chunk_bytes.bit_length() - 1,
            SysReg.EVENT_CYCLES: cfg.host_event_cycles,
            SysReg.RETRAIN: _retrain_word(cfg),
            SysReg.SOCKET_READ_BYTES: cfg.socket_read_bytes,
            SysReg.SOCKET_RETURN: cfg.socket_return_bytes}


def _retrain_word(cfg):
    gt = GT_PER_S[cfg.retrained_generation]
    return ((cfg.retrained_gpu + 1) | (cfg.retrained_lanes * gt // 8) << 8
            | (gt // 2) << 16 | (128 // gt) << 24 | cfg.retrained_slower << 31)


#: Per-GPU counters, in address order.
GPU_COUNTERS = ("tx_bytes", "rx_bytes", "first_tx", "last_tx", "first_rx", "last_rx",
                "errors", "state", "first_bad", "first_bad_addr", "first_bad_cycle",
                "credits_away")


#: Per-host-memory counters, in address order.
HOST_COUNTERS = ("rx_bytes", "tx_bytes", "errors", "credits_away")


def link_names(cfg):
    """Names of the PCIe links: ``gpu<k>`` (GPU k to its switch) and ``sw<s>``
    (switch s to its root complex); direction ``up`` is towards the root."""
    return [f"gpu{g}" for g in range(cfg.gpus)] + [f"sw{s}" for s in range(cfg.switches)]


def counter_names(cfg):
    """Names of the readable counters, in ``rd_addr`` order.

    ``now`` is the GPUs' time stamp (cycles since reset, wrapping at 2**32).
    ``gpu<k>.state`` is 1 when GPU k is done; ``gpu<k>.first_bad``,
    ``first_bad_addr`` and ``first_bad_cycle`` describe the first beat GPU k
    found wrong (see :class:`~hdl.pcie.gpu.GpuEndpoint`).  Per link and direction
    (``<link>.up`` / ``<link>.down``): ``tlps``, ``payload_bytes``,
    ``lane_bytes`` (the link's capacity), ``wire_bytes`` (what the beats
    sent took of it), ``dllp_beats``, ``unacked_tlps`` (TLPs sent and not
    yet acknowledged: 0 at rest).  Per socket-link direction
    (``socket<a><b>``): ``busy`` cycles and ``read_wait`` (cycles a
    peer-to-peer read waited for tracker room); ``socket.read_peak``: the
    most peer-to-peer read bytes a root complex's trackers held, and
    ``socket.read_held`` the most they hold now (0 at rest; see
    :class:`~hdl.pcie.switch.SocketReadTracker`).
    Per host memory (``host<k>``): payload bytes written in
    (``rx_bytes``) and read out (``tx_bytes``), ``errors``.  Per root port
    (``sw<s>.host_busy``): cycles it owed host-memory time.  Per switch
    (``switch<s>``) and root complex (``root<k>``): the stall snapshot
    ``occupied``, ``no_credit`` and ``in<port>.wants`` (see
    :class:`~hdl.pcie.switch.Crossbar`).

    Every sender's ``credits_away`` (GPUs, hosts, link directions, root
    ports ``sw<s>.credits_away``, socket links, switches and root
    complexes) has a bit set per class, or per (port, class), whose credits
    are not all home: all 0 once the machine is at rest.
    """
    names = ["cycles", "stuck", "overflow", "now"]
    for g in range(cfg.gpus):
        names += [f"gpu{g}.{c}" for c in GPU_COUNTERS]
    for link in link_names(cfg):
        for d in ("up", "down"):
            names += [f"{link}.{d}.{c}" for c in PcieLink.COUNTERS]
    if cfg.sockets == 2:
        names += ["socket01.busy", "socket10.busy", "socket01.read_wait",
                  "socket10.read_wait", "socket.read_peak", "socket.read_held",
                  "socket01.credits_away",
                  "socket10.credits_away"]
    for k in range(cfg.sockets):
        names += [f"host{k}.{c}" for c in HOST_COUNTERS]
    names += [f"sw{s}.host_busy" for s in range(cfg.switches)]
    names += [f"sw{s}.credits_away" for s in range(cfg.switches)]
    for block, ports in crossbars(cfg):
        names += [f"{block}.occupied", f"{block}.no_credit", f"{block}.credits_away"]
        names += [f"{block}.in{p}.wants" for p in range(ports)]
    return names


def crossbars(cfg):
    """``[(name, ports)]`` of the machine's switches and root complexes."""
    sps, gps = cfg.switches_per_socket, cfg.gpus_per_switch
    return ([(f"switch{s}", gps + 1) for s in range(cfg.switches)]
            + [(f"root{k}", sps + 2) for k in range(cfg.sockets)])


class PcieSystem(wiring.Component):
    """The whole machine.  Clock: the 1 GHz model clock (``clk``, ``rst``).

    Parameters
    ----------
    cfg : PcieConfig
        Structural fields shape the RTL.
    checks : bool
        Build the GPUs' memory checks and the links' receiver credit checks
        (``False`` for synthesis, see :class:`~hdl.pcie.gpu.GpuEndpoint` and
        :class:`~hdl.pcie.link.LinkPort`).

    Members
    -------
    cfg_we : In(1), cfg_addr : In(9), cfg_data : In(32)
        Register write: ``{0, gpu[3:0], reg[3:0]}`` a
        :class:`~hdl.pcie.gpu.GpuReg` of a GPU (which decodes ``reg[2:0]``, so
        registers 8 to 15 write 0 to 7); ``GLOBAL | reg`` a :class:`SysReg`.
    ctl_start : In(1)
        Start every GPU's copy (one-cycle pulse).  It also returns the
        fabric (links, switches, root complexes and ports, the socket links
        and their read trackers' turn, and the GPUs' and host memories'
        transmitters and receive buffers) to its reset state, their counters
        to 0, so that a run's cycles do not depend on the runs simulated
        before it (arbiter pointers, Ack and UpdateFC timers, SKP
        intervals).  The machine is at rest then
        (the test bench checks it); ``now`` keeps counting.
    done : Out(1)
        Every GPU done.
    stuck : Out(1)
        Watchdog: no GPU moved a beat for ``watchdog_cycles`` while not done.
    rd_addr : In(16), rd_data : Out(32)
        Counter read (see :func:`counter_names`).
    """

    def __init__(self, cfg=None, *, checks=True):
        from .config import PcieConfig
        self.cfg = cfg or PcieConfig()
        self.checks = bool(checks)
        super().__init__({
            "cfg_we": In(1), "cfg_addr": In(9), "cfg_data": In(32), "ctl_start": In(1),
            "done": Out(1), "stuck": Out(1), "rd_addr": In(16), "rd_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        gps, sps = cfg.gpus_per_switch, cfg.switches_per_socket
        wide = (SysReg.SKP_BLOCKS, SysReg.EVENT_CYCLES, SysReg.RETRAIN,
                SysReg.SOCKET_READ_BYTES)
        regs = {r: Signal(32 if r in wide else 8, name=f"reg_{r.name.lower()}")
                for r in SysReg}
        with m.If(self.cfg_we & self.cfg_addr[8]):
            with m.Switch(self.cfg_addr[:5]):
                for r, sig in regs.items():
                    with m.Case(r):
                        m.d.sync += sig.eq(self.cfg_data)
        timing = {"i_lane_bytes": regs[SysReg.LANE_BYTES],
                  "i_blocks_per_period": regs[SysReg.BLOCKS_PER_PERIOD],
                  "i_skp_blocks": regs[SysReg.SKP_BLOCKS], "i_skp_cycles": regs[SysReg.SKP_CYCLES],
                  "i_ack_every": regs[SysReg.ACK_EVERY], "i_fc_every": regs[SysReg.FC_EVERY]}
        assert set(timing) == set(LinkTiming())
        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        tx_depth = cfg.tx_queue_beats     # a link port's transmit queue, per class

        def cleared(block):
            """``block``, returned to its reset state by ``ctl_start``."""
            return ResetInserter(self.ctl_start)(block)
        overflow = []

        # the one GPU link that trained narrower or slower, if any
        retrain = regs[SysReg.RETRAIN]
        retrained = {**timing, "i_lane_bytes": retrain[8:16],
                     "i_blocks_per_period": retrain[16:21], "i_skp_cycles": retrain[24:29]}

        def new_link(name, a_credits, b_credits, gpu=None):
            link = SharedModule(PcieLink, f"pcie_link_{a_credits}_{b_credits}",
                                resets=self.ctl_start, cfg=cfg, a_credits=a_credits,
                                b_credits=b_credits, checks=self.checks)
            m.submodules[name] = link
            if gpu is None:
                m.d.comb += [getattr(link, k).eq(v) for k, v in timing.items()]
            else:
                slow = retrain[:5] == gpu + 1
                m.d.comb += [getattr(link, k).eq(Mux(slow, retrained[k], v))
                             for k, v in timing.items()]
            m.d.comb += link.i_latency.eq(regs[SysReg.LINK_LATENCY])
            overflow.append(link.o_overflow)
            return link

        # switches: ports 0..gps-1 down to GPUs, port gps up
        switches = []
        for s in range(cfg.switches):
            first = s * gps
            sw = Crossbar(cfg, ports=gps + 1, out_credits=tx_depth, store_forward=True,
                          port_of=lambda dst, first=first: Mux(
                              (dst >= first) & (dst < first + gps), (dst - first)[:3], gps))
            m.submodules[f"switch{s}"] = cleared(sw)
            m.d.comb += sw.i_latency.eq(regs[SysReg.SWITCH_LATENCY])
            # the port of a GPU whose link trained slower stores and forwards
            m.d.comb += [sw.i_store_forward[p].eq(retrain[31] & (retrain[:5] == first + p + 1))
                         for p in range(gps)]
            overflow.append(sw.o_overflow)
            switches.append(sw)
        # root complexes: ports 0..sps-1 down to switches, port sps to the other
        # socket, port sps+1 to host memory
        roots, hosts = [], []
        for k in range(cfg.sockets):
            lo, hi = k * sps * gps, (k + 1) * sps * gps
            rc = Crossbar(cfg, ports=sps + 2, out_credits=tx_depth,
                          port_of=lambda dst, lo=lo, hi=hi, k=k: Mux(
                              dst == HOST_NODE + k, sps + 1,
                              Mux((dst >= lo) & (dst < hi), ((dst - lo) // gps)[:2], sps)))
            m.submodules[f"root{k}"] = cleared(rc)
            m.d.comb += rc.i_latency.eq(regs[SysReg.SWITCH_LATENCY])
            overflow.append(rc.o_overflow)
            roots.append(rc)
            host = HostMemory(cfg, k, tx_credits=rc.in_credits, rx_beats=tx_depth,
                              checks=self.checks)
            m.submodules[f"host{k}"] = host
            m.d.comb += [host.i_start.eq(self.ctl_start),
                         host.i_chunk_log2.eq(regs[SysReg.CHUNK_LOG2])]
            wiring.connect(m, rc.o[sps + 1], host.i)
            wiring.connect(m, host.o, rc.i[sps + 1])
            hosts.append(host)

        gpus, links = [], {}
        for g in range(cfg.gpus):
            gpu = GpuEndpoint(cfg, g, tx_credits=tx_depth, checks=self.checks)
            m.submodules[f"gpu{g}"] = gpu
            m.d.comb += [gpu.i_we.eq(self.cfg_we & ~self.cfg_addr[8] & (self.cfg_addr[4:8] == g)),
                         gpu.i_reg.eq(self.cfg_addr[:3]), gpu.i_data.eq(self.cfg_data),
                         gpu.i_start.eq(self.ctl_start), gpu.i_now.eq(now),
                         gpu.i_chunk_log2.eq(regs[SysReg.CHUNK_LOG2]),
                         gpu.i_event_cycles.eq(regs[SysReg.EVENT_CYCLES])]
            sw = switches[gpu_switch(cfg, g)]
            link = new_link(f"gpu{g}_link", gpu.rx_beats, sw.in_credits, gpu=g)
            links[f"gpu{g}"] = link
            port = g % gps
            wiring.connect(m, gpu.o, link.a_i)
            wiring.connect(m, link.a_o, gpu.i)
            wiring.connect(m, sw.o[port], link.b_i)
            wiring.connect(m, link.b_o, sw.i[port])
            gpus.append(gpu)
        # staged copies: each GPU sees its peer's intake and its source's bytes
        # landed in host memory
        per_socket = sps * gps
        landed = Array(hosts[g // per_socket].o_landed[g % per_socket] for g in range(cfg.gpus))
        rx_bytes = Array(g.o_rx_bytes for g in gpus)
        for g in gpus:
            m.d.comb += [g.i_peer_consumed.eq(rx_bytes[g.o_peer]),
                         g.i_src_landed.eq(landed[g.o_src])]
        root_ports = []
        for s, sw in enumerate(switches):
            rc = roots[s // sps]
            rp = RootPort(cfg, up_credits=rc.in_credits, down_credits=tx_depth)
            m.submodules[f"root_port{s}"] = cleared(rp)
            m.d.comb += rp.i_host_bytes_per_cycle.eq(regs[SysReg.HOST_BYTES])
            link = new_link(f"sw{s}_link", sw.in_credits, RootPort.link_credits)
            links[f"sw{s}"] = link
            wiring.connect(m, sw.o[gps], link.a_i)
            wiring.connect(m, link.a_o, sw.i[gps])
            wiring.connect(m, rp.link_o, link.b_i)
            wiring.connect(m, link.b_o, rp.link_i)
            wiring.connect(m, rc.o[s % sps], rp.root_i)
            wiring.connect(m, rp.root_o, rc.i[s % sps])
            root_ports.append(rp)
        sockets = []
        if cfg.sockets == 2:
            m.submodules.read_tracker = tracker = SocketReadTracker()
            m.d.comb += [tracker.i_bytes.eq(regs[SysReg.SOCKET_READ_BYTES]),
                         tracker.i_clear.eq(self.ctl_start)]
            for a, b in ((0, 1), (1, 0)):
                sl = SocketLink(cfg, in_credits=tx_depth, out_credits=roots[b].in_credits)
                m.submodules[f"socket{a}{b}"] = cleared(sl)
                m.d.comb += [sl.i_bytes_per_cycle.eq(regs[SysReg.SOCKET_BYTES]),
                             sl.i_tlp_overhead_bytes.eq(regs[SysReg.SOCKET_OVERHEAD]),
                             sl.i_latency.eq(regs[SysReg.SOCKET_LATENCY]),
                             sl.i_return_bytes.eq(regs[SysReg.SOCKET_RETURN]),
                             sl.i_read_room.eq(tracker.o_room[a]),
                             tracker.i_read_want[a].eq(sl.o_read_want),
                             tracker.i_read_sent[a].eq(sl.o_read_sent),
                             tracker.i_cpl_sent[a].eq(sl.o_cpl_sent),
                             tracker.i_cpl_arrived[a].eq(sl.o_cpl_arrived)]
                wiring.connect(m, roots[a].o[sps], sl.i)
                wiring.connect(m, sl.o, roots[b].i[sps])
                overflow.append(sl.o_overflow)
                sockets.append(sl)
            # each direction pays for the other's peer-to-peer TLPs
            m.d.comb += [sockets[0].i_returns.eq(sockets[1].o_peer_head),
                         sockets[1].i_returns.eq(sockets[0].o_peer_head)]
        else:
            for rc in roots:
                m.d.comb += rc.i[sps].valid.eq(0)

        m.d.comb += self.done.eq(Cat(*(g.o_done for g in gpus)).all())
        # --- watchdog -----------------------------------------------------
        running = Signal()
        with m.If(self.ctl_start):
            m.d.sync += running.eq(1)
        m.submodules.watchdog = watchdog = Watchdog(cfg.watchdog_cycles)
        m.d.comb += [watchdog.i_clear.eq(self.ctl_start),
                     watchdog.i_active.eq(running & ~self.done),
                     watchdog.i_progress.eq(Cat(*(g.o_progress for g in gpus + hosts)).any()),
                     self.stuck.eq(watchdog.o_stuck)]

        values = [watchdog.o_cycles, self.stuck, Cat(*overflow).any(), now]
        for g in gpus:
            values += [g.o_tx_bytes, g.o_rx_bytes, g.o_first_tx, g.o_last_tx, g.o_first_rx,
                       g.o_last_rx, g.o_errors, g.o_done, g.o_first_bad, g.o_first_bad_addr,
                       g.o_first_bad_cycle, g.o_credits_away]
        for name in link_names(cfg):
            link = links[name]
            for d in ("ab", "ba"):
                values += [getattr(link, f"{d}_{c}") for c in PcieLink.COUNTERS]
        values += [sl.o_busy for sl in sockets]
        if sockets:
            values += [sl.o_read_wait for sl in sockets] + [tracker.o_peak, tracker.o_held]
            values += [sl.o_credits_away for sl in sockets]
        for host in hosts:
            values += [host.o_rx_bytes, host.o_tx_bytes, host.o_errors, host.o_credits_away]
        values += [rp.o_host_busy for rp in root_ports]
        values += [rp.o_credits_away for rp in root_ports]
        for xbar in switches + roots:
            values += [xbar.o_occupied, xbar.o_no_credit, xbar.o_credits_away, *xbar.o_wants]
        assert len(values) == len(counter_names(cfg))
        with m.Switch(self.rd_addr):
            for i, v in enumerate(values):
                with m.Case(i):
                    m.d.comb += self.rd_data.eq(v)
        return m
