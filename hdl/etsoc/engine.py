"""TensorSend / TensorRecv engine of one minion (seed 002, "Message size and
bandwidth", "What the numbers say" item 4, "A trap: one ready flag per minion").

A message is 1 to 127 vector registers of 32 B sent from hart 0 of one minion
straight into another minion's registers, reusing registers once past f31.
The receiver posts a receive, which sends a READY to its partner; the
partner's TensorSend waits for that READY, then sends a header flit and the
registers.  On arrival each register is copied, added, maxed or minned into
the register already held, in the same pipeline, so a combine costs nothing
extra.  A minion holds one partner's READY at a time: a second READY from
another partner stays at the head of the response channel and blocks it,
which is how the naive 2D layout hangs on the chip.

The hardware reduce and broadcast trees (seed 002, "Reduction trees") run in
the same engine when register ``TREE`` holds a mask of tree levels: at level
``L`` minion ``i`` pairs with ``i ^ (1 << L)`` (global minion indices, so levels
0-2 are a neighbourhood's tree edges, 3-4 cross the shire crossbar and 5-9 pair
shires over the mesh).  Going up the levels of the mask, a minion combines
what each child sends (TensorReduce, with the ``OP`` combine) until its own
index has the level's bit set; then it sends its partial result to that
parent and waits for the broadcast (TensorBroadcast, a copy), which it passes
down to its children, highest level first.  The root is the minion with no
bit of the mask set.  Each level has its own receive state, always posted
during a tree run ("one ready bit per level"), so a tree takes no READY
messages and cannot hang the way a naive 2D layout does; flits of several
children may interleave, and each is combined as it arrives.

A TensorSend may keep at most ``i_window_flits`` flits in flight
unacknowledged by the receiving engine, which answers every ``i_ack_flits``
flits it takes in, and a message's last, with an ACK on the response channel;
any count still owed when a 16-cycle sweep wraps goes out too, so no count
waits more than 16 cycles.  The sweep restarts at each ``i_start``: a run
takes the same cycles however long the engine idled before it.  Tree
messages use no window.  The default configuration leaves this window off
(``send_window_flits`` 0): the seed's "limited number of packets in flight"
is modelled at the shire's mesh stop (:class:`~hdl.etsoc.mesh.MeshStop`),
whose ACKs travel the mesh alone; a window here, whose ACKs also cross both
shires' crossbars and clock crossings, is a what-if.

Credit counters and the shire barrier (seed 002, "Every primitive, against a
GPU": "credit counters that let a core sleep until another core signals it,
and barrier counters in every shire"; "What it means": "a 32-minion FLB plus
credit barrier").  Every engine holds a credit counter that a ``CREDIT`` flit
from any minion raises by one.  In a credit run (register ``CREDIT``) the
engine sends ``TX_COUNT`` credits to ``TX_PEER``, each through the TensorSend
issue stage, and sleeps ``RX_COUNT`` times until its counter is nonzero; a wake
takes the TensorRecv completion latency and takes one credit.  ``COUPLE`` pairs
sends with wakes as it pairs messages, so a PING/PONG pair measures a credit
round trip.  In a barrier run (register ``BARRIER``, a mask of the shire's
minions taking part) the engine passes ``TX_COUNT`` barriers in a row: each
sends ``FLB`` (a fast-local-barrier arrival carrying the mask's population) to
its shire's :class:`~hdl.etsoc.shire.ShireBarrier`, whose answer says whether
it arrived last.  The last sends ``CREDIT_MCAST`` with the other members' mask,
and the barrier unit hands each of them a credit; the others sleep until that
credit arrives.  Credit and barrier flits are one-flit control messages on the
response channel, which engines always take in.

Register data is real: at ``ctl_init`` every register is filled with
:func:`register_word`, and at ``ctl_verify`` the engine checksums its register
file into :attr:`MinionEngine.o_checksum` (see :func:`checksum`), which the
testbench compares with a reference model of the messages.
"""

import enum

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.flit import VC
from ..common.mix import GOLDEN, fmix32_value, mixed_sum
from ..common.queue import sync_fifo

__all__ = ["MsgKind", "EngineReg", "Couple", "MinionEngine", "register_word", "checksum",
           "combine", "flit_sum", "tree_roles"]

LANE_BITS = 32


class MsgKind(enum.IntEnum):
    """Flit kinds of the message protocol (the flit's 3-bit ``kind``)."""

    HEAD = 0   #: message header: ``data[0:7]`` registers, ``data[7:9]`` combine op (request VC)
    DATA = 1   #: register data, ``addr`` = flit index in the message (request VC)
    READY = 2  #: receive posted, sender may send (response VC)
    ACK = 3    #: receiver to sender: ``data[0:8]`` message flits taken in (response VC); with
    #: ``data[16]`` set, one mesh stop's to another's, the count in ``data[0:16]``
    CREDIT = 4  #: raise the destination's credit counter by one (response VC)
    FLB = 5    #: barrier arrival to the shire's barrier unit, ``data[0:6]`` members (response VC)
    FLB_RESULT = 6  #: barrier unit to an arriving minion, ``data[0]`` = arrived last (response VC)
    CREDIT_MCAST = 7  #: to the shire's barrier unit: a credit to each minion of
    #: ``data[0:32]`` (response VC)


class Couple(enum.IntEnum):
    """How sends wait on receives (register ``COUPLE``)."""

    NONE = 0   #: sends and receives are independent (streams)
    PING = 1   #: send ``i`` waits for receive ``i - 1`` (the side that starts a ping-pong)
    PONG = 2   #: send ``i`` waits for receive ``i`` (the side that answers)


class EngineReg(enum.IntEnum):
    """Run-time registers of one engine (``cfg_addr`` low 4 bits)."""

    TX_PEER = 0   #: global minion index messages go to (10 bits)
    RX_PEER = 1   #: global minion index messages come from (10 bits)
    TX_COUNT = 2  #: messages to send (16 bits)
    RX_COUNT = 3  #: messages to receive (16 bits)
    NREGS = 4     #: registers per message sent, 1 to 127 (0 counts as 1)
    OP = 5        #: combine op of messages sent: 0 copy, 1 add, 2 max, 3 min
    COUPLE = 6    #: :class:`Couple`
    TX_PEER2 = 7  #: ``{enable, minion[9:0]}``: odd-numbered messages go here instead
    RX_PEER2 = 8  #: ``{enable, minion[9:0]}``: odd-numbered messages come from here
    TREE = 9      #: tree levels (10-bit mask, bit ``L`` = level ``L``); nonzero: a tree run
    CREDIT = 10   #: nonzero: a credit run (TX_COUNT credits to TX_PEER, RX_COUNT waits)
    BARRIER = 11  #: mask of the shire's minions in the barrier (32 bits); nonzero: a barrier run


def register_word(minion, word, flit_bytes=16):
    """Initial value of flit-sized word ``word`` of ``minion``'s register file.

    Lane ``i`` (32 bits) is ``{minion[9:0], word[7:0], i[3:0], 0x2A5[9:0]}``
    read from the top bit down, so every lane of every minion is distinct.
    Works on ints (returns an int) and Amaranth values (returns a value of
    ``8 * flit_bytes`` bits).
    """
    lanes = flit_bytes * 8 // LANE_BITS
    if isinstance(minion, int) and isinstance(word, int):
        out = 0
        for i in range(lanes):
            lane = 0x2A5 | (i & 0xF) << 10 | (word & 0xFF) << 14 | (minion & 0x3FF) << 22
            out |= lane << (LANE_BITS * i)
        return out
    word8 = Cat(word, Const(0, 8))[:8]
    minion10 = Cat(minion, Const(0, 10))[:10]
    return Cat(*(Cat(Const(0x2A5, 10), Const(i, 4), word8, minion10) for i in range(lanes)))


def combine(op, old, new, flit_bytes=16):
    """Python model of a combine on one flit-sized word: lane-wise over 32-bit
    lanes, unsigned; ``op`` is an index into :data:`hdl.etsoc.config.COMBINE_OPS`.
    """
    lanes = flit_bytes * 8 // LANE_BITS
    mask = (1 << LANE_BITS) - 1
    out = 0
    for i in range(lanes):
        a = old >> (LANE_BITS * i) & mask
        b = new >> (LANE_BITS * i) & mask
        v = (b, (a + b) & mask, max(a, b), min(a, b))[op]
        out |= v << (LANE_BITS * i)
    return out


def _lanes(word, flit_bytes):
    return [word >> (LANE_BITS * i) & 0xFFFFFFFF for i in range(flit_bytes * 8 // LANE_BITS)]


def checksum(words, flit_bytes=16):
    """Checksum the engine computes over its register file at ``ctl_verify``
    (``words``: its flit-sized words in address order, ints).

    :func:`hdl.common.mix.mixed_sum` of its 32-bit lanes numbered through the
    file: a lost, misplaced or corrupted lane changes it, and errors in
    several lanes do not cancel as they can in a plain sum.
    """
    return mixed_sum([lane for word in words for lane in _lanes(word, flit_bytes)])


def flit_sum(addr, data, flit_bytes=16):
    """What one data flit adds to an engine's ``o_tx_sum`` or ``o_rx_sum``,
    mod 2**32: :func:`hdl.common.mix.mixed_sum` of its 32-bit lanes, numbered
    from ``addr × lanes``, so the word address counts too.  Equal sums at
    both ends of a stream show no flit was lost, duplicated or corrupted in
    flight, whatever the register files hold, and do not depend on the order
    the flits arrive in, as a tree's interleaved children need."""
    lanes = _lanes(data, flit_bytes)
    return mixed_sum(lanes, first=addr * len(lanes))


def tree_roles(minion, levels):
    """``(parent, children)`` of global minion ``minion`` in the tree over the
    level mask ``levels`` (see the module docstring): ``parent`` is None at the
    root, ``children`` are listed lowest level first."""
    mine = levels & minion
    up = mine & -mine
    below = levels & (up - 1) if up else levels
    children = [minion ^ (1 << b) for b in range(10) if below >> b & 1]
    return (minion ^ up if up else None), children


class MinionEngine(wiring.Component):
    """TensorSend / TensorRecv engine and register file of one minion.
    Clock: minion clock (600 MHz).

    One Verilog module serves every minion of a build
    (:class:`~hdl.common.shared.SharedModule`): the minion's index is a port.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout (:func:`hdl.common.flit.flit_layout`, ``node_bits`` 10).
    registers : int
        Vector registers (32), each ``flits_per_register`` flits.
    flits_per_register : int
        Flits per 32 B register.
    checks : bool
        Build the testbench-only logic: the register-file checksum, the
        sums of the flits sent and received and the send window's check.
        Without it (``False``, for synthesis) ``o_checksum``, ``o_tx_sum``,
        ``o_rx_sum``, ``o_verify_done`` and ``o_window_broken`` stay 0; every
        experiment runs with checks.

    Members
    -------
    i_minion : In(10)
        Global minion index (``shire << 5 | minion``); hold it constant.
    i_we : In(1), i_reg : In(4), i_data : In(32)
        Register write port (:class:`EngineReg`); a write stops the engine
        until the next ``i_start``.
    i_init, i_start, i_verify : In(1)
        One-cycle pulses: fill the register file, start the run, checksum.
    i_now : In(32)
        Minion cycle counter, for the time stamps.
    i_send_cycles, i_recv_cycles : In(8)
        TensorSend issue latency (READY in hand to header out) and TensorRecv
        completion latency (last flit written to the receive retiring), in
        minion cycles (run-time fields ``engine_send_cycles``, ``engine_recv_cycles``).
    i_window_flits : In(8)
        Message flits a send may have in flight unacknowledged; 0: no window
        (run-time field ``send_window_flits``).
    i_ack_flits : In(8)
        Flits taken in per ACK, 1 or more (run-time field ``ack_flits``).
    o_req : Out(stream.Signature(flit_layout))
        Header and data flits (request VC).
    o_rsp : Out(stream.Signature(flit_layout))
        READY, ACK and control flits (``CREDIT``, ``FLB``, ``CREDIT_MCAST``;
        response VC); an owed ACK goes first, then a control flit.
    i_req, i_rsp : In(stream.Signature(flit_layout))
        Arriving flits of each VC.
    o_done : Out(1)
        Running, every message sent and received, every flit sent
        acknowledged and every ACK owed sent.
    o_init_done, o_verify_done : Out(1)
        Fill and checksum finished.
    o_progress : Out(1)
        A flit moved this cycle (for the watchdog).
    o_in_flight : Out(9)
        Message flits sent and not yet acknowledged.
    o_window_broken : Out(1)
        Sticky (with ``checks`` only): more message flits were in flight, the
        one being pushed included, than ``i_window_flits`` allows.
    o_tx_msgs, o_rx_msgs : Out(16)
        Messages sent and received this run.
    o_first_rx, o_last_rx : Out(32)
        ``i_now`` when the first and the latest receive of this run retired;
        0 until one has.
    o_checksum : Out(32)
        See :func:`checksum`: one 32-bit lane a cycle of the verify.
    o_errors : Out(16)
        Flits from a minion other than the current receive's partner, while
        running (protocol errors; consumed, never written).  A partner's flit
        that arrives before its receive is posted waits instead.
    o_first_stray : Out(11)
        ``{valid, source[9:0]}`` of the first such flit of the run.
    o_first_stray_cycle : Out(32)
        ``i_now`` when it arrived.
    o_ready_from : Out(11)
        ``{valid, source[9:0]}`` of the READY held (for stuck reports).
    o_blocked_ready : Out(11)
        ``{valid, source[9:0]}`` of a second READY waiting behind it.
    o_tx_sum, o_rx_sum : Out(32)
        :func:`flit_sum` over the data flits sent and received this run.
    o_sleeping : Out(1)
        Asleep in a credit wait with no credit yet (for stuck reports).
    o_credits : Out(16)
        Credits received and not yet taken by a wake (0 at the end of a
        correct run).

    In a credit run ``o_tx_msgs`` counts credits sent and ``o_rx_msgs``
    wakes; in a barrier run ``o_tx_msgs`` counts barriers passed.
    ``o_first_rx`` / ``o_last_rx`` stamp wakes (barrier exits) as they stamp
    receives.
    """

    def __init__(self, *, flit_layout, registers=32, flits_per_register=2, checks=True):
        self.flit_layout = flit_layout
        self.checks = bool(checks)
        self.registers = registers
        self.fpr = flits_per_register
        flit = stream.Signature(flit_layout)
        super().__init__({
            "i_minion": In(10), "i_we": In(1), "i_reg": In(4), "i_data": In(32),
            "i_init": In(1), "i_start": In(1), "i_verify": In(1), "i_now": In(32),
            "i_send_cycles": In(8), "i_recv_cycles": In(8),
            "i_window_flits": In(8), "i_ack_flits": In(8), "o_in_flight": Out(9),
            "o_window_broken": Out(1),
            "o_req": Out(flit), "o_rsp": Out(flit), "i_req": In(flit), "i_rsp": In(flit),
            "o_done": Out(1), "o_init_done": Out(1), "o_verify_done": Out(1),
            "o_progress": Out(1),
            "o_tx_msgs": Out(16), "o_rx_msgs": Out(16),
            "o_first_rx": Out(32), "o_last_rx": Out(32),
            "o_checksum": Out(32), "o_errors": Out(16), "o_first_stray": Out(11),
            "o_first_stray_cycle": Out(32),
            "o_ready_from": Out(11), "o_blocked_ready": Out(11),
            "o_tx_sum": Out(32), "o_rx_sum": Out(32), "o_sleeping": Out(1),
            "o_credits": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        layout = self.flit_layout
        words = self.registers * self.fpr
        wbits = (words - 1).bit_length()
        width = len(Signal(layout).data)
        lanes = width // LANE_BITS

        # --- run-time registers -------------------------------------------
        tx_peer1 = Signal(10)
        rx_peer1 = Signal(10)
        tx_peer2 = Signal(11)
        rx_peer2 = Signal(11)
        tx_count = Signal(16)
        rx_count = Signal(16)
        nregs = Signal(7, init=1)
        op = Signal(2)
        couple = Signal(2)
        tree_levels = Signal(10)
        credit_reg = Signal()
        barrier_mask = Signal(32)
        with m.If(self.i_we):
            with m.Switch(self.i_reg):
                for reg, sig in ((EngineReg.TX_PEER, tx_peer1), (EngineReg.RX_PEER, rx_peer1),
                                 (EngineReg.TX_PEER2, tx_peer2), (EngineReg.RX_PEER2, rx_peer2),
                                 (EngineReg.TX_COUNT, tx_count), (EngineReg.RX_COUNT, rx_count),
                                 (EngineReg.NREGS, nregs), (EngineReg.OP, op),
                                 (EngineReg.COUPLE, couple), (EngineReg.TREE, tree_levels),
                                 (EngineReg.CREDIT, credit_reg),
                                 (EngineReg.BARRIER, barrier_mask)):
                    with m.Case(reg):
                        m.d.sync += sig.eq(self.i_data)

        m.submodules.regfile = regfile = memory.Memory(shape=width, depth=words, init=[])
        rd_tx = regfile.read_port()
        rd_rx = regfile.read_port()
        wr = regfile.write_port()

        running = Signal()
        tx_sent = Signal(16)
        rx_done = Signal(16)
        # A second partner per direction takes the odd-numbered messages (a
        # cell of a 2D array sending east and south, receiving west and north).
        tx_peer = Signal(10)
        rx_peer = Signal(10)

        # --- tree roles (levels mask against this minion's index) ---
        me = self.i_minion
        tree = Signal()
        up_bit = Signal(10)     # one-hot level at which this minion sends up; 0 at the root
        below = Signal(10)      # levels at which it receives from a child
        m.d.comb += tree.eq(tree_levels.any())
        barrier_run = Signal()
        credit_run = Signal()
        msg_run = Signal()      # TensorSend / TensorRecv messages
        m.d.comb += [barrier_run.eq(~tree & barrier_mask.any()),
                     credit_run.eq(~tree & ~barrier_run & credit_reg),
                     msg_run.eq(~tree & ~barrier_run & ~credit_run)]
        mine = tree_levels & me
        m.d.comb += up_bit.eq(mine & (~mine + 1)[:10])
        m.d.comb += below.eq(Mux(up_bit.any(), tree_levels & (up_bit - 1)[:10], tree_levels))
        t_up_pending = Signal()   # the send to the parent is still to come
        t_down = Signal(10)       # levels still to broadcast to, highest first
        t_up_done = Signal()      # every child's message combined and retired
        t_down_done = Signal()    # the parent's broadcast received (the root: set)
        t_tx_bit = Signal(10)
        highest = Signal(10)
        for b in range(10):
            with m.If(t_down[b]):
                m.d.comb += highest.eq(1 << b)
        m.d.comb += t_tx_bit.eq(Mux(t_up_pending, up_bit, highest))
        m.d.comb += [tx_peer.eq(Mux(tree, me ^ t_tx_bit,
                                    Mux(tx_peer2[10] & tx_sent[0], tx_peer2[:10], tx_peer1))),
                     rx_peer.eq(Mux(rx_peer2[10] & rx_done[0], rx_peer2[:10], rx_peer1))]
        tx_more = Signal()
        m.d.comb += tx_more.eq(Mux(tree, t_up_pending | t_down.any(), tx_sent < tx_count))
        m.d.comb += [self.o_tx_msgs.eq(tx_sent), self.o_rx_msgs.eq(rx_done)]

        # --- fill ---------------------------------------------------------
        filling = Signal()
        fill_addr = Signal(wbits + 1)
        with m.If(self.i_init):
            m.d.sync += [filling.eq(1), fill_addr.eq(0), self.o_init_done.eq(0), running.eq(0)]
        with m.Elif(filling):
            with m.If(fill_addr == words - 1):
                m.d.sync += [filling.eq(0), self.o_init_done.eq(1)]
            m.d.sync += fill_addr.eq(fill_addr + 1)
        with m.If(self.i_start):
            m.d.sync += [running.eq(1), tx_sent.eq(0), rx_done.eq(0), self.o_errors.eq(0),
                         self.o_first_rx.eq(0), self.o_last_rx.eq(0),
                         self.o_first_stray.eq(0), self.o_first_stray_cycle.eq(0),
                         self.o_tx_sum.eq(0), self.o_rx_sum.eq(0),
                         t_up_pending.eq(up_bit.any()), t_down.eq(below),
                         t_up_done.eq(~below.any()), t_down_done.eq(~up_bit.any())]
        with m.If(self.i_we):
            # Reprogramming stops the engine until the next start, so a run's
            # register writes never set off traffic under the last run's counts.
            m.d.sync += running.eq(0)

        # --- READY slot: one partner at a time ------------------------------
        ready_valid = Signal()
        ready_src = Signal(10)
        m.d.comb += [
            self.i_rsp.ready.eq((self.i_rsp.payload.kind != MsgKind.READY) | ~ready_valid),
            self.o_ready_from.eq(Cat(ready_src, ready_valid)),
            self.o_blocked_ready.eq(Cat(self.i_rsp.payload.src, self.i_rsp.valid & ready_valid
                                        & (self.i_rsp.payload.kind == MsgKind.READY))),
        ]
        take_ready = Signal()
        take_ack = Signal()
        m.d.comb += [take_ready.eq(self.i_rsp.valid & self.i_rsp.ready
                                   & (self.i_rsp.payload.kind == MsgKind.READY)),
                     take_ack.eq(self.i_rsp.valid & (self.i_rsp.payload.kind == MsgKind.ACK))]
        use_ready = Signal()
        with m.If(take_ready):
            m.d.sync += [ready_valid.eq(1), ready_src.eq(self.i_rsp.payload.src)]
        with m.Elif(use_ready):
            m.d.sync += ready_valid.eq(0)

        # --- send -----------------------------------------------------------
        out = sync_fifo(width=layout.size, depth=4)
        m.submodules.tx_fifo = out
        m.d.comb += [self.o_req.payload.eq(out.r_data), self.o_req.valid.eq(out.r_rdy),
                     out.r_en.eq(self.o_req.ready)]
        s1_valid = Signal()
        s1 = Signal(layout)
        s1_head = Signal()
        nregs_sent = Signal(7)
        m.d.comb += nregs_sent.eq(Mux(nregs == 0, 1, nregs))
        head_word = Signal(width)
        m.d.comb += head_word.eq(Cat(nregs_sent, Mux(tree & ~t_up_pending, 0, op)))
        pushed = Signal(layout)
        m.d.comb += [pushed.eq(s1), pushed.data.eq(Mux(s1_head, head_word, rd_tx.data)),
                     out.w_en.eq(s1_valid), out.w_data.eq(pushed)]
        # The window counts message flits pushed towards the network and not
        # yet acknowledged; s1 holds the flit being pushed this cycle.
        in_flight = self.o_in_flight
        acked = Mux(take_ack, self.i_rsp.payload.data[:8], 0)
        window_on = ~tree & (self.i_window_flits != 0)
        with m.If(self.i_start):
            m.d.sync += in_flight.eq(0)
        with m.Else():
            m.d.sync += in_flight.eq(in_flight + (s1_valid & window_on) - acked)
        window_open = ~window_on | (in_flight + s1_valid < self.i_window_flits)
        room = (out.level + s1_valid < out.depth) & window_open
        if self.checks:
            # s1 loads only while in_flight + s1_valid < window, so the two
            # never sum to more than the window
            with m.If(window_on & (in_flight + s1_valid > self.i_window_flits)):
                m.d.sync += self.o_window_broken.eq(1)

        total_flits = Signal(8 + 2)
        m.d.comb += total_flits.eq(nregs_sent * self.fpr)
        tx_index = Signal(10)
        tx_word = Signal(wbits)
        send_wait = Signal(8)
        couple_ok = Signal()
        with m.If(tree):
            # up once every child is in; down once the parent's broadcast is in
            m.d.comb += couple_ok.eq(t_up_done & (t_up_pending | t_down_done))
        with m.Elif(couple == Couple.PING):
            m.d.comb += couple_ok.eq(rx_done >= tx_sent)
        with m.Elif(couple == Couple.PONG):
            m.d.comb += couple_ok.eq(rx_done > tx_sent)
        with m.Else():
            m.d.comb += couple_ok.eq(1)
        m.d.sync += s1_valid.eq(0)
        m.d.comb += rd_tx.addr.eq(tx_word)
        with m.FSM(name="tx"):
            with m.State("IDLE"):
                with m.If(running & (tree | msg_run) & tx_more & couple_ok
                          & (tree | (ready_valid & (ready_src == tx_peer)))):
                    m.d.comb += use_ready.eq(~tree)
                    m.d.sync += send_wait.eq(self.i_send_cycles)
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(send_wait != 0):
                    m.d.sync += send_wait.eq(send_wait - 1)
                with m.Elif(room):
                    m.d.sync += [s1_valid.eq(1), s1_head.eq(1), s1.kind.eq(MsgKind.HEAD),
                                 s1.vc.eq(VC.REQ), s1.src.eq(me), s1.dst.eq(tx_peer),
                                 s1.addr.eq(0), s1.last.eq(0),
                                 tx_index.eq(0), tx_word.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(room):
                    m.d.sync += [s1_valid.eq(1), s1_head.eq(0), s1.kind.eq(MsgKind.DATA),
                                 s1.addr.eq(tx_index), s1.last.eq(tx_index == total_flits - 1),
                                 tx_index.eq(tx_index + 1), tx_word.eq(tx_word + 1)]
                    m.d.comb += rd_tx.addr.eq(tx_word)
                    with m.If(tx_index == total_flits - 1):
                        m.d.sync += tx_sent.eq(tx_sent + 1)
                        with m.If(t_up_pending):
                            m.d.sync += t_up_pending.eq(0)
                        with m.Else():
                            m.d.sync += t_down.eq(t_down & ~t_tx_bit)
                        m.next = "IDLE"

        # --- receive --------------------------------------------------------
        ready_out = Signal()
        ack_valid = Signal()
        owed = Signal(8)          # flits taken in from ack_to, not yet acknowledged
        ack_to = Signal(10)
        ctl_valid = Signal()     # a control flit (credit, barrier) waiting to go
        ctl_kind = Signal(3)
        ctl_dst = Signal(10)
        ctl_data = Signal(32)
        m.d.comb += [self.o_rsp.valid.eq(ready_out | ack_valid | ctl_valid),
                     self.o_rsp.payload.kind.eq(Mux(ack_valid, MsgKind.ACK,
                                                    Mux(ctl_valid, ctl_kind, MsgKind.READY))),
                     self.o_rsp.payload.vc.eq(VC.RSP),
                     self.o_rsp.payload.src.eq(me),
                     self.o_rsp.payload.dst.eq(Mux(ack_valid, ack_to,
                                                   Mux(ctl_valid, ctl_dst, rx_peer))),
                     self.o_rsp.payload.data.eq(Mux(ack_valid, owed,
                                                    Mux(ctl_valid, ctl_data, 0))),
                     self.o_rsp.payload.last.eq(1)]
        ack_sent = ack_valid & self.o_rsp.ready
        ctl_sent = ~ack_valid & ctl_valid & self.o_rsp.ready
        with m.If(self.o_rsp.ready & ~ack_valid & ~ctl_valid):
            m.d.sync += ready_out.eq(0)
        rx_op = Signal(2)
        rx_flits = Signal(10)
        rx_seen = Signal(10)
        recv_wait = Signal(8)
        arriving = self.i_req.payload
        from_peer = self.i_req.valid & (arriving.src == rx_peer)
        # combine pipeline: read the old word, write old (+) new one cycle later
        c_valid = Signal()
        c_word = Signal(wbits)
        c_new = Signal(width)
        c_op = Signal(2)
        m.d.sync += c_valid.eq(0)
        with m.FSM(name="rx"):
            with m.State("IDLE"):
                with m.If(running & msg_run & (rx_done < rx_count)):
                    m.d.sync += ready_out.eq(1)
                    m.next = "HEAD"
            with m.State("HEAD"):
                # a new partner's message waits until the last one's flits are ACKed
                with m.If(from_peer & (arriving.kind == MsgKind.HEAD)
                          & ((owed == 0) | (ack_to == arriving.src))):
                    m.d.comb += self.i_req.ready.eq(1)
                    m.d.sync += [rx_op.eq(arriving.data[7:9]),
                                 rx_flits.eq(arriving.data[0:7] * self.fpr), rx_seen.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(from_peer & (arriving.kind == MsgKind.DATA)):
                    m.d.comb += [self.i_req.ready.eq(1), rd_rx.addr.eq(arriving.addr[:wbits])]
                    m.d.sync += [c_valid.eq(1), c_word.eq(arriving.addr[:wbits]),
                                 c_new.eq(arriving.data), c_op.eq(rx_op),
                                 rx_seen.eq(rx_seen + 1)]
                    with m.If(rx_seen + 1 == rx_flits):
                        m.d.sync += recv_wait.eq(self.i_recv_cycles)
                        m.next = "RETIRE"
            with m.State("RETIRE"):
                with m.If(~c_valid & (recv_wait == 0)):
                    m.d.sync += [rx_done.eq(rx_done + 1), self.o_last_rx.eq(self.i_now)]
                    with m.If(rx_done == 0):
                        m.d.sync += self.o_first_rx.eq(self.i_now)
                    m.next = "IDLE"
                with m.Elif(recv_wait != 0):
                    m.d.sync += recv_wait.eq(recv_wait - 1)
        # A flit from a minion that is not the receive's partner is a protocol
        # error: it is consumed and counted, never written.
        stray = Signal()
        with m.If(self.i_req.valid & running & ~tree
                  & (~msg_run | (arriving.src != rx_peer))):
            m.d.comb += [self.i_req.ready.eq(1), stray.eq(1)]
            m.d.sync += self.o_errors.eq(self.o_errors + 1)

        with m.If(stray & ~self.o_first_stray[10]):
            m.d.sync += [self.o_first_stray.eq(arriving.src | (1 << 10)),
                         self.o_first_stray_cycle.eq(self.i_now)]

        # --- ACKs of the send window ----------------------------------------------
        took = window_on & self.i_req.valid & self.i_req.ready & (arriving.src == rx_peer)
        flush = Signal()
        sweep = Signal(4)
        m.d.comb += ack_valid.eq((owed != 0) & ((owed >= self.i_ack_flits) | flush))
        # The sweep restarts with every run, so a run's timing depends on its
        # program alone, not on how many cycles passed before its start.
        with m.If(self.i_start):
            m.d.sync += [owed.eq(0), flush.eq(0), sweep.eq(0)]
        with m.Else():
            m.d.sync += [owed.eq(owed + took - Mux(ack_sent, owed, 0)), sweep.eq(sweep + 1)]
            with m.If(took):
                m.d.sync += ack_to.eq(arriving.src)
            with m.If(took & arriving.last):
                m.d.sync += flush.eq(1)
            with m.Elif(ack_sent):
                m.d.sync += flush.eq(0)
            with m.Elif(sweep == 0):
                # any count still owed when the sweep wraps goes out next cycle
                m.d.sync += flush.eq(owed != 0)

        # --- tree receive: every level's receive is posted for the whole run ---
        # A child's flits are combined with OP as they come, in any order and
        # interleaved with other children's; the parent's are copied.  A data
        # flit to the word the combine pipeline is still writing waits a cycle.
        level = Signal(10)
        m.d.comb += level.eq((arriving.src ^ me)[:10])
        one_hot = level.any() & ~(level & (level - 1)[:10]).any()
        from_child = one_hot & ~(level & ~below).any()
        from_parent = up_bit.any() & (level == up_bit)
        is_data = arriving.kind == MsgKind.DATA
        hazard = c_valid & (c_word == arriving.addr[:wbits])
        t_up_flits = Signal(16)
        t_down_flits = Signal(10)
        t_wait = Signal(8)
        children = Signal(4)
        m.d.comb += children.eq(sum(below[b] for b in range(10)))
        with m.If(self.i_start):
            m.d.sync += [t_up_flits.eq(0), t_down_flits.eq(0), t_wait.eq(self.i_recv_cycles)]
        with m.Elif(tree & running & self.i_req.valid):
            with m.If(~(from_child | from_parent)):
                m.d.comb += [self.i_req.ready.eq(1), stray.eq(1)]
                m.d.sync += self.o_errors.eq(self.o_errors + 1)
            with m.Elif(~is_data):
                m.d.comb += self.i_req.ready.eq(1)
                m.d.sync += rx_done.eq(rx_done + 1)
            with m.Elif(~hazard):
                m.d.comb += [self.i_req.ready.eq(1), rd_rx.addr.eq(arriving.addr[:wbits])]
                m.d.sync += [c_valid.eq(1), c_word.eq(arriving.addr[:wbits]),
                             c_new.eq(arriving.data), c_op.eq(Mux(from_child, op, 0))]
                with m.If(from_child):
                    m.d.sync += t_up_flits.eq(t_up_flits + 1)
                with m.Else():
                    m.d.sync += t_down_flits.eq(t_down_flits + 1)
        # Retire each phase ``i_recv_cycles`` after its last flit is written.
        up_in = ~t_up_done & (t_up_flits == children * total_flits)
        down_in = t_up_done & ~t_down_done & (t_down_flits == total_flits)
        with m.If(tree & running & ~c_valid & (up_in | down_in)):
            with m.If(t_wait != 0):
                m.d.sync += t_wait.eq(t_wait - 1)
            with m.Else():
                m.d.sync += [t_wait.eq(self.i_recv_cycles), self.o_last_rx.eq(self.i_now)]
                with m.If(up_in):
                    m.d.sync += t_up_done.eq(1)
                with m.Else():
                    m.d.sync += t_down_done.eq(1)
                with m.If(up_in | ~children.any()):
                    m.d.sync += self.o_first_rx.eq(self.i_now)

        # --- credit counter, credit runs and the shire barrier -------------------
        rsp_kind = self.i_rsp.payload.kind
        take_credit = self.i_rsp.valid & (rsp_kind == MsgKind.CREDIT)
        take_result = self.i_rsp.valid & (rsp_kind == MsgKind.FLB_RESULT)
        credits = self.o_credits
        credit_used = Signal()
        with m.If(self.i_start):
            m.d.sync += credits.eq(0)
        with m.Else():
            m.d.sync += credits.eq(credits + take_credit - credit_used)
        with m.If(ctl_sent):
            m.d.sync += ctl_valid.eq(0)
        members = Signal(6)
        m.d.comb += members.eq(sum(barrier_mask[k] for k in range(32)))
        others = barrier_mask & ~(Const(1, 32) << me[:5])[:32]
        ctl_wait = Signal(8)
        woke = Signal()          # a wake finished this cycle (progress for the watchdog)

        def load(kind, dst, data):
            m.d.sync += [ctl_valid.eq(1), ctl_kind.eq(kind), ctl_dst.eq(dst), ctl_data.eq(data)]

        def stamp(first):
            m.d.sync += self.o_last_rx.eq(self.i_now)
            with m.If(first):
                m.d.sync += self.o_first_rx.eq(self.i_now)

        def wake(wait, count):
            """In a WAKE state: count the wake latency down, then count the wake."""
            with m.If(wait != 0):
                m.d.sync += wait.eq(wait - 1)
            with m.Else():
                m.d.comb += woke.eq(1)
                m.d.sync += count.eq(count + 1)
                stamp(count == 0)
                m.next = "IDLE"

        with m.FSM(name="ctl") as ctl_fsm:
            with m.State("IDLE"):
                with m.If(running & barrier_run & (tx_sent < tx_count)):
                    m.d.sync += ctl_wait.eq(self.i_send_cycles)
                    m.next = "FLB_ISSUE"
                with m.Elif(running & credit_run & (tx_sent < tx_count) & couple_ok):
                    m.d.sync += ctl_wait.eq(self.i_send_cycles)
                    m.next = "CREDIT_ISSUE"
            with m.State("CREDIT_ISSUE"):
                with m.If(ctl_wait != 0):
                    m.d.sync += ctl_wait.eq(ctl_wait - 1)
                with m.Elif(~ctl_valid | ctl_sent):
                    load(MsgKind.CREDIT, tx_peer, 0)
                    m.d.sync += tx_sent.eq(tx_sent + 1)
                    m.next = "IDLE"
            with m.State("FLB_ISSUE"):
                with m.If(ctl_wait != 0):
                    m.d.sync += ctl_wait.eq(ctl_wait - 1)
                with m.Elif(~ctl_valid | ctl_sent):
                    load(MsgKind.FLB, me, members)
                    m.next = "FLB_RESULT"
            with m.State("FLB_RESULT"):
                with m.If(take_result & self.i_rsp.payload.data[0]):
                    m.d.sync += ctl_wait.eq(self.i_send_cycles)
                    m.next = "MCAST"
                with m.Elif(take_result):
                    m.next = "SLEEP"
            with m.State("MCAST"):
                # the last to arrive wakes the others through the barrier unit
                with m.If(ctl_wait != 0):
                    m.d.sync += ctl_wait.eq(ctl_wait - 1)
                with m.Elif(~ctl_valid | ctl_sent):
                    load(MsgKind.CREDIT_MCAST, me, others)
                    m.d.sync += tx_sent.eq(tx_sent + 1)
                    stamp(tx_sent == 0)
                    m.next = "IDLE"
            with m.State("SLEEP"):
                with m.If(credits != 0):
                    m.d.comb += credit_used.eq(1)
                    m.d.sync += ctl_wait.eq(self.i_recv_cycles)
                    m.next = "WAKE"
            with m.State("WAKE"):
                wake(ctl_wait, tx_sent)
        # a credit run's waits: sleep until a credit is in, wake, take it
        wake_wait = Signal(8)
        with m.FSM(name="credit_wait") as wait_fsm:
            with m.State("IDLE"):
                with m.If(running & credit_run & (rx_done < rx_count) & (credits != 0)):
                    m.d.comb += credit_used.eq(1)
                    m.d.sync += wake_wait.eq(self.i_recv_cycles)
                    m.next = "WAKE"
            with m.State("WAKE"):
                wake(wake_wait, rx_done)
        m.d.comb += self.o_sleeping.eq(
            running & (credits == 0)
            & (ctl_fsm.ongoing("SLEEP") | (credit_run & (rx_done < rx_count)
                                           & wait_fsm.ongoing("IDLE"))))

        combined = Signal(width)
        for i in range(lanes):
            a = rd_rx.data.word_select(i, LANE_BITS)
            b = c_new.word_select(i, LANE_BITS)
            lane = combined.word_select(i, LANE_BITS)
            with m.Switch(c_op):
                with m.Case(0):
                    m.d.comb += lane.eq(b)
                with m.Case(1):
                    m.d.comb += lane.eq(a + b)
                with m.Case(2):
                    m.d.comb += lane.eq(Mux(a > b, a, b))
                with m.Case(3):
                    m.d.comb += lane.eq(Mux(a < b, a, b))

        # --- the single write port: fill, or combine ---------------------------
        with m.If(filling):
            m.d.comb += [wr.en.eq(1), wr.addr.eq(fill_addr[:wbits]),
                         wr.data.eq(register_word(me, fill_addr, width // 8))]
        with m.Elif(c_valid):
            m.d.comb += [wr.en.eq(1), wr.addr.eq(c_word), wr.data.eq(combined)]

        if self.checks:
            # --- verify: checksum one lane per cycle --------------------------------
            verifying = Signal()
            v_word = Signal(wbits + 1)
            v_lane = Signal(range(lanes + 1))
            v_valid = Signal()
            v_key = Signal(32)      # the lane's number times GOLDEN
            with m.If(self.i_verify):
                m.d.sync += [verifying.eq(1), v_word.eq(0), v_lane.eq(0), v_key.eq(0),
                             self.o_checksum.eq(0), self.o_verify_done.eq(0)]
            with m.Elif(verifying):
                m.d.comb += rd_tx.addr.eq(v_word[:wbits])
                with m.If(v_word == words):
                    m.d.sync += [verifying.eq(0), self.o_verify_done.eq(1)]
                with m.Else():
                    # the word read at v_word is on rd_tx.data one cycle later
                    m.d.sync += v_valid.eq(1)
                    with m.If(v_valid):
                        lane_value = rd_tx.data.word_select(v_lane[:max(1, (lanes - 1).bit_length())],
                                                            LANE_BITS)
                        m.d.sync += [self.o_checksum.eq(
                                         self.o_checksum + fmix32_value((lane_value + v_key)[:32])),
                                     v_key.eq(v_key + GOLDEN)]
                        with m.If(v_lane == lanes - 1):
                            m.d.sync += [v_lane.eq(0), v_word.eq(v_word + 1), v_valid.eq(0)]
                        with m.Else():
                            m.d.sync += v_lane.eq(v_lane + 1)

            # --- transfer sums (see flit_sum) -----------------------------------------
            def fsum(flit):
                base = (flit.addr * (lanes * GOLDEN))[:32]
                return sum(fmix32_value((flit.data.word_select(i, LANE_BITS) + base
                                         + i * GOLDEN)[:32])
                           for i in range(lanes))
            with m.If(~self.i_start & self.o_req.valid & self.o_req.ready
                      & (self.o_req.payload.kind == MsgKind.DATA)):
                m.d.sync += self.o_tx_sum.eq(self.o_tx_sum + fsum(self.o_req.payload))
            with m.If(~self.i_start & self.i_req.valid & self.i_req.ready & is_data
                      & ~stray):
                m.d.sync += self.o_rx_sum.eq(self.o_rx_sum + fsum(arriving))

        rx_finished = Mux(tree, t_up_done & t_down_done, rx_done >= rx_count)
        m.d.comb += [
            # done once every flit sent is acknowledged and every ACK owed is out
            self.o_done.eq(running & ~tx_more & rx_finished & (in_flight == 0) & (owed == 0)
                           & ctl_fsm.ongoing("IDLE") & ~ctl_valid),
            self.o_progress.eq((self.o_req.valid & self.o_req.ready)
                               | (self.i_req.valid & self.i_req.ready) | take_ready
                               | take_ack | ack_sent | ctl_sent | take_credit | take_result | woke),
        ]
        return m
