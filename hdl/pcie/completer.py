"""The completer of a memory on the PCIe fabric: answers memory reads with
completions (PCIe Base Specification, "Completion Rules": a read is answered
by completions of at most ``max_payload_bytes`` each, split on read
completion boundaries, in address order; seed 001, "3.2.4": a pull kernel's
reads of the peer's memory).  Both a GPU (completions of
``max_payload_bytes``) and a host memory (completions of
``read_completion_boundary_bytes``) answer reads with it.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .tlp import FcClass, TlpType, tlp_layout

__all__ = ["Completer"]


class Completer(wiring.Component):
    """Answers each read request in arrival order with completions of at most
    ``completion_bytes``, whose data ``data(addr)`` gives.  Clock: the 1 GHz
    model clock.

    Parameters
    ----------
    cfg : PcieConfig
    node : int
        The memory's node (the completions' ``src``).
    data : callable
        ``data(addr) -> Value`` of ``8 * datapath_bytes`` bits: the memory's
        content at byte address ``addr`` (32 bits).
    completion_bytes : int
        Largest completion payload, bytes: a multiple of ``datapath_bytes`` up
        to ``max_payload_bytes`` (the default).  Reads start on a multiple of
        it, so every completion after the first ends on a boundary of it (the
        read completion boundary, RCB).

    Raises
    ------
    ValueError
        If ``completion_bytes`` is not such a multiple.

    Members
    -------
    req : In(stream.Signature(tlp_layout(cfg)))
        Read requests (one header beat each, non-posted class).
    cpl : Out(stream.Signature(tlp_layout(cfg)))
        Completions with data: a header beat, then ``length / datapath_bytes``
        data beats.
    i_clear : In(1)
        Drop the read being answered (a new run).
    o_serving : Out(1)
        A read is being answered.
    o_sent_bytes : Out(13)
        Payload bytes of the completion whose last beat goes this cycle (0 if none).
    o_bad : Out(1)
        A non-posted request that is not a memory read was taken this cycle (it is
        answered as a read of its length all the same).
    """

    def __init__(self, cfg, node, data, completion_bytes=None):
        size = cfg.max_payload_bytes if completion_bytes is None else completion_bytes
        if not (isinstance(size, int) and cfg.datapath_bytes <= size <= cfg.max_payload_bytes
                and size % cfg.datapath_bytes == 0):
            raise ValueError(f"completion_bytes must be a multiple of datapath_bytes "
                             f"({cfg.datapath_bytes}) up to max_payload_bytes "
                             f"({cfg.max_payload_bytes}), not {completion_bytes!r}")
        self.cfg = cfg
        self.node = node
        self.data = data
        self.completion_bytes = size
        layout = tlp_layout(cfg)
        super().__init__({"req": In(stream.Signature(layout)),
                          "cpl": Out(stream.Signature(layout)),
                          "i_clear": In(1), "o_serving": Out(1), "o_sent_bytes": Out(13),
                          "o_bad": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        dp, most = cfg.datapath_bytes, self.completion_bytes
        req, cpl = self.req, self.cpl
        serving = self.o_serving
        c_dst = Signal.like(req.payload.src)
        c_addr = Signal(32)
        c_left = Signal(13)
        c_tag = Signal(8)
        c_beat = Signal(range(most // dp + 1))
        c_head = Signal(init=1)
        c_len = Signal(13)
        m.d.comb += c_len.eq(Mux(c_left > most, most, c_left))
        c_at = c_addr + c_beat * dp
        m.d.comb += [cpl.valid.eq(serving), cpl.payload.kind.eq(TlpType.CPLD),
                     cpl.payload.vc.eq(FcClass.CPL), cpl.payload.src.eq(self.node),
                     cpl.payload.dst.eq(c_dst), cpl.payload.length.eq(c_len),
                     cpl.payload.tag.eq(c_tag), cpl.payload.head.eq(c_head),
                     cpl.payload.addr.eq(Mux(c_head, c_addr, c_at)),
                     cpl.payload.last.eq(~c_head & (c_beat == c_len // dp - 1))]
        with m.If(~c_head):
            m.d.comb += cpl.payload.data.eq(self.data(c_at))
        ending = cpl.valid & cpl.ready & ~c_head & (c_beat == c_len // dp - 1)
        with m.If(cpl.valid & cpl.ready):
            with m.If(c_head):
                m.d.sync += c_head.eq(0)
            with m.Elif(ending):
                m.d.sync += [c_beat.eq(0), c_head.eq(1), c_addr.eq(c_addr + c_len),
                             c_left.eq(c_left - c_len)]
                with m.If(c_left == c_len):
                    m.d.sync += serving.eq(0)
            with m.Else():
                m.d.sync += c_beat.eq(c_beat + 1)
        m.d.comb += self.o_sent_bytes.eq(Mux(ending, c_len, 0))
        # the next read is taken as the last completion's last beat goes, so
        # completions follow one another without a gap
        m.d.comb += req.ready.eq((~serving | (ending & (c_left == c_len))) & ~self.i_clear)
        with m.If(req.valid & req.ready):
            m.d.sync += [serving.eq(req.payload.length != 0), c_dst.eq(req.payload.src),
                         c_addr.eq(req.payload.addr), c_left.eq(req.payload.length),
                         c_tag.eq(req.payload.tag), c_head.eq(1), c_beat.eq(0)]
            m.d.comb += self.o_bad.eq(req.payload.kind != TlpType.MRD)
        with m.If(self.i_clear):
            m.d.sync += serving.eq(0)
        return m
