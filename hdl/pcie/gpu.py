"""GPU endpoint: a copy engine that writes to a peer, and the memory that
takes writes in and checks them (seed 001, "3.2.3 Optimization 2: enable peer
access" and "3.2.4 Optimization 3: a custom D2D copy kernel").

With peer access, ``cudaMemcpyAsync`` from device to device is done by the
source GPU's copy engine as posted memory writes of ``max_payload_bytes``
straight into the peer's memory; a push kernel's stores leave the SMs as
writes of ``kernel_write_bytes``.  Both are the same engine here with a
different TLP size.  Payload data are :func:`~hdl.pcie.tlp.payload_beat` of
the source and the address, checked beat by beat where they land.
"""

import enum

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, StreamToLink, VcInputBuffer
from .link import N_FC
from .tlp import FcClass, TlpType, payload_beat, tlp_layout

__all__ = ["GpuReg", "GpuEndpoint"]


class GpuReg(enum.IntEnum):
    """Run-time registers of one GPU (``cfg_addr`` low 3 bits)."""

    DST = 0          #: node the copy writes to
    BYTES = 1        #: bytes to copy (a multiple of WRITE_BYTES; 0: no copy)
    WRITE_BYTES = 2  #: payload bytes per write TLP (a multiple of datapath_bytes)
    EXPECT = 3       #: bytes this GPU's memory should take in during the run
    SRC = 4          #: node those bytes come from


class GpuEndpoint(wiring.Component):
    """One GPU: copy engine and checked memory.  Clock: the 1 GHz model clock.

    Parameters
    ----------
    cfg : PcieConfig
    gpu : int
        Node index (0..``gpus``-1); the source of its copy's data.
    tx_credits : int
        Beats per class the link's transmit queue holds (credits of ``o``).
    rx_beats : int
        Beats per class of the input buffer (credits the link's receiver gets).

    Members
    -------
    o : Out(CreditLink(tlp_layout(cfg), 3))
        TLPs to the link.
    i : In(CreditLink(tlp_layout(cfg), 3))
        TLPs from the link.
    i_we, i_reg (3), i_data (32) : In
        Register write (:class:`GpuReg`).
    i_start : In(1)
        Start the copy; clears the counters.
    i_now : In(32)
        Cycle counter, for the time stamps.
    o_done : Out(1)
        Copy sent and EXPECT bytes taken in.
    o_tx_bytes, o_rx_bytes : Out(32)
        Payload bytes sent and taken in this run.
    o_first_tx, o_last_tx, o_first_rx, o_last_rx : Out(32)
        ``i_now`` at the first and last write sent, and at the first and last
        payload beat taken in.
    o_errors : Out(16)
        Beats that break the copy: a TLP for another node or from a node other
        than SRC, a write that does not start where the last one ended, a data
        beat outside a write or not at the next address, a ``last`` in the
        wrong place, data that is not the source's for that address, or a TLP
        of another kind.
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
        layout = tlp_layout(cfg)
        dst = Signal(4)
        total = Signal(32)
        write_bytes = Signal(13, init=cfg.max_payload_bytes)
        expect = Signal(32)
        expect_src = Signal(4)
        with m.If(self.i_we):
            with m.Switch(self.i_reg):
                for reg, sig in ((GpuReg.DST, dst), (GpuReg.BYTES, total),
                                 (GpuReg.WRITE_BYTES, write_bytes), (GpuReg.EXPECT, expect),
                                 (GpuReg.SRC, expect_src)):
                    with m.Case(reg):
                        m.d.sync += sig.eq(self.i_data)

        # --- copy engine: posted writes, whole TLPs ----------------------------------
        m.submodules.send = send = StreamToLink(flit_layout=layout, credits=self.tx_credits,
                                                n_vc=N_FC)
        wiring.connect(m, send.o, wiring.flipped(self.o))
        for c in (FcClass.NP, FcClass.CPL):
            m.d.comb += send.i[c].valid.eq(0)
        out = send.i[FcClass.P]
        offset = Signal(32)
        beat = Signal(range(cfg.max_payload_bytes // dp + 1))
        beats = write_bytes // dp
        sending = Signal()
        head = Signal()
        m.d.comb += [out.valid.eq(sending), out.payload.kind.eq(TlpType.MWR),
                     out.payload.vc.eq(FcClass.P), out.payload.src.eq(self.gpu),
                     out.payload.dst.eq(dst), out.payload.length.eq(write_bytes),
                     out.payload.head.eq(head)]
        addr = offset + beat * dp
        with m.If(head):
            m.d.comb += [out.payload.addr.eq(offset), out.payload.last.eq(0)]
        with m.Else():
            m.d.comb += [out.payload.addr.eq(addr),
                         out.payload.data.eq(payload_beat(self.gpu, addr, dp)),
                         out.payload.last.eq(beat == beats - 1)]
        with m.If(self.i_start):
            m.d.sync += [sending.eq(total != 0), head.eq(1), offset.eq(0), beat.eq(0),
                         self.o_tx_bytes.eq(0)]
        with m.Elif(out.valid & out.ready):
            with m.If(head):
                m.d.sync += head.eq(0)
                with m.If(offset == 0):
                    m.d.sync += self.o_first_tx.eq(self.i_now)
            with m.Elif(beat == beats - 1):
                m.d.sync += [beat.eq(0), head.eq(1), offset.eq(offset + write_bytes),
                             self.o_tx_bytes.eq(self.o_tx_bytes + write_bytes),
                             self.o_last_tx.eq(self.i_now)]
                with m.If(offset + write_bytes >= total):
                    m.d.sync += sending.eq(0)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # --- memory: take every write in, check it ---------------------------------
        m.submodules.rx = rx = VcInputBuffer(flit_layout=layout, depth=self.rx_beats, n_vc=N_FC)
        wiring.connect(m, wiring.flipped(self.i), rx.i)
        # the write being taken in: its next data address and the beats still due
        next_addr = Signal(32)
        beats_left = Signal(range(cfg.max_payload_bytes // dp + 1))
        errors = self.o_errors
        bad = Signal()
        for c in range(N_FC):
            m.d.comb += rx.o[c].ready.eq(1)
            got = rx.o[c].payload
            with m.If(self.i_start):
                pass
            with m.Elif(rx.o[c].valid):
                with m.If((c != FcClass.P) | (got.kind != TlpType.MWR) | (got.dst != self.gpu)
                          | (got.src != expect_src)):
                    m.d.comb += bad.eq(1)
                with m.Elif(got.head):
                    # a write starts where the last ended, after the last's final beat
                    with m.If((got.addr != next_addr) | (beats_left != 0) | got.last):
                        m.d.comb += bad.eq(1)
                    m.d.sync += beats_left.eq(got.length // dp)
                with m.Else():
                    with m.If((beats_left == 0) | (got.addr != next_addr)
                              | (got.last != (beats_left == 1))
                              | (got.data != payload_beat(got.src, got.addr, dp))):
                        m.d.comb += bad.eq(1)
                    m.d.sync += [next_addr.eq(got.addr + dp), beats_left.eq(beats_left - 1),
                                 self.o_rx_bytes.eq(self.o_rx_bytes + dp),
                                 self.o_last_rx.eq(self.i_now)]
                    with m.If(self.o_rx_bytes == 0):
                        m.d.sync += self.o_first_rx.eq(self.i_now)
        with m.If(self.i_start):
            m.d.sync += [errors.eq(0), self.o_rx_bytes.eq(0), next_addr.eq(0),
                         beats_left.eq(0)]
        with m.Elif(bad & (errors != 0xFFFF)):
            m.d.sync += errors.eq(errors + 1)

        running = Signal()
        with m.If(self.i_start):
            m.d.sync += running.eq(1)
        with m.If(self.i_we):
            m.d.sync += running.eq(0)
        m.d.comb += [
            self.o_done.eq(running & ~sending & (self.o_rx_bytes == expect)),
            self.o_progress.eq((out.valid & out.ready)
                               | sum(rx.o[c].valid for c in range(N_FC)).bool()),
        ]
        return m
