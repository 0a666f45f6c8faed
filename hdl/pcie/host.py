"""Host memory of one socket, behind its root complex: the pinned staging
buffers of copies with peer access off (seed 001, "3.2.2 Optimization 1:
double-buffered streaming through the CPU": "On the host we allocate two
pinned buffers of one chunk each").

Source GPU ``s``'s staged byte ``x`` lives at host address ``s << 28 | x``
(:data:`~hdl.pcie.tlp.STAGE_SHIFT`); its buffer is chunk ``x //
staging_chunk_bytes`` modulo 2.  Like the GPUs' memories this one checks
what it is given rather than storing it: each write must continue its
source's copy in order with that source's data, and each read must ask for
bytes that have landed and not yet been overwritten by the chunk two ahead;
the completer answers with the source's data for that address.
"""

from amaranth import Array, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink, StreamToLink, VcInputBuffer
from .completer import Completer
from .link import N_FC
from .tlp import HOST_NODE, STAGE_SHIFT, FcClass, TlpType, staged_beat, tlp_layout

__all__ = ["HostMemory"]


class HostMemory(wiring.Component):
    """Host memory of socket ``socket`` (node ``HOST_NODE + socket``).  Clock:
    the 1 GHz model clock.

    Parameters
    ----------
    cfg : PcieConfig
    socket : int
        The socket; its GPUs ``socket * n .. socket * n + n - 1`` (``n``: GPUs
        per socket) may stage copies here.
    tx_credits : int
        Beats per class the root complex's input takes (credits of ``o``).
    rx_beats : int
        Beats per class of the input buffer (credits the root complex gets).
    checks : bool
        Build the testbench-only checks behind ``o_errors`` (``False``, for
        synthesis: ``o_errors`` stays 0 and every beat lands).  Every
        experiment runs with checks.

    Members
    -------
    o : Out(CreditLink(tlp_layout(cfg), 3))
        Completions to the root complex.
    i : In(CreditLink(tlp_layout(cfg), 3))
        Writes and read requests from the root complex.
    i_start : In(1)
        A new run: clears the counters and the buffers, and returns the
        transmitter and receive buffer (arbiter pointer, queues) to their
        reset state.
    i_chunk_log2 : In(5)
        log2 of ``staging_chunk_bytes``.
    o_landed : Out(32).array(n)
        Bytes of each of the socket's GPUs' staged copies that have landed, in order.
    o_rx_bytes, o_tx_bytes : Out(32)
        Payload bytes written in and read out this run.
    o_errors : Out(16)
        TLPs and beats that break a staged copy: a TLP for another node or of a
        kind its class does not carry, a write from a GPU of another socket or
        into another GPU's buffer, out of order or with the wrong data, a read of
        a byte not landed yet or already overwritten.
    o_progress : Out(1)
        A beat moved this cycle (for the watchdog).
    o_credits_away : Out(3)
        Bit ``class``: the host memory's transmitter does not hold all its credits for the next
        hop (:attr:`~hdl.common.credit.CreditCounter.o_away`); all 0 once the
        machine is at rest.
    """

    def __init__(self, cfg, socket, *, tx_credits, rx_beats, checks=True):
        self.cfg = cfg
        self.checks = bool(checks)
        self.socket = socket
        self.node = HOST_NODE + socket
        self.n = cfg.switches_per_socket * cfg.gpus_per_switch
        self.tx_credits = tx_credits
        self.rx_beats = rx_beats
        link = CreditLink(tlp_layout(cfg), N_FC)
        super().__init__({
            "o": Out(link), "i": In(link), "i_start": In(1), "i_chunk_log2": In(5),
            "o_landed": Out(32).array(self.n), "o_rx_bytes": Out(32), "o_tx_bytes": Out(32),
            "o_errors": Out(16), "o_progress": Out(1), "o_credits_away": Out(N_FC),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        dp, mps = cfg.datapath_bytes, cfg.max_payload_bytes
        layout = tlp_layout(cfg)
        lo = self.socket * self.n
        # the start returns the transmitter and receive buffer to their reset
        # state (arbiter pointer, queues), as it does the links
        send = StreamToLink(flit_layout=layout, credits=self.tx_credits, n_vc=N_FC)
        m.submodules.send = ResetInserter(self.i_start)(send)
        wiring.connect(m, send.o, wiring.flipped(self.o))
        m.d.comb += self.o_credits_away.eq(send.o_credits_away)
        rx = VcInputBuffer(flit_layout=layout, depth=self.rx_beats, n_vc=N_FC)
        m.submodules.rx = ResetInserter(self.i_start)(rx)
        wiring.connect(m, wiring.flipped(self.i), rx.i)
        for c in (FcClass.P, FcClass.CPL):
            m.d.comb += rx.o[c].ready.eq(1)
        m.d.comb += send.i[FcClass.P].valid.eq(0)
        m.d.comb += send.i[FcClass.NP].valid.eq(0)

        landed = Array(self.o_landed)
        bad = Signal()

        def check(wrong):
            """``wrong``, or never without checks."""
            return wrong if self.checks else 0

        def source(addr):
            """The GPU whose copy ``addr`` belongs to, its index among the
            socket's GPUs, and whether it is one of them."""
            gpu = addr[STAGE_SHIFT:STAGE_SHIFT + 4]
            return (gpu, (gpu - lo)[:max(1, (self.n - 1).bit_length())],
                    (gpu >= lo) & (gpu < lo + self.n))

        # --- writes: each source's copy in order, with its data ---------------------------
        got = rx.o[FcClass.P].payload
        cur = Signal(range(max(self.n, 2)))
        beats_left = Signal(range(mps // dp + 1))
        writer, index, mine = source(got.addr)
        with m.If(rx.o[FcClass.P].valid & ~self.i_start):
            with m.If(check((got.kind != TlpType.MWR) | (got.dst != self.node) | ~mine
                            | (got.src != writer))):
                m.d.comb += bad.eq(1)
            with m.Elif(got.head):
                with m.If(check((got.addr[:STAGE_SHIFT] != landed[index]) | (beats_left != 0)
                                | got.last)):
                    m.d.comb += bad.eq(1)
                m.d.sync += [cur.eq(index), beats_left.eq(got.length // dp)]
            with m.Else():
                with m.If(check((beats_left == 0) | (index != cur)
                                | (got.addr[:STAGE_SHIFT] != landed[index])
                                | (got.last != (beats_left == 1))
                                | (got.data != staged_beat(got.addr, dp)))):
                    m.d.comb += bad.eq(1)
                with m.Else():
                    m.d.sync += [landed[index].eq(landed[index] + dp),
                                 self.o_rx_bytes.eq(self.o_rx_bytes + dp)]
                m.d.sync += beats_left.eq(beats_left - 1)

        # --- reads: only of bytes landed and not yet overwritten ---------------------------
        m.submodules.completer = completer = Completer(
            cfg, self.node, lambda a: staged_beat(a, dp),
            completion_bytes=cfg.read_completion_boundary_bytes)
        wiring.connect(m, rx.o[FcClass.NP], completer.req)
        wiring.connect(m, completer.cpl, send.i[FcClass.CPL])
        m.d.comb += completer.i_clear.eq(self.i_start)
        req = rx.o[FcClass.NP].payload
        _, r_index, r_mine = source(req.addr)
        x = req.addr[:STAGE_SHIFT]
        have = landed[r_index]
        # the buffer of x's chunk holds it until chunk (x's) + 2 starts landing
        kept = have <= (((x >> self.i_chunk_log2) + 2) << self.i_chunk_log2)
        with m.If(rx.o[FcClass.NP].valid & rx.o[FcClass.NP].ready):
            with m.If(check((req.dst != self.node) | ~r_mine | (x + req.length > have)
                            | ~kept)):
                m.d.comb += bad.eq(1)
        with m.If(check(rx.o[FcClass.CPL].valid & ~self.i_start)):
            m.d.comb += bad.eq(1)       # the host memory issues no reads

        with m.If(self.i_start):
            m.d.sync += [self.o_errors.eq(0), self.o_rx_bytes.eq(0), self.o_tx_bytes.eq(0),
                         beats_left.eq(0)]
            m.d.sync += [v.eq(0) for v in self.o_landed]
        with m.Else():
            m.d.sync += self.o_tx_bytes.eq(self.o_tx_bytes + completer.o_sent_bytes)
            with m.If(check(bad | completer.o_bad) & (self.o_errors != 0xFFFF)):
                m.d.sync += self.o_errors.eq(self.o_errors + 1)
        m.d.comb += self.o_progress.eq(completer.cpl.valid & completer.cpl.ready
                                       | sum(rx.o[c].valid for c in range(N_FC)).bool())
        return m
