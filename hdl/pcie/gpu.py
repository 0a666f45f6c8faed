"""GPU endpoint: copy engines that write to a peer or host memory and read
from them, a completer that answers reads, and a memory that checks what
lands (seed 001, "3.2.2 Optimization 1: double-buffered streaming through
the CPU", "3.2.3 Optimization 2: enable peer access" and "3.2.4 Optimization
3: a custom D2D copy kernel").

With peer access, ``cudaMemcpyAsync`` from device to device is done by the
source GPU's copy engine as posted memory writes of ``max_payload_bytes``
straight into the peer's memory; a push kernel's stores leave the SMs as
writes of ``kernel_write_bytes``.  A pull kernel on the destination reads
the source's memory: memory reads of ``kernel_read_bytes`` with at most
``read_tags`` outstanding, answered by the source's completer with
completions of at most ``max_payload_bytes``.  Payload data are
:func:`~hdl.pcie.tlp.payload_beat` of the source and the address, checked
beat by beat where they land.

With peer access off, a copy is staged through two pinned host buffers of
``staging_chunk_bytes``: the source's copy engine writes chunk ``k`` into
host memory (device to host, writes of ``max_payload_bytes``) once the
destination has read chunk ``k - 2`` out of the same buffer; the
destination's copy engine reads chunk ``k`` (host to device, reads of
``max_read_request_bytes``) once all of it has landed.  Each side sees the
other's progress ``host_event_cycles`` late (up to twice that when it moves
on while an earlier event is still on its way), as the host thread's CUDA
events tell it.
"""

import enum

from amaranth import Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, StreamToLink, VcInputBuffer
from .completer import Completer
from .link import N_FC
from .tlp import HOST_NODE, STAGE_SHIFT, FcClass, TlpType, payload_beat, staged_beat, tlp_layout

__all__ = ["RX_BEATS", "TAG_CLASH_BIT", "GpuReg", "GpuMode", "GpuEndpoint"]


class GpuReg(enum.IntEnum):
    """Run-time registers of one GPU (``cfg_addr`` low 3 bits)."""

    PEER = 0         #: GPU the copy writes to (push, staged) or reads from (pull)
    BYTES = 1        #: bytes to copy (a multiple of the TLP size, staged of the chunk; 0: none)
    TLP_BYTES = 2    #: bytes per write (push) or per read request (pull, staged)
    EXPECT = 3       #: bytes this GPU's memory should take in (staged: a multiple of the chunk)
    SRC = 4          #: GPU those bytes come from
    MODE = 5         #: :class:`GpuMode`
    TAGS = 6         #: reads outstanding at most (pull, staged), 1 to 256 (others are clamped)


class GpuMode(enum.IntEnum):
    """What the copy engines do (register ``MODE``)."""

    PUSH = 0     #: posted writes of BYTES into PEER's memory
    PULL = 1     #: reads of BYTES of PEER's memory, completions into this GPU's
    STAGED = 2   #: peer access off: BYTES to PEER and EXPECT from SRC staged through
                 #: host memory, double-buffered (device to host, then host to device)


#: Beats per flow-control class of a GPU's input buffer by default, the
#: credits its link's receiver advertises (a model choice; the seed gives no
#: buffer sizes).
RX_BEATS = 16

#: ``o_first_bad`` bit of a read issued on a tag still in use (checks only).
TAG_CLASH_BIT = 1 << 30


class GpuEndpoint(wiring.Component):
    """One GPU: two copy engines (writes and reads), a completer and checked
    memory.  Clock: the 1 GHz model clock.

    Parameters
    ----------
    cfg : PcieConfig
    gpu : int
        Node index (0..``gpus``-1); the source of the data it sends.
    tx_credits : int
        Beats per class the link's transmit queue holds (credits of ``o``).
    rx_beats : int
        Beats per class of the input buffer (credits the link's receiver
        gets); default :data:`RX_BEATS`.
    checks : bool
        Build the testbench-only memory check (every beat's source, address
        and data against what should land there).  Without it (``False``,
        for synthesis) ``o_errors`` and ``o_first_bad*`` stay 0; the byte and
        completion bookkeeping that ends a copy is kept.  Every experiment
        runs with checks.

    Members
    -------
    o : Out(CreditLink(tlp_layout(cfg), 3))
        TLPs to the link: writes (posted), read requests (non-posted) and
        completions.
    i : In(CreditLink(tlp_layout(cfg), 3))
        TLPs from the link.
    i_we, i_reg (3), i_data (32) : In
        Register write (:class:`GpuReg`).
    i_start : In(1)
        Start the copy; clears the counters and returns the transmitter and
        receive buffer (arbiter pointer, queues) to their reset state.
    i_now : In(32)
        Cycle counter, for the time stamps.
    i_chunk_log2 : In(5)
        log2 of ``staging_chunk_bytes`` (staged copies).
    i_event_cycles : In(32)
        ``host_event_cycles``: how late (to twice that) a staged copy's engines see the other
        side's progress.
    i_peer_consumed : In(32)
        Staged: bytes PEER has taken in (its ``o_rx_bytes``): a staging buffer is
        free again once PEER has read the chunk in it.
    i_src_landed : In(32)
        Staged: bytes of SRC's copy landed in host memory, in order: a chunk may
        be read once all of it has landed.
    o_done : Out(1)
        Copies issued, every read answered, and EXPECT bytes taken in.
    o_tx_bytes, o_rx_bytes : Out(32)
        Payload bytes sent (writes and completions) and taken in this run.
    o_first_tx, o_last_tx : Out(32)
        ``i_now`` at the copy engines' first and last TLP (write or read) of
        this run; 0 until one goes.
    o_first_rx, o_last_rx : Out(32)
        ``i_now`` at the first and last payload beat taken in this run; 0
        until one comes.
    o_errors : Out(16)
        Beats that break the copy: a TLP for another node or from a node other
        than SRC (or, staged, SRC's staging buffer in host memory), a write or
        completion that does not start where the last one of its class ended, a
        read issued on a tag still in use (256 outstanding), a
        data beat outside a TLP or not at the next address, a ``last`` in the
        wrong place, data that is not the source's for that address, or a TLP of
        a kind its class does not carry.
    o_first_bad : Out(32)
        The first such beat of the run, held until the next start: bits 0-7
        its source node, 8-9 its flow-control class (:class:`FcClass`; NP
        alone, with no other field, for a non-posted TLP that is not a memory
        read), 10-11 its TLP type (:class:`TlpType`), 16-23 its destination
        node, bit 30 (:data:`TAG_CLASH_BIT`) set for a memory read this GPU
        issued while all 256 tags were in use (its own node as source, the
        read's address), bit 31 set once a beat was bad.  Of a bad write and
        a bad completion in one cycle, the write.
    o_first_bad_addr, o_first_bad_cycle : Out(32)
        That beat's address and the ``i_now`` it arrived at.
    o_progress : Out(1)
        A beat moved this cycle (for the watchdog).
    o_peer, o_src : Out(4)
        The PEER and SRC registers (to select ``i_peer_consumed`` and
        ``i_src_landed``).
    o_credits_away : Out(3)
        Bit ``class``: the GPU's transmitter does not hold all its credits for the next
        hop (:attr:`~hdl.common.credit.CreditCounter.o_away`); all 0 once the
        machine is at rest.
    """

    def __init__(self, cfg, gpu, *, tx_credits, rx_beats=RX_BEATS, checks=True):
        self.cfg = cfg
        self.checks = bool(checks)
        self.gpu = gpu
        self.tx_credits = tx_credits
        self.rx_beats = rx_beats
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({
            "o": Out(link), "i": In(link),
            "i_we": In(1), "i_reg": In(3), "i_data": In(32), "i_start": In(1), "i_now": In(32),
            "i_chunk_log2": In(5), "i_event_cycles": In(32),
            "i_peer_consumed": In(32), "i_src_landed": In(32),
            "o_done": Out(1), "o_tx_bytes": Out(32), "o_rx_bytes": Out(32),
            "o_first_tx": Out(32), "o_last_tx": Out(32),
            "o_first_rx": Out(32), "o_last_rx": Out(32),
            "o_errors": Out(16), "o_progress": Out(1), "o_peer": Out(4), "o_src": Out(4),
            "o_first_bad": Out(32), "o_first_bad_addr": Out(32), "o_first_bad_cycle": Out(32),
            "o_credits_away": Out(N_FC),
        })

    def _host_of(self, gpu):
        """Host memory node of the socket of GPU ``gpu`` (a Value)."""
        if self.cfg.sockets == 1:
            return HOST_NODE
        per_socket = self.cfg.switches_per_socket * self.cfg.gpus_per_switch
        return HOST_NODE + (gpu >= per_socket)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        dp = cfg.datapath_bytes
        mps = cfg.max_payload_bytes
        layout = tlp_layout(cfg)
        peer = Signal(4)
        total = Signal(32)
        tlp_bytes = Signal(13, init=mps)
        expect = Signal(32)
        expect_src = Signal(4)
        mode = Signal(2)
        tags = Signal(9, init=1)
        with m.If(self.i_we):
            with m.Switch(self.i_reg):
                for reg, sig in ((GpuReg.PEER, peer), (GpuReg.BYTES, total),
                                 (GpuReg.TLP_BYTES, tlp_bytes), (GpuReg.EXPECT, expect),
                                 (GpuReg.SRC, expect_src), (GpuReg.MODE, mode),
                                 (GpuReg.TAGS, tags)):
                    with m.Case(reg):
                        m.d.sync += sig.eq(self.i_data)
        staged = mode == GpuMode.STAGED
        m.d.comb += [self.o_peer.eq(peer), self.o_src.eq(expect_src)]
        my_host = self._host_of(self.gpu)
        src_host = self._host_of(expect_src)

        # the start returns the transmitter and receive buffer to their reset
        # state (arbiter pointer, queues), as it does the links
        send = StreamToLink(flit_layout=layout, credits=self.tx_credits, n_vc=N_FC)
        m.submodules.send = ResetInserter(self.i_start)(send)
        m.d.comb += self.o_credits_away.eq(send.o_credits_away)
        wiring.connect(m, send.o, wiring.flipped(self.o))
        rx = VcInputBuffer(flit_layout=layout, depth=self.rx_beats, n_vc=N_FC)
        m.submodules.rx = ResetInserter(self.i_start)(rx)
        wiring.connect(m, wiring.flipped(self.i), rx.i)

        # --- staged copies: the other side's progress, seen i_event_cycles late ---------
        def seen_chunks(name, nbytes):
            chunks = nbytes >> self.i_chunk_log2
            seen = Signal(32, name=f"seen_{name}")
            pending = Signal(32, name=f"pending_{name}")
            wait = Signal(32, name=f"wait_{name}")
            waiting = Signal(name=f"waiting_{name}")
            with m.If(self.i_start):
                m.d.sync += [seen.eq(0), waiting.eq(0)]
            with m.Elif(waiting):
                with m.If(wait == 0):
                    m.d.sync += [seen.eq(pending), waiting.eq(0)]
                with m.Else():
                    m.d.sync += wait.eq(wait - 1)
            with m.Elif(chunks != seen):
                m.d.sync += [pending.eq(chunks), wait.eq(self.i_event_cycles), waiting.eq(1)]
            return seen
        # double buffering: chunk k may be written once chunk k - 2 has been read
        # out of its buffer, and read once all of it has landed
        consumed = seen_chunks("consumed", self.i_peer_consumed)
        landed = seen_chunks("landed", self.i_src_landed)

        # --- copy engines: whole TLPs --------------------------------------------------
        first = Signal()          # a TLP of this run went out
        outstanding = Signal(9)   # reads requested and not yet fully answered
        requested = Signal(8)     # reads issued, modulo 256: the next read's tag
        answered = Signal()       # a read's last completion byte came in (below)
        tag_limit = Mux(tags == 0, 1, Mux(tags > 256, 256, tags))
        with m.If(self.i_start):
            # a run's stamps (set below) never show an earlier run's times
            m.d.sync += [first.eq(0), outstanding.eq(0), requested.eq(0),
                         self.o_first_tx.eq(0), self.o_last_tx.eq(0),
                         self.o_first_rx.eq(0), self.o_last_rx.eq(0)]

        def engine(name, nbytes):
            offset = Signal(32, name=f"{name}_offset")
            issuing = Signal(name=f"{name}_issuing")
            with m.If(self.i_start):
                m.d.sync += [issuing.eq(nbytes != 0), offset.eq(0)]

            def issued(size):
                m.d.sync += [offset.eq(offset + size), self.o_last_tx.eq(self.i_now),
                             first.eq(1)]
                with m.If(~first):
                    m.d.sync += self.o_first_tx.eq(self.i_now)
                with m.If(offset + size >= nbytes):
                    m.d.sync += issuing.eq(0)
            return offset, issuing, issued

        # writes: push, or staged device to host; a header beat then data beats
        w_bytes = Mux(mode == GpuMode.PULL, 0, total)
        w_offset, w_issuing, w_issued = engine("write", w_bytes)
        w_size = Mux(staged, mps, tlp_bytes)
        w_base = Mux(staged, self.gpu << STAGE_SHIFT, 0)
        wr = send.i[FcClass.P]
        beat = Signal(range(mps // dp + 1))
        head = Signal(init=1)
        beats = w_size // dp
        addr = w_offset + beat * dp
        w_free = ~staged | ((w_offset >> self.i_chunk_log2) < consumed + 2)
        m.d.comb += [wr.valid.eq(w_issuing & (~head | w_free)),
                     wr.payload.kind.eq(TlpType.MWR), wr.payload.vc.eq(FcClass.P),
                     wr.payload.src.eq(self.gpu), wr.payload.dst.eq(Mux(staged, my_host, peer)),
                     wr.payload.length.eq(w_size), wr.payload.head.eq(head),
                     wr.payload.addr.eq(w_base | Mux(head, w_offset, addr)),
                     wr.payload.last.eq(~head & (beat == beats - 1))]
        with m.If(~head):
            m.d.comb += wr.payload.data.eq(payload_beat(self.gpu, addr, dp))
        with m.If(self.i_start):
            m.d.sync += [head.eq(1), beat.eq(0)]
        with m.Elif(wr.valid & wr.ready):
            with m.If(head):
                m.d.sync += head.eq(0)
            with m.Elif(beat == beats - 1):
                m.d.sync += [beat.eq(0), head.eq(1)]
                w_issued(w_size)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # reads: pull, or staged host to device; at most TAGS outstanding
        r_bytes = Mux(mode == GpuMode.PULL, total, Mux(staged, expect, 0))
        r_offset, r_issuing, r_issued = engine("read", r_bytes)
        r_free = ~staged | ((r_offset >> self.i_chunk_log2) < landed)
        rd = send.i[FcClass.NP]
        m.d.comb += [rd.valid.eq(r_issuing & r_free & (outstanding < tag_limit)),
                     rd.payload.kind.eq(TlpType.MRD), rd.payload.vc.eq(FcClass.NP),
                     rd.payload.src.eq(self.gpu), rd.payload.dst.eq(Mux(staged, src_host, peer)),
                     rd.payload.addr.eq(Mux(staged, expect_src << STAGE_SHIFT, 0) | r_offset),
                     rd.payload.length.eq(tlp_bytes), rd.payload.tag.eq(requested),
                     rd.payload.head.eq(1), rd.payload.last.eq(1)]
        with m.If(~self.i_start):
            m.d.sync += outstanding.eq(outstanding + (rd.valid & rd.ready) - answered)
        with m.If(rd.valid & rd.ready):
            m.d.sync += requested.eq(requested + 1)
            r_issued(tlp_bytes)
        # (checks) a read may not take a tag still waiting for its completions:
        # tags go in order, so with 256 reads counted outstanding every 8-bit
        # tag is in use (this guards the tag limit, not the count itself)
        tag_clash = Signal()
        if self.checks:
            m.d.comb += tag_clash.eq(rd.valid & rd.ready & outstanding[8])

        # --- completer: answers reads of this GPU's memory -------------------------
        m.submodules.completer = completer = Completer(
            cfg, self.gpu, lambda a: payload_beat(self.gpu, a, dp))
        wiring.connect(m, rx.o[FcClass.NP], completer.req)
        wiring.connect(m, completer.cpl, send.i[FcClass.CPL])
        m.d.comb += completer.i_clear.eq(self.i_start)
        # payload bytes sent: a write's and a completion's may finish in one cycle
        wrote = wr.valid & wr.ready & ~head & (beat == beats - 1)
        m.d.sync += self.o_tx_bytes.eq(self.o_tx_bytes + Mux(wrote, w_size, 0)
                                       + completer.o_sent_bytes)
        with m.If(self.i_start):
            m.d.sync += self.o_tx_bytes.eq(0)

        # --- memory: check every write and completion where it lands ------------------
        errors = self.o_errors
        # a bad beat of each class this cycle (a write and a completion may both
        # land) and its fields, for the first-bad record
        bad_of = {c: Signal(name=f"bad_{c.name.lower()}") for c in (FcClass.P, FcClass.CPL)}
        info_of = {c: Signal(32, name=f"bad_info_{c.name.lower()}") for c in bad_of}
        addr_of = {c: Signal(32, name=f"bad_addr_{c.name.lower()}") for c in bad_of}
        bad = Signal()

        def mark(c):
            # flag this cycle's beat of class c as wrong (with checks only)
            if self.checks:
                m.d.comb += bad_of[c].eq(1)
        m.d.comb += bad.eq(bad_of[FcClass.P] | bad_of[FcClass.CPL])
        took = Signal(2)          # payload beats that came in this cycle
        # completions answer the reads in order: the read being answered (its
        # tag) and the bytes of it still to come
        cpl_tag = Signal(8)
        cpl_left = Signal(13)
        m.d.comb += rx.o[FcClass.P].ready.eq(1)
        m.d.comb += rx.o[FcClass.CPL].ready.eq(1)
        for c, kind in ((FcClass.P, TlpType.MWR), (FcClass.CPL, TlpType.CPLD)):
            next_addr = Signal(32, name=f"next_addr_{c.name.lower()}")
            beats_left = Signal(range(mps // dp + 1), name=f"beats_left_{c.name.lower()}")
            got = rx.o[c].payload
            from_node, data = expect_src, payload_beat(got.src, got.addr, dp)
            if c == FcClass.CPL:
                # staged: completions come from SRC's staging buffer in host memory
                from_node = Mux(staged, src_host, expect_src)
                data = Mux(staged, staged_beat(got.addr, dp), data)
            with m.If(self.i_start):
                m.d.sync += [next_addr.eq(0), beats_left.eq(0)]
                if c == FcClass.CPL:
                    m.d.sync += next_addr.eq(Mux(staged, expect_src << STAGE_SHIFT, 0))
            with m.Elif(rx.o[c].valid):
                m.d.comb += [info_of[c].eq(got.src | (int(c) << 8) | (got.kind << 10)
                                           | (got.dst << 16)),
                             addr_of[c].eq(got.addr)]
                with m.If((got.kind != kind) | (got.dst != self.gpu) | (got.src != from_node)):
                    mark(c)
                with m.Elif(got.head):
                    # a TLP starts where the last of its class ended, after its final beat
                    with m.If((got.addr != next_addr) | (beats_left != 0) | got.last):
                        mark(c)
                    if c == FcClass.CPL:
                        # a completion carries its read's tag and stays inside that read
                        with m.If((got.tag != cpl_tag) | (got.length > cpl_left)
                                  | (got.length > mps)):
                            mark(c)
                    m.d.sync += beats_left.eq(got.length // dp)
                with m.Else():
                    with m.If((beats_left == 0) | (got.addr != next_addr)
                              | (got.last != (beats_left == 1)) | (got.data != data)):
                        mark(c)
                    m.d.comb += took[c == FcClass.CPL].eq(1)
                    m.d.sync += [next_addr.eq(got.addr + dp), beats_left.eq(beats_left - 1)]
                    if c == FcClass.CPL:
                        m.d.comb += answered.eq(cpl_left == dp)
                        m.d.sync += cpl_left.eq(Mux(cpl_left == dp, tlp_bytes, cpl_left - dp))
                        with m.If(cpl_left == dp):
                            m.d.sync += cpl_tag.eq(cpl_tag + 1)
        with m.If(self.i_start):
            m.d.sync += [errors.eq(0), self.o_rx_bytes.eq(0), cpl_tag.eq(0),
                         cpl_left.eq(tlp_bytes), self.o_first_bad.eq(0),
                         self.o_first_bad_addr.eq(0), self.o_first_bad_cycle.eq(0)]
        with m.Else():
            wrong = (bad | completer.o_bad | tag_clash) if self.checks else 0
            with m.If(wrong & (errors != 0xFFFF)):
                m.d.sync += errors.eq(errors + 1)
            with m.If(wrong & ~self.o_first_bad[31]):
                # a write before a completion of the same cycle; else a read
                # issued on a tag in use; else a bad NP request
                first = FcClass.P
                clash_info = (self.gpu | int(FcClass.NP) << 8 | int(TlpType.MRD) << 10
                              | rd.payload.dst << 16 | TAG_CLASH_BIT)
                m.d.sync += [self.o_first_bad.eq(
                                 Mux(bad_of[first], info_of[first],
                                     Mux(bad, info_of[FcClass.CPL],
                                         Mux(tag_clash, clash_info, int(FcClass.NP) << 8)))
                                 | (1 << 31)),
                             self.o_first_bad_addr.eq(
                                 Mux(bad_of[first], addr_of[first],
                                     Mux(bad, addr_of[FcClass.CPL],
                                         Mux(tag_clash, rd.payload.addr, 0)))),
                             self.o_first_bad_cycle.eq(self.i_now)]
            with m.If(took.any()):
                m.d.sync += [self.o_rx_bytes.eq(self.o_rx_bytes + dp * (took[0] + took[1])),
                             self.o_last_rx.eq(self.i_now)]
                with m.If(self.o_rx_bytes == 0):
                    m.d.sync += self.o_first_rx.eq(self.i_now)

        running = Signal()
        with m.If(self.i_start):
            m.d.sync += running.eq(1)
        with m.If(self.i_we):
            m.d.sync += running.eq(0)
        m.d.comb += [
            self.o_done.eq(running & ~w_issuing & ~r_issuing & (outstanding == 0)
                           & ~completer.o_serving & (self.o_rx_bytes == expect)),
            self.o_progress.eq(sum((s.valid & s.ready) for s in send.i).bool()
                               | sum(rx.o[c].valid for c in range(N_FC)).bool()),
        ]
        return m
