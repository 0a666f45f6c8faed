"""Flit queues whose storage maps to the FPGA memory that suits their depth.

Amaranth's :class:`~amaranth.lib.fifo.SyncFIFO` reads its memory
asynchronously, which an FPGA can hold only in distributed (LUT) RAM: a deep
queue of wide flits then costs thousands of LUTs where a few block RAMs would
do.  :class:`RegisteredReadFIFO` keeps SyncFIFO's ports and its cycle-exact
behaviour but reads through a synchronous port, which Yosys maps to block
RAM.  :func:`sync_fifo` picks one of the two by depth, so every block of the
fabrics builds its buffers the same way in simulation and in synthesis.
"""

from amaranth import Elaboratable, Module, Mux, Signal
from amaranth.lib import fifo
from amaranth.lib.memory import Memory

__all__ = ["LUTRAM_MAX_DEPTH", "RegisteredReadFIFO", "sync_fifo"]

#: The deepest queue :func:`sync_fifo` leaves in distributed RAM, in entries:
#: one ECP5 TRELLIS_DPR16X4 is 16 deep, so a deeper queue needs a read
#: multiplexer across several and is better in block RAM.  (The iCE40 has no
#: distributed RAM; there a shallow queue becomes flip-flops.)
LUTRAM_MAX_DEPTH = 16


def _next(pointer, depth):
    return Mux(pointer == depth - 1, 0, pointer + 1)


class RegisteredReadFIFO(Elaboratable, fifo.FIFOInterface):
    """A synchronous FIFO with :class:`~amaranth.lib.fifo.SyncFIFO`'s ports
    and cycle-exact behaviour, whose memory has a registered read port.

    The read port is given the read pointer the queue will have in the next
    cycle and is transparent to the write port, so in every cycle ``r_data``
    equals what SyncFIFO's asynchronous read would show: an entry written in
    cycle *t* is readable in cycle *t* + 1, ``level``, ``w_rdy`` and
    ``r_rdy`` follow the same rules, and ``r_data`` matches even while the
    queue is empty.  (After a reset in the middle of a run ``r_data`` may
    differ for one cycle while ``r_rdy`` is 0.)  Yosys can map the memory
    to block RAM (ECP5 DP16KD or PDPW16KD, iCE40 SB_RAM40_4K), choosing by
    size, and emulates the transparency with a bypass multiplexer of
    ``width`` bits.

    ``sim.prove`` checks the equivalence with SyncFIFO (``fifo_registered_read``).

    Parameters
    ----------
    width : int
        Entry width, bits.
    depth : int
        Entries.

    Members
    -------
    w_data : Signal(width), in;  w_en : in;  w_rdy : out;  w_level : out
    r_data : Signal(width), out; r_en : in;  r_rdy : out;  r_level : out
    level : Signal(range(depth + 1)), out
        Entries held (SyncFIFO's meaning of each member).

    Raises
    ------
    TypeError
        If ``width`` or ``depth`` is not a non-negative integer (from
        :class:`~amaranth.lib.fifo.FIFOInterface`).  A depth of 0 gives, as
        for SyncFIFO, a queue that is never ready.
    """

    #: The read port shows an entry written in the same cycle (without it the
    #: queue would show stale data when read right after a write).
    _transparent = True

    def __init__(self, *, width, depth):
        super().__init__(width=width, depth=depth)
        self.level = Signal(range(depth + 1))

    def elaborate(self, platform):
        m = Module()
        if self.depth == 0:
            m.d.comb += [self.w_rdy.eq(0), self.r_rdy.eq(0)]
            return m
        m.d.comb += [
            self.w_rdy.eq(self.level != self.depth),
            self.r_rdy.eq(self.level != 0),
            self.w_level.eq(self.level),
            self.r_level.eq(self.level),
        ]
        do_read = self.r_rdy & self.r_en
        do_write = self.w_rdy & self.w_en

        m.submodules.storage = storage = Memory(shape=self.width, depth=self.depth, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync",
                                   transparent_for=(w_port,) if self._transparent else ())
        produce = Signal(range(self.depth))
        consume = Signal(range(self.depth))
        consume_next = Signal.like(consume)
        m.d.comb += [
            w_port.addr.eq(produce),
            w_port.data.eq(self.w_data),
            w_port.en.eq(do_write),
            consume_next.eq(Mux(do_read, _next(consume, self.depth), consume)),
            r_port.addr.eq(consume_next),
            self.r_data.eq(r_port.data),
        ]
        m.d.sync += consume.eq(consume_next)
        with m.If(do_write):
            m.d.sync += produce.eq(_next(produce, self.depth))
        with m.If(do_write & ~do_read):
            m.d.sync += self.level.eq(self.level + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += self.level.eq(self.level - 1)
        return m


def sync_fifo(*, width, depth):
    """A synchronous FIFO of ``depth`` entries of ``width`` bits with
    SyncFIFO's ports and cycle behaviour: Amaranth's
    :class:`~amaranth.lib.fifo.SyncFIFO` up to :data:`LUTRAM_MAX_DEPTH`
    entries (distributed RAM), a :class:`RegisteredReadFIFO` above (block
    RAM).

    Raises
    ------
    TypeError
        If ``width`` or ``depth`` is not a non-negative integer.
    """
    for name, value in (("width", width), ("depth", depth)):
        if not isinstance(value, int) or value < 0:
            raise TypeError(f"FIFO {name} must be a non-negative integer, not {value!r}")
    if depth > LUTRAM_MAX_DEPTH:
        return RegisteredReadFIFO(width=width, depth=depth)
    return fifo.SyncFIFO(width=width, depth=depth)
