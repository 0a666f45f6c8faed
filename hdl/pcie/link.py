"""A PCIe link: two :class:`LinkPort` ends joined by two wire delays (seed 001,
"1. Introduction": "PCIe 4.0 carries 16 GT/s per lane, so 16 lanes give
32 GB/s in one direction"; the PCIe Base Specification's physical, data-link
and flow-control rules).

Each direction moves at most one ``datapath_bytes`` beat per cycle of the
1 GHz clock, at the lanes' rate (``lanes x GT/s / 8`` bytes per ns), minus
the 128b/130b sync headers (one cycle in 65) and a SKP ordered set every
``skp_interval_blocks`` blocks.  TLPs go whole, one starting per beat: a
header beat (framing, header, length) and the data beats.  A data beat takes
``datapath_bytes`` of the lanes' time, a header beat
:data:`HEADER_WIRE_BYTES` (32) at most and a beat of DLLPs alone
:data:`DLLP_WIRE_BYTES` (8) per DLLP: with ``datapath_bytes`` 64 a header
beat still takes a cycle of the datapath, but only the wire time of what it
carries.  A transmitter starts a TLP only once all of it is in its
queue, so its beats go back to back, and the classes with a TLP ready to
start (queued whole, with credits) take turns, round robin (a read or
completion may pass an earlier posted write: Relaxed Ordering, which no copy
of the model depends on).  The receiver
returns flow-control credits per class with UpdateFC DLLPs and acknowledges
TLPs with Ack DLLPs; both travel the other direction and take its link time:
one DLLP (8 B) fits in the slack of a TLP's header beat (framing and a 4 DW
header leave 8 B of 32), more take a beat of their own.  UpdateFC carries a
credit limit and Ack a sequence number, both cumulative, so a newer DLLP of a
kind replaces one not yet sent.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.queue import sync_fifo
from ..common.credit import CreditLink, LinkDelay, StreamToLink, VcInputBuffer, whole_packets
from .tlp import DATA_CREDIT_BYTES, FcClass, TlpType, tlp_layout, wire_layout

__all__ = ["LinkPort", "PcieLink", "LinkTiming"]

N_FC = len(FcClass)
#: A DLLP waits at most this many cycles for a header beat to ride in before
#: it takes a beat of its own at the next TLP boundary.
DLLP_MAX_WAIT = 32
#: Any credits freed or TLPs taken in but not yet reported go out when this
#: free-running sweep wraps (cycles).
SWEEP_CYCLES = 64
#: Lane bytes a beat without data takes on the wire at most: a TLP's header
#: beat (framing, sequence number, 4 DW header and LCRC, 24 B, with one 8 B
#: DLLP in its slack) or a beat of four DLLPs alone.  A beat of a wider
#: datapath (``datapath_bytes`` 64) takes no more of the link's time than that.
HEADER_WIRE_BYTES = 32
#: Lane bytes one DLLP takes on the wire: 6 B and its framing (an SDP token
#: of 2 B from 8 GT/s, SDP and END symbols at 2.5 and 5 GT/s; PCIe Base
#: Specification).  A beat of DLLPs alone takes this much per DLLP in it.
DLLP_WIRE_BYTES = 8


def LinkTiming():
    """Signature members of a link's run-time timing, driven from registers
    (seed 001: PCIe 4.0's 16 GT/s per lane and 128b/130b encoding; the SKP,
    Ack and UpdateFC spacings are the PCIe Base Specification's mechanisms,
    not in the seed).  The model clock is 1 GHz, so a cycle is 1 ns.

    Members
    -------
    i_lane_bytes : In(8)
        Link bytes per cycle: lanes x GT/s / 8.
    i_blocks_per_period : In(5)
        128b/130b blocks the link sends per 65 cycles (GT/s / 2).
    i_skp_blocks : In(12)
        Blocks between SKP ordered sets; at least ``i_blocks_per_period``
        (one SKP ordered set is paid per 65-cycle period at most, so a
        shorter interval would be paid only in part).
    i_skp_cycles : In(5)
        Cycles one SKP ordered set takes (128 / GT/s).
    i_ack_every : In(7)
        TLPs a receiver takes in per Ack DLLP.
    i_fc_every : In(9)
        Credits a receiver frees per UpdateFC DLLP.
    """
    return {
        "i_lane_bytes": In(8),     # link bytes per cycle (lanes x GT/s / 8)
        "i_blocks_per_period": In(5),  # 128b/130b blocks per 65 cycles (GT/s / 2)
        "i_skp_blocks": In(12),    # blocks between SKP ordered sets
        "i_skp_cycles": In(5),     # cycles one SKP ordered set takes (128 / GT/s)
        "i_ack_every": In(7),      # TLPs per Ack
        "i_fc_every": In(9),       # credits freed per UpdateFC
    }


class LinkPort(wiring.Component):
    """One end of a PCIe link: its transmitter and its receiver.  Clock: the
    1 GHz model clock.

    Parameters
    ----------
    cfg : PcieConfig
        ``datapath_bytes``, the receive buffer's ``rx_header_credits`` and
        ``rx_data_credits`` (advertised for every class), ``replay_tlps``.
    local_credits : int
        Beats the local side's input buffer holds per class (credits of ``o``).
    checks : bool
        Build the receiver's credit check and the transmitter's replay
        check (the second and third parts of ``o_overflow``); ``False`` for
        synthesis, the link alone.

    Members
    -------
    i : In(CreditLink(tlp_layout(cfg), 3))
        TLP beats to send, class = ``vc``; each class's beats must arrive whole
        TLP by whole TLP.
    o : Out(CreditLink(tlp_layout(cfg), 3))
        TLP beats received.
    o_wire, i_wire : Out / In(wire_layout(cfg))
        The two directions of the wire (see :func:`~hdl.pcie.tlp.wire_layout`).
    i_lane_bytes ... i_fc_every
        Run-time timing (see :func:`LinkTiming`).
    o_tlps, o_payload_bytes : Out(32)
        TLPs and payload bytes sent since reset.
    o_lane_bytes : Out(32)
        Lane bytes the link could have carried since reset (its capacity:
        ``i_lane_bytes`` per cycle outside sync headers and SKP ordered sets).
    o_wire_bytes : Out(32)
        Lane bytes the beats sent took of the link's time since reset:
        ``datapath_bytes`` for each data beat, ``min(HEADER_WIRE_BYTES,
        datapath_bytes)`` for each header beat and ``DLLP_WIRE_BYTES`` per
        DLLP of a beat of DLLPs alone, up to that.  Over
        ``o_lane_bytes`` it is the share of the link in use.
    o_dllp_beats : Out(32)
        Beats given to DLLPs alone.
    o_credits_away : Out(3)
        Bit ``class``: the transmitter does not hold exactly the far
        receiver's header and data credits of that class (its credit limit
        less the credits consumed differs from what the receiver advertised
        at reset).  All 0 once the machine is at rest (every UpdateFC DLLP
        sent by then).
    o_deliver_credits_away : Out(3)
        Bit ``class``: the receiver's delivery of what it took in to the
        local side does not hold all its credits (0 at rest).
    o_unacked_tlps : Out(12)
        TLPs sent and not yet acknowledged by an Ack DLLP (the replay
        buffer's content): 0 at rest, every Ack sent by then.
    o_overflow : Out(1)
        Sticky: flow control broken.  The receive buffer overflowed, or
        (with ``checks``) it held more beats than the TLPs whose credits are
        not yet free can have (a TLP's credits freed before its last beat
        left, or a TLP longer than its header says), or more TLPs were
        unacknowledged than ``replay_tlps`` (the replay buffer's limit did
        not hold, or an Ack named a TLP not yet sent).
    """

    def __init__(self, cfg, *, local_credits, checks=True):
        self.cfg = cfg
        self.checks = bool(checks)
        self.local_credits = local_credits
        self.tx_queue_beats = cfg.tx_queue_beats
        layout = tlp_layout(cfg)
        wl = wire_layout(cfg)
        link = CreditLink(layout, N_FC)
        super().__init__({
            "i": In(link), "o": Out(link), "o_wire": Out(wl), "i_wire": In(wl),
            **LinkTiming(),
            "o_tlps": Out(32), "o_payload_bytes": Out(32), "o_lane_bytes": Out(32),
            "o_wire_bytes": Out(32), "o_dllp_beats": Out(32), "o_overflow": Out(1),
            "o_credits_away": Out(N_FC), "o_deliver_credits_away": Out(N_FC),
            "o_unacked_tlps": Out(12),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        layout = tlp_layout(cfg)
        hdr_credits, data_credits = cfg.rx_header_credits, cfg.rx_data_credits

        # --- slots: lane rate, 128b/130b sync headers, SKP ordered sets -------------
        period = Signal(range(65))
        blocks = Signal(13)
        skp_left = Signal(5)
        budget = Signal(range(2 * cfg.datapath_bytes + 256))
        stall = Signal()
        m.d.comb += stall.eq((period == 64) | (skp_left != 0))
        m.d.sync += period.eq(Mux(period == 64, 0, period + 1))
        with m.If(skp_left != 0):
            m.d.sync += skp_left.eq(skp_left - 1)
        with m.If(period == 64):
            with m.If(blocks + self.i_blocks_per_period >= self.i_skp_blocks):
                m.d.sync += [blocks.eq(blocks + self.i_blocks_per_period - self.i_skp_blocks),
                             skp_left.eq(self.i_skp_cycles)]
            with m.Else():
                m.d.sync += blocks.eq(blocks + self.i_blocks_per_period)
        # a data beat spends datapath_bytes of lane time, a beat without data
        # (a TLP's header beat, or DLLPs alone) HEADER_WIRE_BYTES at most, what
        # the wire carries of it; idle time is not banked
        hdr_cost = min(HEADER_WIRE_BYTES, cfg.datapath_bytes)
        slot = Signal()         # room for a beat without data
        data_slot = Signal()    # room for a data beat
        used = Signal()
        cost = Signal(range(cfg.datapath_bytes + 1))
        m.d.comb += [slot.eq(~stall & (budget >= hdr_cost)),
                     data_slot.eq(~stall & (budget >= cfg.datapath_bytes))]
        after = budget - Mux(used, cost, 0)
        grown = after + Mux(stall, 0, self.i_lane_bytes)
        m.d.sync += budget.eq(Mux(grown > cfg.datapath_bytes, cfg.datapath_bytes, grown))
        with m.If(~stall):
            m.d.sync += self.o_lane_bytes.eq(self.o_lane_bytes + self.i_lane_bytes)

        # --- transmit queue and the far receiver's credits -------------------------
        m.submodules.txq = txq = VcInputBuffer(flit_layout=layout, depth=self.tx_queue_beats,
                                               n_vc=N_FC)
        wiring.connect(m, wiring.flipped(self.i), txq.i)
        hdr_limit = [Signal(8, init=hdr_credits, name=f"hdr_limit{c}") for c in range(N_FC)]
        data_limit = [Signal(12, init=data_credits, name=f"data_limit{c}") for c in range(N_FC)]
        hdr_used = [Signal(8, name=f"hdr_used{c}") for c in range(N_FC)]
        data_used = [Signal(12, name=f"data_used{c}") for c in range(N_FC)]
        seq_sent = Signal(12)
        seq_acked = Signal(12)
        unacked = Signal(12)
        m.d.comb += [unacked.eq(seq_sent - seq_acked), self.o_unacked_tlps.eq(unacked)]
        if self.checks:
            # a TLP starts only while fewer than replay_tlps are unacknowledged;
            # an Ack for a TLP not yet sent wraps the count past it too
            with m.If(unacked > cfg.replay_tlps):
                m.d.sync += self.o_overflow.eq(1)
        wire_in = self.i_wire
        with m.If(wire_in.ack):
            m.d.sync += seq_acked.eq(wire_in.ack_seq)
        for c in range(N_FC):
            with m.If(wire_in.fc[c]):
                m.d.sync += [hdr_limit[c].eq(wire_in.fc_hdr[8 * c:8 * c + 8]),
                             data_limit[c].eq(wire_in.fc_data[12 * c:12 * c + 12])]

        # whole TLPs queued per class: a TLP may start only once its last beat is in
        whole = [whole_packets(m, self.i, txq.o[c], c, self.tx_queue_beats, f"whole{c}")
                 for c in range(N_FC)]
        ready_to_start = Signal(N_FC)
        need = []
        for c in range(N_FC):
            head = txq.o[c].payload
            n = Signal(12, name=f"need{c}")
            m.d.comb += n.eq(Mux(head.kind == TlpType.MRD, 0,
                                 (head.length + DATA_CREDIT_BYTES - 1) // DATA_CREDIT_BYTES))
            need.append(n)
            hdr_avail = (hdr_limit[c] - hdr_used[c])[:8]
            data_avail = (data_limit[c] - data_used[c])[:12]
            m.d.comb += ready_to_start[c].eq(txq.o[c].valid & head.head & (whole[c] != 0)
                                             & (hdr_avail != 0) & (data_avail >= n)
                                             & (unacked < cfg.replay_tlps))
        # the classes ready to start take turns, round robin; each has its own
        # queue and credits, so posted writes can always pass the others (and a
        # read or completion may pass an earlier posted write, as PCIe allows
        # only with Relaxed Ordering; no copy of the model depends on it)
        start = Signal()
        pick = Signal(range(N_FC))
        last = Signal(range(N_FC), init=N_FC - 1)
        for k in reversed(range(1, N_FC + 1)):
            c = Mux(last + k >= N_FC, last + k - N_FC, last + k)[:2]
            with m.If(Array(ready_to_start)[c]):
                m.d.comb += [start.eq(1), pick.eq(c)]

        # --- DLLPs owed by this end's receiver (set below) ----------------------------
        ack_due = Signal()
        fc_due = Signal(N_FC)
        dllp_wait = Signal(range(DLLP_MAX_WAIT + 1))
        any_due = ack_due | fc_due.any()
        send_ack = Signal()
        send_fc = Signal(N_FC)
        # cycles since a DLLP last went while some were owed
        with m.If(~any_due | send_ack | send_fc.any()):
            m.d.sync += dllp_wait.eq(0)
        with m.Elif(dllp_wait != DLLP_MAX_WAIT):
            m.d.sync += dllp_wait.eq(dllp_wait + 1)

        busy = Signal()
        cur = Signal(range(N_FC))
        out = self.o_wire
        m.d.sync += [out.beat_valid.eq(0), out.ack.eq(0), out.fc.eq(0)]
        beat = Array(txq.o[c].payload.as_value() for c in range(N_FC))
        with m.If(slot):
            with m.If(busy):
                # the whole TLP is queued, so its beats go back to back
                with m.If(data_slot):
                    m.d.comb += [used.eq(1), cost.eq(cfg.datapath_bytes),
                                 Array(txq.o[c].ready for c in range(N_FC))[cur].eq(1)]
                    m.d.sync += [out.beat_valid.eq(1), out.beat.eq(beat[cur])]
                    with m.If(Array(txq.o[c].payload.last for c in range(N_FC))[cur]):
                        m.d.sync += busy.eq(0)
            with m.Elif(start & ~(any_due & (dllp_wait == DLLP_MAX_WAIT))):
                c = pick
                m.d.comb += [used.eq(1), cost.eq(hdr_cost),
                             Array(txq.o[k].ready for k in range(N_FC))[c].eq(1)]
                m.d.sync += last.eq(c)
                head_last = Array(txq.o[k].payload.last for k in range(N_FC))[c]
                head_bytes = Array(Mux(txq.o[k].payload.kind == TlpType.MRD, 0,
                                       txq.o[k].payload.length) for k in range(N_FC))[c]
                m.d.sync += [out.beat_valid.eq(1), out.beat.eq(beat[c]),
                             busy.eq(~head_last), cur.eq(c), seq_sent.eq(seq_sent + 1),
                             self.o_tlps.eq(self.o_tlps + 1),
                             self.o_payload_bytes.eq(self.o_payload_bytes + head_bytes)]
                for k in range(N_FC):
                    with m.If(c == k):
                        m.d.sync += [hdr_used[k].eq(hdr_used[k] + 1),
                                     data_used[k].eq(data_used[k] + need[k])]
                # one DLLP rides in the header beat's slack: the Ack first
                with m.If(ack_due):
                    m.d.comb += send_ack.eq(1)
                with m.Else():
                    for k in range(N_FC):
                        with m.If(fc_due[k] & ~fc_due[:k].any() if k else fc_due[k]):
                            m.d.comb += send_fc[k].eq(1)
            with m.Elif(any_due):
                # a beat of DLLPs alone: every one owed (four at most), each
                # taking its own wire time
                n_dllps = ack_due + sum(fc_due[k] for k in range(N_FC))
                m.d.comb += [used.eq(1), send_ack.eq(ack_due), send_fc.eq(fc_due),
                             cost.eq(Mux(n_dllps * DLLP_WIRE_BYTES > hdr_cost, hdr_cost,
                                         n_dllps * DLLP_WIRE_BYTES))]
                m.d.sync += self.o_dllp_beats.eq(self.o_dllp_beats + 1)
            with m.If(used):
                m.d.sync += self.o_wire_bytes.eq(self.o_wire_bytes + cost)

        # --- receiver ----------------------------------------------------------------
        depth = hdr_credits + data_credits * DATA_CREDIT_BYTES // cfg.datapath_bytes
        beat_in = self.i_wire.beat
        rx = []
        for c in range(N_FC):
            q = sync_fifo(width=layout.size, depth=depth)
            m.submodules[f"rxq{c}"] = q
            write = self.i_wire.beat_valid & (beat_in.vc == c)
            m.d.comb += [q.w_data.eq(beat_in), q.w_en.eq(write)]
            with m.If(write & ~q.w_rdy):
                m.d.sync += self.o_overflow.eq(1)
            rx.append(q)
        m.submodules.deliver = deliver = StreamToLink(flit_layout=layout,
                                                      credits=self.local_credits, n_vc=N_FC)
        wiring.connect(m, deliver.o, wiring.flipped(self.o))
        m.d.comb += self.o_deliver_credits_away.eq(deliver.o_credits_away)
        for c in range(N_FC):
            m.d.comb += self.o_credits_away[c].eq(
                ((hdr_limit[c] - hdr_used[c])[:8] != hdr_credits)
                | ((data_limit[c] - data_used[c])[:12] != data_credits))
        seq_rcvd = Signal(12)
        seq_adv = Signal(12)
        with m.If(self.i_wire.beat_valid & beat_in.head):
            m.d.sync += seq_rcvd.eq(seq_rcvd + 1)
        sweep = Signal(range(SWEEP_CYCLES))
        m.d.sync += sweep.eq(sweep + 1)
        # when the sweep wraps, anything not yet reported is due until it goes
        ack_flush = Signal()
        m.d.comb += ack_due.eq((seq_rcvd != seq_adv)
                               & (((seq_rcvd - seq_adv)[:12] >= self.i_ack_every) | ack_flush))
        with m.If(send_ack):
            m.d.sync += [out.ack.eq(1), out.ack_seq.eq(seq_rcvd), seq_adv.eq(seq_rcvd),
                         ack_flush.eq(0)]
        with m.Elif(sweep == 0):
            m.d.sync += ack_flush.eq(1)

        def tlp_beats(tlp):
            # a header beat and the data beats of its length
            return 1 + Mux(tlp.kind == TlpType.MRD, 0,
                           (tlp.length + cfg.datapath_bytes - 1) // cfg.datapath_bytes)
        for c in range(N_FC):
            q = rx[c]
            m.d.comb += [deliver.i[c].payload.eq(q.r_data), deliver.i[c].valid.eq(q.r_rdy),
                         q.r_en.eq(deliver.i[c].ready)]
            popped = q.r_rdy & deliver.i[c].ready
            leaving = deliver.i[c].payload
            # beats of the TLPs taken in whose credits are not yet free: from
            # a TLP's header beat until its credits come free (below); the
            # queue never holds more
            freed_beats = Signal(16, name=f"freed_beats{c}")
            if self.checks:
                held = Signal(16, name=f"held{c}")
                arrived = Mux(self.i_wire.beat_valid & (beat_in.vc == c) & beat_in.head,
                              tlp_beats(beat_in), 0)
                m.d.sync += held.eq(held + arrived - freed_beats)
                with m.If(q.level > held):
                    m.d.sync += self.o_overflow.eq(1)
            hdr_alloc = Signal(8, init=hdr_credits, name=f"hdr_alloc{c}")
            data_alloc = Signal(12, init=data_credits, name=f"data_alloc{c}")
            hdr_adv = Signal(8, init=hdr_credits, name=f"hdr_adv{c}")
            data_adv = Signal(12, init=data_credits, name=f"data_adv{c}")
            # a TLP's credits come free when its last beat leaves: the header
            # credit and the data credits its length took
            with m.If(popped & leaving.last):
                m.d.comb += freed_beats.eq(tlp_beats(leaving))
                m.d.sync += hdr_alloc.eq(hdr_alloc + 1)
                with m.If(leaving.kind != TlpType.MRD):
                    m.d.sync += data_alloc.eq(
                        data_alloc + (leaving.length + DATA_CREDIT_BYTES - 1) // DATA_CREDIT_BYTES)
            freed = (hdr_alloc - hdr_adv)[:8] + (data_alloc - data_adv)[:12]
            fc_flush = Signal(name=f"fc_flush{c}")
            m.d.comb += fc_due[c].eq((freed != 0) & ((freed >= self.i_fc_every) | fc_flush))
            with m.If(send_fc[c]):
                m.d.sync += [out.fc[c].eq(1), out.fc_hdr[8 * c:8 * c + 8].eq(hdr_alloc),
                             out.fc_data[12 * c:12 * c + 12].eq(data_alloc),
                             hdr_adv.eq(hdr_alloc), data_adv.eq(data_alloc), fc_flush.eq(0)]
            with m.Elif(sweep == 0):
                m.d.sync += fc_flush.eq(1)
        return m


class PcieLink(wiring.Component):
    """A full-duplex PCIe link between side ``a`` (the downstream device) and
    side ``b`` (the port towards the root).  Clock: the 1 GHz model clock.

    Parameters
    ----------
    cfg : PcieConfig
    a_credits, b_credits : int
        Beats per class that side ``a``'s / ``b``'s input buffer holds.
    checks : bool
        Build the ends' receiver credit checks (see :class:`LinkPort`).

    Members
    -------
    a_i, b_i : In(CreditLink(tlp_layout(cfg), 3))
        Beats each side sends.
    a_o, b_o : Out(CreditLink(tlp_layout(cfg), 3))
        Beats each side receives.
    i_latency : In(8)
        Wire and pipeline latency each way, cycles (``link_latency_cycles``).
    i_lane_bytes ... i_fc_every
        Timing (see :func:`LinkTiming`), to both ends.
    ab_*, ba_* counters
        ``o_tlps``, ``o_payload_bytes``, ``o_lane_bytes``, ``o_wire_bytes``,
        ``o_dllp_beats``, ``o_unacked_tlps`` (Out(32)) of the a-to-b and
        b-to-a directions' transmitters, and ``credits_away`` (Out(3)): per class, the
        direction's transmitter (flow-control credits) or the far end's
        delivery of it to the local side does not hold all its credits.
    o_overflow : Out(1)
        Sticky: a receive buffer or wire delay overflowed, or an end's
        checks failed (:attr:`LinkPort.o_overflow`).
    """

    COUNTERS = ("tlps", "payload_bytes", "lane_bytes", "wire_bytes", "dllp_beats",
                "unacked_tlps", "credits_away")

    def __init__(self, cfg, *, a_credits, b_credits, checks=True):
        self.cfg = cfg
        layout = tlp_layout(cfg)
        link = CreditLink(layout, N_FC)
        members = {"a_i": In(link), "a_o": Out(link), "b_i": In(link), "b_o": Out(link),
                   "i_latency": In(8), **LinkTiming(), "o_overflow": Out(1)}
        for d in ("ab", "ba"):
            members.update({f"{d}_{c}": Out(N_FC if c == "credits_away" else 32)
                            for c in self.COUNTERS})
        super().__init__(members)
        self.port_a = LinkPort(cfg, local_credits=a_credits, checks=checks)
        self.port_b = LinkPort(cfg, local_credits=b_credits, checks=checks)

    def elaborate(self, platform):
        m = Module()
        wl = wire_layout(self.cfg)
        m.submodules.port_a = a = self.port_a
        m.submodules.port_b = b = self.port_b
        wiring.connect(m, wiring.flipped(self.a_i), a.i)
        wiring.connect(m, a.o, wiring.flipped(self.a_o))
        wiring.connect(m, wiring.flipped(self.b_i), b.i)
        wiring.connect(m, b.o, wiring.flipped(self.b_o))
        overflow = [a.o_overflow, b.o_overflow]
        for name, src, dst in (("ab", a, b), ("ba", b, a)):
            for t in LinkTiming():
                m.d.comb += getattr(src, t).eq(getattr(self, t))
            # the wire: every slot's content arrives i_latency cycles later
            delay = LinkDelay(flit_layout=_wire_flit(wl), capacity=64, n_vc=1)
            m.submodules[f"wire_{name}"] = delay
            m.d.comb += [delay.i_latency.eq(self.i_latency),
                         delay.i.valid.eq(src.o_wire.beat_valid | src.o_wire.ack
                                          | src.o_wire.fc.any()),
                         delay.i.flit.payload.eq(src.o_wire.as_value()),
                         dst.i_wire.eq(Mux(delay.o.valid, delay.o.flit.payload.as_value(), 0))]
            overflow.append(delay.o_overflow)
            for c in self.COUNTERS:
                value = getattr(src, f"o_{c}")
                if c == "credits_away":     # the direction's two senders of credits
                    value = value | dst.o_deliver_credits_away
                m.d.comb += getattr(self, f"{name}_{c}").eq(value)
        m.d.comb += self.o_overflow.eq(Cat(*overflow).any())
        return m


def _wire_flit(wl):
    """The wire's content as a flit for :class:`~hdl.common.credit.LinkDelay`."""
    from amaranth.lib import data
    return data.StructLayout({"payload": wl, "vc": 1})
