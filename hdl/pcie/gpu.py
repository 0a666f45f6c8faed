"""GPU endpoint: a copy engine that writes to a peer or reads from it, a
completer that answers reads, and a memory that checks what lands (seed
001, "3.2.3 Optimization 2: enable peer access" and "3.2.4 Optimization 3: a
custom D2D copy kernel").

With peer access, ``cudaMemcpyAsync`` from device to device is done by the
source GPU's copy engine as posted memory writes of ``max_payload_bytes``
straight into the peer's memory; a push kernel's stores leave the SMs as
writes of ``kernel_write_bytes``.  A pull kernel on the destination reads
the source's memory: memory reads of ``kernel_read_bytes`` with at most
``read_tags`` outstanding, answered by the source's completer with
completions of at most ``max_payload_bytes``.  Payload data are
:func:`~hdl.pcie.tlp.payload_beat` of the source and the address, checked
beat by beat where they land.
"""

import enum

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, StreamToLink, VcInputBuffer
from .link import N_FC
from .tlp import FcClass, TlpType, payload_beat, tlp_layout

__all__ = ["GpuReg", "GpuMode", "GpuEndpoint"]


class GpuReg(enum.IntEnum):
    """Run-time registers of one GPU (``cfg_addr`` low 3 bits)."""

    PEER = 0         #: node the copy writes to (push) or reads from (pull)
    BYTES = 1        #: bytes to copy (a multiple of the TLP size; 0: no copy)
    TLP_BYTES = 2    #: bytes per write (push) or per read request (pull)
    EXPECT = 3       #: bytes this GPU's memory should take in during the run
    SRC = 4          #: node those bytes come from
    MODE = 5         #: :class:`GpuMode`
    TAGS = 6         #: reads outstanding at most (pull), 1 to 256 (others are clamped)


class GpuMode(enum.IntEnum):
    """What the copy engine does (register ``MODE``)."""

    PUSH = 0   #: posted writes into the peer's memory
    PULL = 1   #: reads of the peer's memory, completions into this GPU's


class GpuEndpoint(wiring.Component):
    """One GPU: copy engine, completer and checked memory.  Clock: the 1 GHz
    model clock.

    Parameters
    ----------
    cfg : PcieConfig
    gpu : int
        Node index (0..``gpus``-1); the source of the data it sends.
    tx_credits : int
        Beats per class the link's transmit queue holds (credits of ``o``).
    rx_beats : int
        Beats per class of the input buffer (credits the link's receiver gets).

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
        Start the copy; clears the counters.
    i_now : In(32)
        Cycle counter, for the time stamps.
    o_done : Out(1)
        Copy issued, every read answered, and EXPECT bytes taken in.
    o_tx_bytes, o_rx_bytes : Out(32)
        Payload bytes sent (writes and completions) and taken in this run.
    o_first_tx, o_last_tx : Out(32)
        ``i_now`` at the copy engine's first and last TLP (write or read).
    o_first_rx, o_last_rx : Out(32)
        ``i_now`` at the first and last payload beat taken in.
    o_errors : Out(16)
        Beats that break the copy: a TLP for another node or from a node other
        than SRC, a write or completion that does not start where the last one
        of its class ended, a data beat outside a TLP or not at the next
        address, a ``last`` in the wrong place, data that is not the source's
        for that address, or a TLP of a kind its class does not carry.
    o_progress : Out(1)
        A beat moved this cycle (for the watchdog).
    """

    def __init__(self, cfg, gpu, *, tx_credits, rx_beats=16):
        self.cfg = cfg
        self.gpu = gpu
        self.tx_credits = tx_credits
        self.rx_beats = rx_beats
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({
            "o": Out(link), "i": In(link),
            "i_we": In(1), "i_reg": In(3), "i_data": In(32), "i_start": In(1), "i_now": In(32),
            "o_done": Out(1), "o_tx_bytes": Out(32), "o_rx_bytes": Out(32),
            "o_first_tx": Out(32), "o_last_tx": Out(32),
            "o_first_rx": Out(32), "o_last_rx": Out(32),
            "o_errors": Out(16), "o_progress": Out(1),
        })

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
        mode = Signal(1)
        tags = Signal(9, init=1)
        with m.If(self.i_we):
            with m.Switch(self.i_reg):
                for reg, sig in ((GpuReg.PEER, peer), (GpuReg.BYTES, total),
                                 (GpuReg.TLP_BYTES, tlp_bytes), (GpuReg.EXPECT, expect),
                                 (GpuReg.SRC, expect_src), (GpuReg.MODE, mode),
                                 (GpuReg.TAGS, tags)):
                    with m.Case(reg):
                        m.d.sync += sig.eq(self.i_data)

        m.submodules.send = send = StreamToLink(flit_layout=layout, credits=self.tx_credits,
                                                n_vc=N_FC)
        wiring.connect(m, send.o, wiring.flipped(self.o))
        m.submodules.rx = rx = VcInputBuffer(flit_layout=layout, depth=self.rx_beats, n_vc=N_FC)
        wiring.connect(m, wiring.flipped(self.i), rx.i)

        # --- copy engine: whole TLPs of tlp_bytes ------------------------------------
        offset = Signal(32)       # next byte of the copy to write or request
        issuing = Signal()
        outstanding = Signal(9)   # reads requested and not yet fully answered
        requested = Signal(8)     # reads issued, modulo 256: the next read's tag
        answered = Signal()       # a read's last completion byte came in (below)
        tag_limit = Mux(tags == 0, 1, Mux(tags > 256, 256, tags))
        with m.If(self.i_start):
            m.d.sync += [issuing.eq(total != 0), offset.eq(0), outstanding.eq(0),
                         requested.eq(0)]

        def issued(nbytes):
            m.d.sync += [offset.eq(offset + nbytes), self.o_last_tx.eq(self.i_now)]
            with m.If(offset == 0):
                m.d.sync += self.o_first_tx.eq(self.i_now)
            with m.If(offset + nbytes >= total):
                m.d.sync += issuing.eq(0)

        # push: posted writes, header beat then data beats
        wr = send.i[FcClass.P]
        beat = Signal(range(mps // dp + 1))
        head = Signal(init=1)
        beats = tlp_bytes // dp
        addr = offset + beat * dp
        m.d.comb += [wr.valid.eq(issuing & (mode == GpuMode.PUSH)),
                     wr.payload.kind.eq(TlpType.MWR), wr.payload.vc.eq(FcClass.P),
                     wr.payload.src.eq(self.gpu), wr.payload.dst.eq(peer),
                     wr.payload.length.eq(tlp_bytes), wr.payload.head.eq(head),
                     wr.payload.addr.eq(Mux(head, offset, addr)),
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
                issued(tlp_bytes)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # pull: read requests, at most TAGS outstanding
        rd = send.i[FcClass.NP]
        m.d.comb += [rd.valid.eq(issuing & (mode == GpuMode.PULL) & (outstanding < tag_limit)),
                     rd.payload.kind.eq(TlpType.MRD), rd.payload.vc.eq(FcClass.NP),
                     rd.payload.src.eq(self.gpu), rd.payload.dst.eq(peer),
                     rd.payload.addr.eq(offset), rd.payload.length.eq(tlp_bytes),
                     rd.payload.tag.eq(requested), rd.payload.head.eq(1),
                     rd.payload.last.eq(1)]
        with m.If(~self.i_start):
            m.d.sync += outstanding.eq(outstanding + (rd.valid & rd.ready) - answered)
        with m.If(rd.valid & rd.ready):
            m.d.sync += requested.eq(requested + 1)
            issued(tlp_bytes)

        # --- completer: answers each read in order with completions of up to MPS ---
        req = rx.o[FcClass.NP]
        cpl = send.i[FcClass.CPL]
        serving = Signal()
        c_dst = Signal(4)
        c_addr = Signal(32)
        c_left = Signal(13)
        c_tag = Signal(8)
        c_beat = Signal(range(mps // dp + 1))
        c_head = Signal(init=1)
        c_len = Signal(13)
        m.d.comb += c_len.eq(Mux(c_left > mps, mps, c_left))
        c_at = c_addr + c_beat * dp
        m.d.comb += [cpl.valid.eq(serving), cpl.payload.kind.eq(TlpType.CPLD),
                     cpl.payload.vc.eq(FcClass.CPL), cpl.payload.src.eq(self.gpu),
                     cpl.payload.dst.eq(c_dst), cpl.payload.length.eq(c_len),
                     cpl.payload.tag.eq(c_tag), cpl.payload.head.eq(c_head),
                     cpl.payload.addr.eq(Mux(c_head, c_addr, c_at)),
                     cpl.payload.last.eq(~c_head & (c_beat == c_len // dp - 1))]
        with m.If(~c_head):
            m.d.comb += cpl.payload.data.eq(payload_beat(self.gpu, c_at, dp))
        with m.If(cpl.valid & cpl.ready):
            with m.If(c_head):
                m.d.sync += c_head.eq(0)
            with m.Elif(c_beat == c_len // dp - 1):
                m.d.sync += [c_beat.eq(0), c_head.eq(1), c_addr.eq(c_addr + c_len),
                             c_left.eq(c_left - c_len)]
                with m.If(c_left == c_len):
                    m.d.sync += serving.eq(0)
            with m.Else():
                m.d.sync += c_beat.eq(c_beat + 1)
        # the next read is taken as the last completion's last beat goes, so
        # completions follow one another without a gap
        finishing = (cpl.valid & cpl.ready & ~c_head & (c_beat == c_len // dp - 1)
                     & (c_left == c_len))
        m.d.comb += req.ready.eq((~serving | finishing) & ~self.i_start)
        with m.If(req.valid & req.ready):
            m.d.sync += [serving.eq(req.payload.length != 0), c_dst.eq(req.payload.src),
                         c_addr.eq(req.payload.addr), c_left.eq(req.payload.length),
                         c_tag.eq(req.payload.tag), c_head.eq(1), c_beat.eq(0)]
        # payload bytes sent: a write's and a completion's may finish in one cycle
        wrote = wr.valid & wr.ready & ~head & (beat == beats - 1)
        completed = cpl.valid & cpl.ready & ~c_head & (c_beat == c_len // dp - 1)
        m.d.sync += self.o_tx_bytes.eq(self.o_tx_bytes + Mux(wrote, tlp_bytes, 0)
                                       + Mux(completed, c_len, 0))
        with m.If(self.i_start):
            m.d.sync += [self.o_tx_bytes.eq(0), serving.eq(0)]

        # --- memory: check every write and completion where it lands ------------------
        errors = self.o_errors
        bad = Signal()
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
            with m.If(self.i_start):
                m.d.sync += [next_addr.eq(0), beats_left.eq(0)]
            with m.Elif(rx.o[c].valid):
                with m.If((got.kind != kind) | (got.dst != self.gpu) | (got.src != expect_src)):
                    m.d.comb += bad.eq(1)
                with m.Elif(got.head):
                    # a TLP starts where the last of its class ended, after its final beat
                    with m.If((got.addr != next_addr) | (beats_left != 0) | got.last):
                        m.d.comb += bad.eq(1)
                    if c == FcClass.CPL:
                        # a completion carries its read's tag and stays inside that read
                        with m.If((got.tag != cpl_tag) | (got.length > cpl_left)
                                  | (got.length > mps)):
                            m.d.comb += bad.eq(1)
                    m.d.sync += beats_left.eq(got.length // dp)
                with m.Else():
                    with m.If((beats_left == 0) | (got.addr != next_addr)
                              | (got.last != (beats_left == 1))
                              | (got.data != payload_beat(got.src, got.addr, dp))):
                        m.d.comb += bad.eq(1)
                    m.d.comb += took[c == FcClass.CPL].eq(1)
                    m.d.sync += [next_addr.eq(got.addr + dp), beats_left.eq(beats_left - 1)]
                    if c == FcClass.CPL:
                        m.d.comb += answered.eq(cpl_left == dp)
                        m.d.sync += cpl_left.eq(Mux(cpl_left == dp, tlp_bytes, cpl_left - dp))
                        with m.If(cpl_left == dp):
                            m.d.sync += cpl_tag.eq(cpl_tag + 1)
        with m.If(self.i_start):
            m.d.sync += [errors.eq(0), self.o_rx_bytes.eq(0), cpl_tag.eq(0),
                         cpl_left.eq(tlp_bytes)]
        with m.Else():
            with m.If(bad & (errors != 0xFFFF)):
                m.d.sync += errors.eq(errors + 1)
            with m.If(took.any()):
                m.d.sync += [self.o_rx_bytes.eq(self.o_rx_bytes + dp * (took[0] + took[1])),
                             self.o_last_rx.eq(self.i_now)]
                with m.If(self.o_rx_bytes == 0):
                    m.d.sync += self.o_first_rx.eq(self.i_now)
        # a non-posted TLP that is not a read is consumed by the completer as a
        # zero-length read: flag it
        with m.If(req.valid & req.ready & (req.payload.kind != TlpType.MRD)):
            m.d.comb += bad.eq(1)

        running = Signal()
        with m.If(self.i_start):
            m.d.sync += running.eq(1)
        with m.If(self.i_we):
            m.d.sync += running.eq(0)
        m.d.comb += [
            self.o_done.eq(running & ~issuing & (outstanding == 0) & ~serving
                           & (self.o_rx_bytes == expect)),
            self.o_progress.eq(sum((s.valid & s.ready) for s in send.i).bool()
                               | sum(rx.o[c].valid for c in range(N_FC)).bool()),
        ]
        return m
