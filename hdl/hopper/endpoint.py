"""SM distributed-shared-memory endpoint (seed 000, "Experimental Setup",
"What NVIDIA's Patent Tells Us", "Why Bidirectional Reads Lose About One Quarter").

One per SM slot.  It generates the traffic of the seed's benchmark from
registers written once per run (kind, size, destination, start delay):
remote loads as 128 B read commands answered by four 32 B data flits, ordinary
remote stores as long writes (command flit then data flits) and TMA bulk puts
(commands of at most 16 KiB, one completion for the whole tile).  It answers
remote reads from its own shared memory, absorbs remote writes into it, owes
and coalesces acknowledgements, keeps the outstanding-transaction counters the
patent describes, and takes part in the cluster barrier that ends a tile.
Payloads are real data: each word holds a pattern naming its owner SM and
address, and after the timed region the endpoint checks every received word.
"""

import enum

from amaranth import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.arbiter import StreamMerge
from ..common.credit import CreditLink, VcInputBuffer
from ..common.flit import VC, Kind
from ..common.queue import sync_fifo
from .ack import AckCoalescer

__all__ = ["Fault", "TrafficKind", "StreamReg", "CheckReg", "GlobalReg", "SmEndpoint", "FlitPipe",
           "pattern_word", "N_STREAMS", "N_CHECKS"]

N_STREAMS = 2   #: traffic streams an SM can issue at once (experiment C needs two)
N_CHECKS = 2    #: inbound regions an SM checks (experiment C receives two payloads)
GRANULE_BYTES = 16  #: payload sizes are multiples of 16 B
#: Weight of a ``last`` flit's word in the framing check (``o_frames``).
LAST_WEIGHT = 1 << 16


class TrafficKind(enum.IntEnum):
    """What a stream issues."""

    NONE = 0
    LOAD = 1   #: remote ld.shared::cluster
    STORE = 2  #: ordinary store to a mapped remote shared-memory address
    TMA = 3    #: TMA shared-to-shared remote put


class Fault(enum.IntEnum):
    """Fault injected into the first data flit an SM receives in a run, into
    the first credit its arrival buffer returns, or (``MISFRAMED``) into the
    checks' reading of the first write command.

    For testing that the checks catch every kind of loss; never set in
    experiments.
    """

    NONE = 0
    CORRUPT = 1      #: flip one data bit before writing it
    DROP = 2         #: discard the flit (not written, not counted, not acknowledged)
    DUPLICATE = 3    #: count the flit twice
    LOSE_CREDIT = 4  #: withhold the first credit pulse (both VCs' if they coincide)
    MISFRAMED = 5    #: the first write command announces one word fewer than it carries
    FULL_MASK = 6    #: write the first data flit with every granule enabled, masked or not


class StreamReg(enum.IntEnum):
    """Per-stream registers; stream ``s`` at ``8 * s + reg``."""

    KIND = 0         #: :class:`TrafficKind`
    DST = 1          #: target SM slot
    LOCAL_BASE = 2   #: word address in this SM (store/TMA source, load destination)
    REMOTE_BASE = 3  #: word address in the target SM
    GRANULES = 4     #: payload size in 16 B granules
    DELAY = 5        #: cycles after start before the first flit


class CheckReg(enum.IntEnum):
    """Per inbound-region registers; region ``c`` at ``16 + 4 * c + reg``."""

    SRC = 0        #: SM slot whose memory the data came from
    SRC_BASE = 1   #: word address of the region in that SM
    LOCAL_BASE = 2 #: word address of the region here
    GRANULES = 3   #: region size in 16 B granules (0: no region)


class GlobalReg(enum.IntEnum):
    """Per-SM cluster (barrier) and shared-memory fill registers."""

    MEMBER = 24       #: 1 if this SM runs a cluster rank
    LEADER = 25       #: slot of rank 0, which gathers and releases the barrier
    MEMBER_MASK = 26  #: bit per slot of the cluster's members (used by the leader)
    N_MEMBERS = 27    #: cluster size
    FILL_WORDS = 28   #: words the fill writes, from word 0 (0, or more than the memory: all)


def pattern_word(slot, addr, seed, lanes):
    """Payload pattern of word ``addr`` owned by SM ``slot``.

    Each 32-bit lane ``i`` is ``{seed[8:0], slot[4:0], addr[13:0], i[3:0]}``, so
    every 4 B of every SM's memory is distinct: a lost, misplaced or
    corrupted word cannot pass the check.  Works on Python ints (returns an
    int) and on Amaranth values (returns a value of ``32 * lanes`` bits).
    """
    if all(isinstance(x, int) for x in (slot, addr, seed)):
        word = 0
        for i in range(lanes):
            lane = (i & 0xF) | (addr & 0x3FFF) << 4 | (slot & 0x1F) << 18 | (seed & 0x1FF) << 23
            word |= lane << (32 * i)
        return word
    # narrower values zero-extended, so every caller's word has one layout
    # whatever the width of its address expression (a smaller shared memory)
    slot5 = Cat(slot, Const(0, 5))[:5]
    addr14 = Cat(addr, Const(0, 14))[:14]
    return Cat(*(Cat(Const(i, 4), addr14, slot5, Const(seed, 9) if isinstance(seed, int)
                     else seed[:9]) for i in range(lanes)))


class FlitPipe(wiring.Component):
    """Memory read pipeline that turns flit headers into flits (seed 000: an
    SM's shared-memory read path feeding its remote stores, TMA puts and
    read responses).  Clock: SM clock (domain ``sync``).

    A header issued at cycle ``t`` with ``i_use_mem`` takes its data from the
    word read at ``i_mem_addr``; it reaches the output FIFO ``latency`` cycles
    later.  ``o_ready`` says a header may be issued this cycle, counting the
    headers still in the pipeline, so the FIFO never overflows.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    addr_bits : int
        Word-address width of the memory.
    latency : int
        Cycles from issue to the output FIFO, at least 1.

    Members
    -------
    i_valid : In(1)
        Issue the header this cycle (only while ``o_ready``).
    i_flit : In(flit_layout)
        Header (every field; ``data`` is kept unless ``i_use_mem``).
    i_use_mem, i_mem_addr : In(1), In(addr_bits)
        Replace the data with the memory word at this address.
    o_rd_addr, o_rd_en : Out(addr_bits), Out(1)
        To a synchronous memory read port.
    i_rd_data : In(flit_layout["data"].width)
        From that read port, one cycle after ``o_rd_en``.
    o_ready : Out(1)
        Room for one more header.
    o : Out(stream.Signature(flit_layout))
        Finished flits.

    Raises
    ------
    ValueError
        If ``latency`` is not a positive integer.
    """

    def __init__(self, *, flit_layout, addr_bits, latency=1):
        if not isinstance(latency, int) or latency < 1:
            raise ValueError(f"latency must be a positive integer, not {latency!r}")
        self.flit_layout, self.latency = flit_layout, latency
        self.depth = latency + 2
        data_bits = flit_layout["data"].width
        super().__init__({
            "i_valid": In(1), "i_flit": In(flit_layout),
            "i_use_mem": In(1), "i_mem_addr": In(addr_bits),
            "o_rd_addr": Out(addr_bits), "o_rd_en": Out(1),
            "i_rd_data": In(data_bits),
            "o_ready": Out(1),
            "o": Out(stream.Signature(flit_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        layout = self.flit_layout
        m.submodules.queue = queue = sync_fifo(width=layout.size, depth=self.depth)
        valid = [Signal(name=f"v{k}") for k in range(self.latency)]
        flits = [Signal(layout, name=f"f{k}") for k in range(self.latency)]
        use_mem = Signal()
        merged = [Signal(layout, name=f"merged{k}") for k in range(self.latency)]

        inflight = sum(v.as_unsigned() for v in valid)
        m.d.comb += self.o_ready.eq(queue.level + inflight < self.depth)
        issue = self.i_valid & self.o_ready
        m.d.comb += [self.o_rd_addr.eq(self.i_mem_addr), self.o_rd_en.eq(issue)]
        m.d.sync += [valid[0].eq(issue), flits[0].eq(self.i_flit), use_mem.eq(self.i_use_mem)]
        m.d.comb += merged[0].eq(flits[0])
        with m.If(use_mem):
            m.d.comb += merged[0].data.eq(self.i_rd_data)
        for k in range(1, self.latency):
            m.d.sync += [valid[k].eq(valid[k - 1]), flits[k].eq(merged[k - 1])]
            m.d.comb += merged[k].eq(flits[k])
        m.d.comb += [
            queue.w_en.eq(valid[-1]),
            queue.w_data.eq(merged[-1]),
            self.o.valid.eq(queue.r_rdy),
            self.o.payload.eq(queue.r_data),
            queue.r_en.eq(self.o.ready),
        ]
        return m


class SmEndpoint(wiring.Component):
    """DSM endpoint of one SM slot.  Clock: SM clock (``sync``).

    Parameters
    ----------
    cfg : DsmConfig
        Model configuration (structural fields are used).
    flit_layout : StructLayout
        Flit layout.
    checks : bool
        Build the testbench-only logic: the arrival check, the post-run
        check, the outstanding-limit check and the fault injection.  Without
        it (``False``, for synthesis: the fabric alone) ``o_errors``,
        ``o_first_wrong``, ``o_first_wrong_cycle``, ``o_first_bad``,
        ``o_limits_broken`` and ``o_verify_done`` stay 0 and ``i_fault`` is
        ignored; every experiment runs with checks.

    One Verilog module serves every SM (:class:`~hdl.common.shared.SharedModule`):
    the SM's slot is a port.

    Members
    -------
    i_slot : In(range(n_slots))
        This SM's slot, 0..17; hold it constant.
    cfg_we, cfg_addr, cfg_data : In(1), In(6), In(32)
        Register write port (see :class:`StreamReg`, :class:`CheckReg`,
        :class:`GlobalReg`).
    ctl_init : In(1)
        Pulse: clear the run state, return the SM's queues, arbiters and ACK
        unit to their reset state (so a run does not depend on the runs
        before it; the registers keep their values) and fill shared memory
        (pattern in source words, zero in the regions registered for
        checking), words 0 to
        ``FILL_WORDS - 1`` (:class:`GlobalReg`; every word when 0), one word
        per cycle.
    ctl_start : In(1)
        Pulse: start the run (stream delays count from here).
    ctl_verify : In(1)
        Pulse: check every registered inbound region against the pattern.
    o_req, o_rsp : Out(stream.Signature(flit_layout))
        Request-VC and response-VC flits to the injection shaper.  The
        request VC leaves through one FIFO of ``cfg.request_queue_flits``
        flits in issue order: the streams' read commands, write commands and
        write data merge round-robin into it, so a read command waits behind
        the write data already queued (seed 000: read commands ride the
        blocking request VC with the writes).
    i : In(CreditLink(flit_layout))
        Arriving flits from the GPCARB egress.
    o_init_done, o_verify_done : Out(1)
        Fill / check finished (level, until the next pulse).
    o_local_done : Out(1)
        Every stream issued, every load answered, every write acknowledged and
        every expected granule received.
    o_released : Out(1)
        The cluster barrier released this SM (non-members: always).
    o_busy : Out(1)
        A stream is waiting out its start delay (counts as progress).
    o_rx_granules, o_expected_granules : Out(32)
        16 B granules received by writes and read responses; granules expected.
    o_errors : Out(32)
        Words found wrong by the last check.
    o_first_wrong : Out(32)
        The first data flit of the run that arrived wrong (not inside a
        checked region, from another SM than the region's source, or with
        data other than the source's pattern for that address): bits 0-15
        its word address here, 16-20 its source SM slot, bit 31 set if there
        was one.  Checked as it lands; the post-run check adds lost data.
    o_first_wrong_cycle : Out(32)
        ``i_run_cycle`` when that flit arrived.
    o_first_bad : Out(32)
        The first word the last check found wrong: bits 0-23 its word offset
        in the checked region, bits 24-27 the region (``CheckReg`` set), bit
        31 set if there was one.
    o_outstanding_reads, o_unacked_flits, o_owed_acks : Out(32)
        Outstanding-transaction counters: reads awaiting data, written flits
        awaiting acknowledgement, acknowledgements this SM still owes.
    o_tx_flits : Out(32)
        Flits this SM handed to its injection shaper since reset or the last
        ``ctl_init``, both VCs
        (requests, data, read responses and ACKs; wraps at 2**32): at rest
        it equals the shaper's own count of the flits it sent.
    o_frames : Out(32)
        The framing check of this run, 0 at rest (checks only): what the
        write commands that arrived and the reads this SM issued announce,
        less the data flits that arrived.  A command or read of ``n`` words
        from word ``a`` announces ``n * (a + 1) + n * (n - 1) / 2 +``
        :data:`LAST_WEIGHT` ``* (a + n)``; a data flit at word ``w`` takes
        off ``w + 1``, and :data:`LAST_WEIGHT` ``* (w + 1)`` more if it is
        marked ``last``.  So a command's length or address, or a ``last``
        flag, that disagrees with the data shows, whatever order the routes
        deliver the flits in (modulo 2**32).
    o_overflow : Out(1)
        The arrival buffer overflowed (credit protocol broken).
    o_limits_broken : Out(1)
        Sticky (checks only): more reads were outstanding than
        ``i_max_reads``, or, in a run with no TMA stream (TMA data is not
        held to that limit), more store data flits unacknowledged than
        ``i_max_unacked`` (a count taken below 0, by a read answered or a
        flit acknowledged twice, wraps past its limit too).
    o_occupied : Out(2)
        Arrival queue per VC not empty (for stuck reports).
    i_max_reads : In(8)
        Outstanding 128 B reads allowed (``max_outstanding_reads``).
    i_max_unacked : In(16)
        Store data flits allowed without acknowledgement (``max_unacked_store_flits``).
    i_ack_threshold : In(16)
        Owed flits that force an ACK (``ack_threshold_flits``).
    i_read_turnaround : In(8)
        SM cycles a read command waits before its first memory read.
    i_read_words, i_store_words, i_tma_words : In(4), In(12), In(12)
        Flits per read response, per store packet, per TMA command.
    i_run_cycle : In(32)
        The run's cycle count (the top's watchdog), stamped on the first
        wrong arrival.
    i_fault : In(3)
        :class:`Fault` to inject into this run's first arriving data flit or
        first returned credit.
    """

    def __init__(self, *, cfg, flit_layout, checks=True):
        self.cfg, self.flit_layout, self.checks = cfg, flit_layout, bool(checks)
        self.addr_bits = max(cfg.smem_words - 1, 1).bit_length()
        self.words_per_flit_granules = cfg.flit_bytes // GRANULE_BYTES
        super().__init__({
            "i_slot": In(range(cfg.n_slots)),
            "cfg_we": In(1), "cfg_addr": In(6), "cfg_data": In(32),
            "ctl_init": In(1), "ctl_start": In(1), "ctl_verify": In(1),
            "o_req": Out(stream.Signature(flit_layout)),
            "o_rsp": Out(stream.Signature(flit_layout)),
            "i": In(CreditLink(flit_layout)),
            "o_init_done": Out(1), "o_verify_done": Out(1),
            "o_local_done": Out(1), "o_released": Out(1), "o_busy": Out(1),
            "o_rx_granules": Out(32), "o_expected_granules": Out(32),
            "o_errors": Out(32), "o_first_bad": Out(32),
            "o_outstanding_reads": Out(32), "o_unacked_flits": Out(32),
            "o_owed_acks": Out(32), "o_tx_flits": Out(32), "o_frames": Out(32),
            "o_overflow": Out(1), "o_limits_broken": Out(1), "o_occupied": Out(2),
            "i_max_reads": In(8), "i_max_unacked": In(16), "i_ack_threshold": In(16),
            "i_read_turnaround": In(8), "i_read_words": In(4),
            "i_store_words": In(12), "i_tma_words": In(12),
            "i_fault": In(3), "i_run_cycle": In(32),
            "o_first_wrong": Out(32), "o_first_wrong_cycle": Out(32),
        })

    # ------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        cfg, layout, slot = self.cfg, self.flit_layout, self.i_slot
        abits = self.addr_bits
        gpf = self.words_per_flit_granules          # granules per flit
        lanes = cfg.flit_bytes // 4
        full_mask = (1 << gpf) - 1
        data_bits = cfg.flit_bytes * 8
        # Valid-granule mask of a flit holding `k` granules (index 0 means all).
        mask_of = Array([full_mask] + [(1 << k) - 1 for k in range(1, gpf)])

        # --- registers --------------------------------------------------
        regs = {}

        def reg(addr, width, name):
            r = Signal(width, name=name)
            regs[addr] = r
            return r

        s_kind = [reg(8 * s + StreamReg.KIND, 2, f"s{s}_kind") for s in range(N_STREAMS)]
        s_dst = [reg(8 * s + StreamReg.DST, 5, f"s{s}_dst") for s in range(N_STREAMS)]
        s_lbase = [reg(8 * s + StreamReg.LOCAL_BASE, abits, f"s{s}_lbase") for s in range(N_STREAMS)]
        s_rbase = [reg(8 * s + StreamReg.REMOTE_BASE, abits, f"s{s}_rbase") for s in range(N_STREAMS)]
        s_gran = [reg(8 * s + StreamReg.GRANULES, abits + 2, f"s{s}_gran") for s in range(N_STREAMS)]
        s_delay = [reg(8 * s + StreamReg.DELAY, 16, f"s{s}_delay") for s in range(N_STREAMS)]
        c_src = [reg(16 + 4 * c + CheckReg.SRC, 5, f"c{c}_src") for c in range(N_CHECKS)]
        c_sbase = [reg(16 + 4 * c + CheckReg.SRC_BASE, abits, f"c{c}_sbase") for c in range(N_CHECKS)]
        c_lbase = [reg(16 + 4 * c + CheckReg.LOCAL_BASE, abits, f"c{c}_lbase") for c in range(N_CHECKS)]
        c_gran = [reg(16 + 4 * c + CheckReg.GRANULES, abits + 2, f"c{c}_gran") for c in range(N_CHECKS)]
        member = reg(GlobalReg.MEMBER, 1, "member")
        leader = reg(GlobalReg.LEADER, 5, "leader")
        member_mask = reg(GlobalReg.MEMBER_MASK, cfg.n_slots, "member_mask")
        n_members = reg(GlobalReg.N_MEMBERS, 5, "n_members")
        fill_words = reg(GlobalReg.FILL_WORDS, 32, "fill_words")
        with m.If(self.cfg_we):
            with m.Switch(self.cfg_addr):
                for addr, r in regs.items():
                    with m.Case(addr):
                        m.d.sync += r.eq(self.cfg_data)
        expected = Signal(32)
        m.d.comb += expected.eq(sum(g.as_unsigned() for g in c_gran))
        m.d.comb += self.o_expected_granules.eq(expected)

        # --- shared memory ------------------------------------------------
        m.submodules.smem = smem = memory.Memory(shape=data_bits, depth=cfg.smem_words, init=[])
        wport = smem.write_port(granularity=GRANULE_BYTES * 8)
        rports = [smem.read_port() for _ in range(N_STREAMS + 1)]

        # --- run state ------------------------------------------------------
        # ctl_init returns every block of the SM's datapath (arbiter pointers,
        # queues, the ACK unit's counts and sequence number) to its reset
        # state, so that a run's cycles do not depend on the runs before it.
        def cleared(block):
            return ResetInserter(self.ctl_init)(block)

        running = Signal()
        m.d.sync += running.eq(Mux(self.ctl_init, 0, running | self.ctl_start))
        outstanding = Signal(16)
        unacked = Signal(32)
        rx_granules = Signal(32)
        tx_flits = Signal(32)
        m.d.comb += [
            self.o_outstanding_reads.eq(outstanding),
            self.o_unacked_flits.eq(unacked),
            self.o_rx_granules.eq(rx_granules),
            self.o_tx_flits.eq(tx_flits),
        ]

        # --- stream generators ----------------------------------------------
        words_per_read = self.i_read_words
        store_words = self.i_store_words
        tma_words = self.i_tma_words
        pipes = []
        issue_read = []
        read_issues = []            # (issued, reply word, words) per stream, for the checks
        issue_data = []
        streams_idle = []
        delays_busy = []
        stream_kinds = []
        for s in range(N_STREAMS):
            pipe = FlitPipe(flit_layout=layout, addr_bits=abits, latency=1)
            m.submodules[f"pipe{s}"] = cleared(pipe)
            pipes.append(pipe)
            rp = rports[s]
            m.d.comb += [rp.en.eq(1), pipe.i_rd_data.eq(rp.data)]

            kind = Signal(2, name=f"g{s}_kind")
            remaining = Signal(abits + 2, name=f"g{s}_remaining")
            local = Signal(abits, name=f"g{s}_local")
            remote = Signal(abits, name=f"g{s}_remote")
            delay = Signal(16, name=f"g{s}_delay")
            packet_left = Signal(12, name=f"g{s}_packet_left")
            with m.If(self.ctl_start):
                m.d.sync += [kind.eq(s_kind[s]), remaining.eq(Mux(s_kind[s] == 0, 0, s_gran[s])),
                             local.eq(s_lbase[s]), remote.eq(s_rbase[s]),
                             delay.eq(s_delay[s]), packet_left.eq(0)]
            with m.Elif(self.ctl_init):
                m.d.sync += remaining.eq(0)
            with m.Elif(running & (delay != 0)):
                m.d.sync += delay.eq(delay - 1)
            streams_idle.append(remaining == 0)
            stream_kinds.append(kind)
            delays_busy.append(running & (delay != 0) & (remaining != 0))

            go = Signal(name=f"g{s}_go")
            m.d.comb += go.eq(running & (delay == 0) & (remaining != 0) & pipe.o_ready)
            hdr = pipe.i_flit
            m.d.comb += [hdr.src.eq(slot), hdr.dst.eq(s_dst[s]), hdr.vc.eq(VC.REQ),
                         pipe.i_mem_addr.eq(local)]
            rd = Signal(name=f"g{s}_issue_read")
            wd = Signal(name=f"g{s}_issue_data")
            issue_read.append(rd)
            issue_data.append(wd)

            # Loads: one read command per 128 B response quantum.
            read_gran = Signal(8, name=f"g{s}_read_gran")
            m.d.comb += read_gran.eq(Mux(remaining > words_per_read * gpf,
                                         words_per_read * gpf, remaining))
            read_words = Signal(4, name=f"g{s}_read_words")
            m.d.comb += read_words.eq((read_gran + gpf - 1) // gpf)
            # Writes: one command per packet, then its data flits.
            packet_words = Signal(12, name=f"g{s}_packet_words")
            m.d.comb += packet_words.eq(Mux(kind == TrafficKind.TMA, tma_words, store_words))
            left_words = Signal(abits + 2, name=f"g{s}_left_words")
            m.d.comb += left_words.eq((remaining + gpf - 1) // gpf)
            last_mask = Signal(gpf, name=f"g{s}_last_mask")
            m.d.comb += last_mask.eq(Mux(remaining >= gpf, full_mask, mask_of[remaining % gpf]))
            if s == 0:
                read_room = outstanding < self.i_max_reads
            else:
                read_room = (outstanding + issue_read[0]) < self.i_max_reads
            store_room = (unacked + sum(d.as_unsigned() for d in issue_data[:s])) \
                < self.i_max_unacked

            read_issues.append((rd, local, read_words))
            with m.Switch(kind):
                with m.Case(TrafficKind.LOAD):
                    m.d.comb += [
                        hdr.kind.eq(Kind.RD_CMD), hdr.addr.eq(remote), hdr.last.eq(1),
                        hdr.data.eq(Cat(local, read_words,
                                        mask_of[read_gran % gpf])),
                    ]
                    with m.If(go & read_room):
                        m.d.comb += [pipe.i_valid.eq(1), rd.eq(1)]
                        m.d.sync += [remaining.eq(remaining - read_gran),
                                     local.eq(local + read_words), remote.eq(remote + read_words)]
                with m.Case(TrafficKind.STORE, TrafficKind.TMA):
                    with m.If(packet_left == 0):
                        m.d.comb += [hdr.kind.eq(Kind.WR_CMD), hdr.addr.eq(remote),
                                     hdr.data.eq(Mux(left_words < packet_words,
                                                     left_words, packet_words)),
                                     hdr.last.eq(0)]
                        with m.If(go):
                            m.d.comb += pipe.i_valid.eq(1)
                            m.d.sync += packet_left.eq(Mux(left_words < packet_words,
                                                           left_words, packet_words))
                    with m.Else():
                        m.d.comb += [hdr.kind.eq(Kind.WR_DATA), hdr.addr.eq(remote),
                                     hdr.mask.eq(last_mask), hdr.last.eq(packet_left == 1),
                                     pipe.i_use_mem.eq(1)]
                        with m.If(go & ((kind == TrafficKind.TMA) | store_room)):
                            m.d.comb += [pipe.i_valid.eq(1), wd.eq(1)]
                            m.d.sync += [packet_left.eq(packet_left - 1),
                                         remaining.eq(Mux(remaining > gpf, remaining - gpf, 0)),
                                         local.eq(local + 1), remote.eq(remote + 1)]
        m.d.comb += self.o_busy.eq(Cat(*delays_busy).any())

        req_merge = StreamMerge(layout, N_STREAMS)
        m.submodules.req_merge = cleared(req_merge)
        for s, pipe in enumerate(pipes):
            wiring.connect(m, pipe.o, req_merge.i[s])

        # --- arrivals -----------------------------------------------------
        arrivals = VcInputBuffer(flit_layout=layout, depth=cfg.link_buffer_flits)
        m.submodules.arrivals = cleared(arrivals)
        if self.checks:
            # Fault.LOSE_CREDIT: the first credit pulse of the run never
            # reaches the egress port that sent the flit.
            credit_armed = Signal()
            m.d.comb += [arrivals.i.valid.eq(self.i.valid), arrivals.i.flit.eq(self.i.flit),
                         self.i.credit.eq(Mux(credit_armed, 0, arrivals.i.credit))]
            with m.If(self.ctl_start):
                m.d.sync += credit_armed.eq(self.i_fault == Fault.LOSE_CREDIT)
            with m.Elif(arrivals.i.credit.any()):
                m.d.sync += credit_armed.eq(0)
        else:
            wiring.connect(m, wiring.flipped(self.i), arrivals.i)
        m.d.comb += [self.o_overflow.eq(arrivals.o_overflow),
                     self.o_occupied.eq(arrivals.o_occupied)]
        # Each queued read command carries its arrival time (SM cycles, 16 bits).
        read_queue = sync_fifo(width=layout.size + 16, depth=cfg.responder_queue)
        m.submodules.read_queue = cleared(read_queue)
        now = Signal(16)
        m.d.sync += now.eq(now + 1)
        rsp_in, req_in = arrivals.o[VC.RSP], arrivals.o[VC.REQ]
        take_rsp = Signal()
        take_req = Signal()
        m.d.comb += [
            take_rsp.eq(rsp_in.valid),
            take_req.eq(~rsp_in.valid & req_in.valid &
                        ((req_in.payload.kind != Kind.RD_CMD) | read_queue.w_rdy)),
            rsp_in.ready.eq(take_rsp),
            req_in.ready.eq(take_req),
        ]
        got = Signal(layout)
        got_valid = Signal()
        m.d.comb += [got.eq(Mux(take_rsp, rsp_in.payload.as_value(), req_in.payload.as_value())),
                     got_valid.eq(take_rsp | take_req)]
        arrived_data = got_valid & ((got.kind == Kind.WR_DATA) | (got.kind == Kind.RD_DATA))
        hit = Signal(3)
        if self.checks:
            # A fault, when armed, hits the first data flit of the run.
            fault_armed = Signal()
            m.d.comb += hit.eq(Mux(fault_armed & arrived_data, self.i_fault, Fault.NONE))
            with m.If(self.ctl_start):
                m.d.sync += fault_armed.eq(self.i_fault != Fault.NONE)
            with m.Elif(arrived_data):
                m.d.sync += fault_armed.eq(0)
        is_data = arrived_data & (hit != Fault.DROP)
        m.d.comb += [
            read_queue.w_data.eq(Cat(got.as_value(), now)),
            read_queue.w_en.eq(got_valid & (got.kind == Kind.RD_CMD)),
        ]

        # --- fill / write port ----------------------------------------------
        fill_addr = Signal(abits + 1)
        filling = Signal()
        # A run's regions (and any gaps the runs leave between them) lie below
        # FILL_WORDS, so words past them are neither read nor checked and the
        # fill can stop there.
        fill_last = Signal(abits + 1)
        m.d.comb += fill_last.eq(Mux((fill_words != 0) & (fill_words <= cfg.smem_words),
                                     fill_words - 1, cfg.smem_words - 1))
        in_check = Signal()
        m.d.comb += in_check.eq(Cat(*(((fill_addr >= c_lbase[c]) &
                                       (fill_addr < c_lbase[c] + (c_gran[c] + gpf - 1) // gpf))
                                      for c in range(N_CHECKS))).any())
        with m.If(filling):
            m.d.comb += [
                wport.addr.eq(fill_addr),
                wport.data.eq(Mux(in_check, 0, pattern_word(slot, fill_addr,
                                                            cfg.data_seed, lanes))),
                wport.en.eq(full_mask),
            ]
            m.d.sync += fill_addr.eq(fill_addr + 1)
            with m.If(fill_addr == fill_last):
                m.d.sync += [filling.eq(0), self.o_init_done.eq(1)]
        with m.Else():
            m.d.comb += [wport.addr.eq(got.addr),
                         wport.data.eq(got.data ^ (hit == Fault.CORRUPT)),
                         wport.en.eq(Mux(is_data, Mux(hit == Fault.FULL_MASK, full_mask,
                                                      got.mask), 0))]
        with m.If(self.ctl_init):
            m.d.sync += [filling.eq(1), fill_addr.eq(0), self.o_init_done.eq(0)]

        popcount = sum(got.mask[k].as_unsigned() for k in range(gpf))
        with m.If(self.ctl_init):
            m.d.sync += [rx_granules.eq(0), outstanding.eq(0), unacked.eq(0)]
        with m.Else():
            with m.If(is_data):
                m.d.sync += rx_granules.eq(rx_granules + Mux(hit == Fault.DUPLICATE,
                                                             2 * popcount, popcount))
            read_done = got_valid & (got.kind == Kind.RD_DATA) & got.last
            m.d.sync += outstanding.eq(outstanding + sum(r.as_unsigned() for r in issue_read)
                                       - read_done)
            acked = Mux(got_valid & (got.kind == Kind.ACK), got.data[:16], 0)
            m.d.sync += unacked.eq(unacked + sum(d.as_unsigned() for d in issue_data) - acked)
        if self.checks:
            # A stream issues only while its count, with what the stream
            # before it issues this cycle, is below the limit: neither count
            # can pass its limit while the limits hold still (set between
            # runs).  TMA data is not held to the store limit, so with a TMA
            # stream running only the read limit is checked.
            has_tma = Cat(*(k == TrafficKind.TMA for k in stream_kinds)).any()
            with m.If((outstanding > self.i_max_reads)
                      | (~has_tma & (unacked > self.i_max_unacked))):
                m.d.sync += self.o_limits_broken.eq(1)

        # --- responder: answers remote reads ---------------------------------
        resp = FlitPipe(flit_layout=layout, addr_bits=abits, latency=1)
        m.submodules.responder = cleared(resp)
        rp = rports[N_STREAMS]
        m.d.comb += [rp.en.eq(1), resp.i_rd_data.eq(rp.data)]
        cmd = layout(read_queue.r_data[:layout.size])
        waited = Signal(16)
        m.d.comb += waited.eq(now - read_queue.r_data[layout.size:])
        ripe = read_queue.r_rdy & (waited >= self.i_read_turnaround)
        reply = cmd.data[:abits]
        n_words = cmd.data[abits:abits + 4]
        last_mask_r = cmd.data[abits + 4:abits + 4 + gpf]
        word = Signal(4)
        final = word == n_words - 1
        h = resp.i_flit
        m.d.comb += [
            h.kind.eq(Kind.RD_DATA), h.vc.eq(VC.RSP), h.src.eq(slot), h.dst.eq(cmd.src),
            h.addr.eq(reply + word), h.mask.eq(Mux(final, last_mask_r, full_mask)),
            h.last.eq(final),
            resp.i_use_mem.eq(1), resp.i_mem_addr.eq(cmd.addr + word),
            resp.i_valid.eq(ripe),
        ]
        with m.If(ripe & resp.o_ready):
            m.d.sync += word.eq(Mux(final, 0, word + 1))
            m.d.comb += read_queue.r_en.eq(final)

        # --- acknowledgements --------------------------------------------------
        ack = AckCoalescer(flit_layout=layout, n_nodes=cfg.n_slots,
                           line_words=cfg.read_response_flits)
        m.submodules.ack = cleared(ack)
        m.d.comb += [
            ack.i_slot.eq(slot),
            ack.i_threshold.eq(self.i_ack_threshold),
            ack.i_written.eq(is_data & (got.kind == Kind.WR_DATA)),
            ack.i_src.eq(got.src),
            self.o_owed_acks.eq(ack.o_owed),
        ]

        # --- cluster barrier -----------------------------------------------
        arrived = Signal()
        released = Signal()
        arrivals_seen = Signal(5)
        releasing = Signal()
        release_slot = Signal(5)
        bar = Signal(layout)
        bar_valid = Signal()
        bar_ready = Signal()
        is_leader = leader == slot
        local_done = Signal()
        # A TMA tile completes at its destination (the mbarrier's transaction
        # count, here: every expected granule received); a store completes when
        # the source holds every acknowledgement; a load with its last response.
        # A count above `expected` (duplicated data) still arrives, so the run
        # ends and the data check names the surplus.
        has_store = Cat(*(k == TrafficKind.STORE for k in stream_kinds)).any()
        m.d.comb += local_done.eq(running & Cat(*streams_idle).all() & (outstanding == 0)
                                  & ((unacked == 0) | ~has_store) & (rx_granules >= expected))
        m.d.comb += [self.o_local_done.eq(local_done),
                     self.o_released.eq(~member | released)]
        with m.If(self.ctl_init):
            m.d.sync += [arrived.eq(0), released.eq(0), arrivals_seen.eq(0),
                         releasing.eq(0), bar_valid.eq(0)]
        with m.Else():
            got_arrive = got_valid & (got.kind == Kind.BAR_ARRIVE)
            self_arrive = Signal()
            with m.If(member & local_done & ~arrived):
                m.d.sync += arrived.eq(1)
                with m.If(is_leader):
                    m.d.comb += self_arrive.eq(1)
                with m.Else():
                    m.d.sync += [bar_valid.eq(1), bar.kind.eq(Kind.BAR_ARRIVE),
                                 bar.dst.eq(leader)]
            m.d.sync += arrivals_seen.eq(arrivals_seen + got_arrive + self_arrive)
            with m.If(got_valid & (got.kind == Kind.BAR_RELEASE)):
                m.d.sync += released.eq(1)
            with m.If(is_leader & member & ~releasing & ~released & (arrivals_seen == n_members)):
                m.d.sync += [releasing.eq(1), release_slot.eq(0)]
            with m.If(releasing & ~bar_valid):
                with m.If(release_slot == cfg.n_slots):
                    m.d.sync += [releasing.eq(0), released.eq(1)]
                with m.Else():
                    m.d.sync += release_slot.eq(release_slot + 1)
                    with m.If(member_mask.bit_select(release_slot, 1) & (release_slot != slot)):
                        m.d.sync += [bar_valid.eq(1), bar.kind.eq(Kind.BAR_RELEASE),
                                     bar.dst.eq(release_slot)]
            with m.If(bar_valid & bar_ready):
                m.d.sync += bar_valid.eq(0)
        m.d.comb += [bar.src.eq(slot), bar.vc.eq(VC.RSP), bar.last.eq(1)]

        rsp_merge = StreamMerge(layout, 3)
        m.submodules.rsp_merge = cleared(rsp_merge)
        wiring.connect(m, resp.o, rsp_merge.i[0])
        wiring.connect(m, ack.o, rsp_merge.i[1])
        m.d.comb += [rsp_merge.i[2].valid.eq(bar_valid), rsp_merge.i[2].payload.eq(bar),
                     bar_ready.eq(rsp_merge.i[2].ready)]
        wiring.connect(m, rsp_merge.o, wiring.flipped(self.o_rsp))
        # The request VC is one FIFO in issue order: a read command waits behind
        # the write data queued before it.
        req_queue = sync_fifo(width=layout.size, depth=cfg.request_queue_flits)
        m.submodules.req_queue = cleared(req_queue)
        m.d.comb += [req_queue.w_data.eq(req_merge.o.payload),
                     req_queue.w_en.eq(req_merge.o.valid),
                     req_merge.o.ready.eq(req_queue.w_rdy),
                     self.o_req.valid.eq(req_queue.r_rdy),
                     self.o_req.payload.eq(req_queue.r_data),
                     req_queue.r_en.eq(self.o_req.ready)]
        # every flit handed to the shaper, counted since reset or ctl_init
        with m.If(self.ctl_init):
            m.d.sync += tx_flits.eq(0)
        with m.Else():
            m.d.sync += tx_flits.eq(tx_flits
                                    + (self.o_req.valid & self.o_req.ready).as_unsigned()
                                    + (self.o_rsp.valid & self.o_rsp.ready).as_unsigned())
        m.d.comb += ack.i_idle.eq(~req_merge.o.valid & ~req_queue.r_rdy & ~resp.o.valid
                                  & ~bar_valid)

        # the read ports' addresses: the streams' and the responder's pipes
        # (and, with the checks, the post-run check's while it runs)
        addrs = [pipe.o_rd_addr for pipe in pipes] + [resp.o_rd_addr]
        if self.checks:
            self._checks(m, got, got_valid, hit, is_data, read_issues, rports, addrs, c_src,
                         c_sbase, c_lbase, c_gran)
        else:
            m.d.comb += [rp.addr.eq(addr) for rp, addr in zip(rports, addrs)]
        return m

    def _checks(self, m, got, got_valid, hit, is_data, read_issues, rports, addrs, c_src,
                c_sbase, c_lbase, c_gran):
        """The testbench-only logic: the arrival check of every data flit, the
        framing check (``o_frames``: of the write commands in ``got`` and the
        reads in ``read_issues``, ``(issued, reply word, words)`` per stream)
        and the post-run check of every checked region, one word per read
        port each cycle (``rports``, idle after the run; ``addrs`` their
        addresses otherwise).  The post-run check requires the granules of a
        region's last word past its end to hold the fill's zero."""
        cfg = self.cfg
        abits = self.addr_bits
        gpf = self.words_per_flit_granules
        lanes = cfg.flit_bytes // 4
        full_mask = (1 << gpf) - 1
        data_bits = cfg.flit_bytes * 8
        mask_of = Array([full_mask] + [(1 << k) - 1 for k in range(1, gpf)])
        # --- arrival check: each data flit against its region's source pattern ------
        written = got.data ^ (hit == Fault.CORRUPT)
        fits = []
        for c in range(N_CHECKS):
            inside = (got.addr >= c_lbase[c]) & (got.addr < c_lbase[c] + (c_gran[c] + gpf - 1) // gpf)
            want = pattern_word(c_src[c], c_sbase[c] + (got.addr - c_lbase[c]), cfg.data_seed,
                                lanes)
            same = Cat(*(~got.mask[k] | (written.word_select(k, GRANULE_BYTES * 8)
                                         == want.word_select(k, GRANULE_BYTES * 8))
                         for k in range(gpf))).all()
            fits.append(inside & (got.src == c_src[c]) & same)
        wrong = Signal()
        m.d.comb += wrong.eq(is_data & ~Cat(*fits).any())
        with m.If(self.ctl_start):
            m.d.sync += [self.o_first_wrong.eq(0), self.o_first_wrong_cycle.eq(0)]
        with m.Elif(wrong & ~self.o_first_wrong[31]):
            m.d.sync += [self.o_first_wrong.eq(got.addr[:16] | (got.src[:5] << 16) | (1 << 31)),
                         self.o_first_wrong_cycle.eq(self.i_run_cycle)]

        # --- framing: the headers announce exactly the data that came ------
        def announced(words, first):
            # sum of (w + 1) over words first..first+words-1, and the last's
            tri = Signal(32)
            m.d.comb += tri.eq((words * words - words) >> 1)
            return words * (first + 1) + tri + LAST_WEIGHT * (first + words)

        frames = Signal(32)
        m.d.comb += self.o_frames.eq(frames)
        command = got_valid & (got.kind == Kind.WR_CMD)
        cmd_fault_armed = Signal()
        with m.If(self.ctl_start):
            m.d.sync += cmd_fault_armed.eq(self.i_fault == Fault.MISFRAMED)
        with m.Elif(command):
            m.d.sync += cmd_fault_armed.eq(0)
        cmd_words = Signal(12)
        m.d.comb += cmd_words.eq(got.data[:12] - cmd_fault_armed)
        came = Signal(32)
        m.d.comb += came.eq((got.addr + 1) * Mux(got.last, LAST_WEIGHT + 1, 1))
        terms = [Mux(command, announced(cmd_words, got.addr), 0)]
        terms += [Mux(issued, announced(words, first), 0) for issued, first, words in read_issues]
        with m.If(self.ctl_init):
            m.d.sync += frames.eq(0)
        with m.Else():
            m.d.sync += frames.eq(frames + sum(terms) - Mux(is_data, came, 0))

        # --- verification (after the timed region) ------------------------
        lanes_v = len(rports)       # words checked per cycle
        verifying = Signal()
        check = Signal(range(N_CHECKS + 1))
        offset = Signal(abits + 2)
        cmp_valid = Signal(lanes_v)
        cmp_expect = [Signal(data_bits, name=f"cmp_expect{k}") for k in range(lanes_v)]
        cmp_mask = [Signal(gpf, name=f"cmp_mask{k}") for k in range(lanes_v)]
        errors = Signal(32)
        m.d.comb += self.o_errors.eq(errors)
        cmp_where = Signal(28)      # region and word offset of lane 0's word
        c_words = Array((g + gpf - 1) // gpf for g in c_gran)
        c_gran_a = Array(c_gran)
        cur_words = c_words[check]
        v_addr = Array(c_lbase)[check] + offset
        for k, (rp, addr) in enumerate(zip(rports, addrs)):
            m.d.comb += rp.addr.eq(Mux(verifying, v_addr + k, addr))
        with m.If(self.ctl_verify):
            m.d.sync += [verifying.eq(1), check.eq(0), offset.eq(0), errors.eq(0),
                         self.o_verify_done.eq(0), cmp_valid.eq(0), self.o_first_bad.eq(0)]
        with m.Elif(verifying):
            with m.If(check == N_CHECKS):
                m.d.sync += [verifying.eq(0), self.o_verify_done.eq(1)]
            with m.Elif(offset >= cur_words):
                m.d.sync += [check.eq(check + 1), offset.eq(0), cmp_valid.eq(0)]
            with m.Else():
                for k in range(lanes_v):
                    granules_left = c_gran_a[check] - (offset + k) * gpf
                    m.d.sync += [
                        cmp_valid[k].eq(offset + k < cur_words),
                        cmp_expect[k].eq(pattern_word(Array(c_src)[check],
                                                      Array(c_sbase)[check] + offset + k,
                                                      cfg.data_seed, lanes)),
                        cmp_mask[k].eq(Mux(granules_left >= gpf, full_mask,
                                           mask_of[granules_left % gpf])),
                    ]
                m.d.sync += [offset.eq(offset + lanes_v), cmp_where.eq(offset | (check << 24))]
        with m.Else():
            m.d.sync += cmp_valid.eq(0)
        bad = [Signal(name=f"cmp_bad{k}") for k in range(lanes_v)]
        for k, rp in enumerate(rports):
            # a granule past the region's end holds the fill's zero
            m.d.comb += bad[k].eq(cmp_valid[k] & Cat(*(
                rp.data.word_select(j, GRANULE_BYTES * 8)
                != Mux(cmp_mask[k][j], cmp_expect[k].word_select(j, GRANULE_BYTES * 8), 0)
                for j in range(gpf))).any())
        with m.If(Cat(*bad).any()):
            m.d.sync += errors.eq(errors + sum(b.as_unsigned() for b in bad))
        first = Signal(range(lanes_v))
        for k in reversed(range(lanes_v)):
            with m.If(bad[k]):
                m.d.comb += first.eq(k)
        with m.If(Cat(*bad).any() & ~self.o_first_bad[31]):
            m.d.sync += self.o_first_bad.eq((cmp_where + first) | (1 << 31))
