"""Experiments of seed 002 on the ET-SoC-1 network model.

Each experiment turns a :class:`~hdl.etsoc.config.MeshConfig` into runs (the
engine registers of every minion taking part), and turns the counters the
testbench read back into the shared result JSON.  Python only configures,
keeps a reference model of the register data (to check every receive) and
fits: every cycle count comes from the RTL's counters, in minion cycles.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np

from hdl.etsoc.config import COMBINE_OPS, MeshConfig, hops
from hdl.etsoc.engine import Couple, EngineReg, checksum, combine, register_word, tree_roles
from hdl.etsoc.mesh import ALL_MINIONS, GLOBAL, Port, counter_names, mesh_registers
from hdl.etsoc.shire import ENGINE_STATE_FLAGS
from sim import stall
from sim.etsoc_placement import N_SHIRES, hop_stats
from sim.experiments import (SetByExperiment, load_reference, miscounted_cycles, sticky_fault,
                             unfinished)
from sim.fit import row_error_pct

__all__ = ["ExperimentError", "EXPERIMENTS", "PingPong", "OneWay", "Cell", "Cells", "Tree",
           "slowdown_bound", "Flows", "CreditPingPong", "Barrier", "Part", "reference",
           "build_config", "build_parts", "build_runs", "build_run", "plan", "analyse",
           "check_run", "check_expected_hang", "misrouted_report", "minion_name",
           "expected_checksums", "tree_levels", "settle_cycles", "pairs_runs", "sample_pairs",
           "broadcast_writes", "build_notes", "COMBINING_OPS"]

FABRIC = "mesh"
#: Ping-pong exchanges per measured round trip; the round trip is the spacing
#: of the pinging minion's receives, so the first exchange's start-up drops out.
#: Three give two spacings: against five, the 496-pair fit moved by 0.003
#: cycles per hop and its worst residual from 0.22 to 0.47 cycles, for a
#: quarter (round trips) to a third (1 KB) fewer simulated cycles.
EXCHANGES = 3

#: The valid bit of an engine's ``ready_from`` / ``blocked_ready`` counter
#: (``{valid, source[9:0]}``, :class:`~hdl.etsoc.engine.MinionEngine`).
READY_VALID = 1 << 10

#: Bits of an engine's ``state`` counter (:data:`~hdl.etsoc.shire.ENGINE_STATE_FLAGS`):
#: asleep in a credit wait with no credit, and the sticky send-window check
#: (:attr:`~hdl.etsoc.engine.MinionEngine.o_window_broken`).
STATE_SLEEPING = 1 << ENGINE_STATE_FLAGS.index("sleeping")
STATE_WINDOW_BROKEN = 1 << ENGINE_STATE_FLAGS.index("window_broken")


class ExperimentError(RuntimeError):
    """A run lost, duplicated or corrupted data, or stopped making progress."""


def reference():
    """The seed values in ``sim/reference/mesh.toml`` as a nested dict."""
    return load_reference("mesh")


def minion_name(gid):
    """Counter prefix of global minion ``gid`` (``s<shire>.m<minion>``)."""
    return f"s{gid >> 5}.m{gid & 31}"


@dataclass(frozen=True)
class _Exchange:
    a: int
    b: int
    nregs: int = 1
    op: int = 0
    exchanges: int = EXCHANGES


@dataclass(frozen=True)
class PingPong(_Exchange):
    """Minion ``a`` (global index) sends ``exchanges`` messages of ``nregs``
    registers to ``b``, each answered by one from ``b``; ``op`` indexes
    :data:`COMBINE_OPS`."""


@dataclass(frozen=True)
class OneWay(_Exchange):
    """Minion ``a`` streams ``exchanges`` messages of ``nregs`` registers to ``b``;
    ``b`` posts its next receive as soon as the last one retires (seed 002,
    "Message size and bandwidth")."""


@dataclass(frozen=True)
class CreditPingPong(_Exchange):
    """Minion ``a`` sends a credit to ``b`` and sleeps until ``b``'s comes back;
    ``b`` sleeps until ``a``'s arrives, then sends its own, ``exchanges`` times
    (seed 002, "Latency grows with distance, except through memory": credit
    round trips).  No register data move (``nregs`` and ``op`` are unused)."""


@dataclass(frozen=True)
class Barrier:
    """``members`` (global minion indices, all of one shire) pass ``exchanges``
    FLB plus credit barriers in a row: each arrives at the shire's barrier
    counter, the last to arrive sends a credit to every other member, and the
    others sleep until their credit comes (seed 002, "What it means": "a
    32-minion FLB plus credit barrier is 233 cycles")."""

    members: tuple
    exchanges: int = 8

    @property
    def mask(self):
        """32-bit mask of the members' minion numbers within their shire (the
        ``BARRIER`` register's value)."""
        return sum(1 << (g & 31) for g in self.members)

    @property
    def a(self):
        """First member (global minion index), the program's first end."""
        return self.members[0]

    @property
    def b(self):
        """Last member (global minion index), the program's other end."""
        return self.members[-1]


@dataclass(frozen=True)
class Cell:
    """One minion's part in a :class:`Cells` layout: messages go to ``tx``
    (alternating over the partners listed, at most two) and come from ``rx``;
    ``couple`` is a :class:`~hdl.etsoc.engine.Couple`."""

    minion: int
    tx: tuple = ()
    rx: tuple = ()
    couple: int = Couple.NONE


@dataclass(frozen=True)
class Cells:
    """A layout of several minions, each sending ``exchanges`` messages to
    every partner in ``tx`` and receiving as many from every partner in
    ``rx`` (seed 002, "A trap: one ready flag per minion").

    ``order`` gives the message deliveries ``(sender, receiver)`` of one round
    in the order the layout's couplings force, for the register-data
    reference model; empty when the layout is expected to hang."""

    cells: tuple
    exchanges: int = EXCHANGES
    order: tuple = ()
    nregs: int = 1
    op: int = 0

    @property
    def a(self):
        """First cell's minion (global index), the program's first end."""
        return self.cells[0].minion

    @property
    def b(self):
        """Last cell's minion (global index), the program's other end."""
        return self.cells[-1].minion


@dataclass(frozen=True)
class Tree:
    """A hardware allreduce: every minion whose global index has bits only in
    ``levels`` (a 10-bit mask of tree levels) reduces with ``op`` up the tree,
    then takes the result broadcast back down (seed 002, "Reduction trees").
    ``base`` is the index with every level's bit clear (the root)."""

    levels: int
    base: int = 0
    nregs: int = 1
    op: int = 1
    exchanges: int = 2

    @property
    def members(self):
        """Global minion indices of the tree, root first: ``base`` with every
        combination of the bits of ``levels``."""
        bits = [b for b in range(10) if self.levels >> b & 1]
        return tuple(self.base | sum(1 << b for i, b in enumerate(bits) if k >> i & 1)
                     for k in range(1 << len(bits)))

    @property
    def a(self):
        """The root (global minion index)."""
        return self.base

    @property
    def b(self):
        """The last member (global minion index), the program's other end."""
        return self.members[-1]


@dataclass(frozen=True)
class Flows:
    """Messages between minions: each ``(sender, receiver)`` pair carries
    ``exchanges`` messages of ``nregs`` registers, every minion sending to one
    partner and receiving from one (seed 002, "Energy per byte moved": rings
    inside a shire, or to shires a fixed number of IDs away).  With ``couple``
    :attr:`~hdl.etsoc.engine.Couple.PING` a minion sends message ``i`` once it
    has received message ``i - 1``, so a ring passes its data on step by step;
    with ``NONE`` the streams run free.  Registers are overwritten while they
    are sent, so the data are checked in flight: each receiver's ``rx_sum``
    must equal its sender's ``tx_sum``."""

    pairs: tuple
    nregs: int = 32
    exchanges: int = 6
    op: int = 0
    couple: int = Couple.PING

    @property
    def a(self):
        """First pair's sender (global minion index)."""
        return self.pairs[0][0]

    @property
    def b(self):
        """First pair's receiver (global minion index)."""
        return self.pairs[0][1]


@dataclass(frozen=True)
class Experiment:
    """One experiment: its runs and how to read them.

    ``build`` holds structural fields the experiment builds with unless the
    user sets them (the measured minions need no full shire).  An experiment
    with ``parts`` runs each part on its own build and reads them together."""

    name: str
    title: str
    #: callable(cfg) yielding ``(label, program or list of programs, meta dict or list)``
    runs: object
    #: callable(cfg, runs, results) returning ``(series, rows, extra JSON keys)``;
    #: with ``parts``, callable({part: (cfg, runs, results)})
    rows: object
    build: tuple = ()
    notes: tuple = ()
    parts: tuple = ()


@dataclass(frozen=True)
class Part:
    """One build of a several-build experiment: its name, the structural fields
    it builds with (unless the user sets them) and its runs (as
    :attr:`Experiment.runs`)."""

    name: str
    build: tuple
    runs: object


def _with_build(cfg, build, explicit, where):
    fields = {k: v for k, v in build if k not in explicit}
    try:
        return cfg.replace(**fields)
    except ValueError as error:
        if not fields:
            raise
        held = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        mine = sorted(k for k in explicit if hasattr(cfg, k))
        told = ", ".join(f"{k}={getattr(cfg, k)!r}" for k in mine) or "the settings"
        # the build's fields are the experiment's own: a run of the whole
        # fabric skips it, as for any field an experiment sets itself
        raise SetByExperiment(f"{told} {'does' if len(mine) == 1 else 'do'} not fit {where} "
                              f"({held}): {error}") from None


def build_config(cfg, exp, explicit=()):
    """``cfg`` with the experiment's build fields, except those in ``explicit``.

    Raises
    ------
    sim.experiments.SetByExperiment
        If the build fields and the user's settings do not make a valid
        configuration (the message names the user's fields, the build's and
        the field the configuration refuses): a run of the whole fabric skips
        the experiment.
    """
    return _with_build(cfg, exp.build, explicit, f"mesh.{exp.name}'s build")


def build_parts(cfg, exp, explicit=()):
    """``[(part name or None, configuration)]``: the builds ``exp`` runs on.

    Raises
    ------
    sim.experiments.SetByExperiment
        If a part's build fields and the user's settings do not make a valid
        configuration (the message names the field).
    """
    if not exp.parts:
        return [(None, build_config(cfg, exp, explicit))]
    return [(p.name, _with_build(cfg, p.build, explicit, f"mesh.{exp.name}'s {p.name} build"))
            for p in exp.parts]


def _regs(gid, cfg):
    words = cfg.registers * cfg.flits_per_register
    return [register_word(gid, w, cfg.flit_bytes) for w in range(words)]


def _deliver(cfg, sender, receiver, nregs, op):
    words = len(sender)
    for k in range(nregs * cfg.flits_per_register):
        w = k % words
        receiver[w] = combine(op, receiver[w], sender[w], cfg.flit_bytes)


def expected_checksums(cfg, pp):
    """Reference model of a :class:`PingPong`, :class:`OneWay`, :class:`Cells`
    or :class:`Tree`: ``{minion: checksum}`` every register file taking part
    must end with (messages arrive in order, a ping-pong alternates, a layout
    follows its ``order``, a tree leaves every member with the combine of
    all; a layout without an order is expected to hang, and :class:`Flows`
    are checked by their transfer sums, so both have none; credits and
    barriers move no register data, so their members' files stay as filled)."""
    if isinstance(pp, Flows):
        return {}
    if isinstance(pp, (CreditPingPong, Barrier)):
        return {g: checksum(_regs(g, cfg), cfg.flit_bytes) for g in _members(pp)}
    if isinstance(pp, Tree):
        members = pp.members
        regs = {g: _regs(g, cfg) for g in members}
        words = len(regs[members[0]])
        for k in range(pp.nregs * cfg.flits_per_register):
            w = k % words
            total = regs[members[0]][w]
            for g in members[1:]:
                total = combine(pp.op, total, regs[g][w], cfg.flit_bytes)
            for g in members:
                regs[g][w] = total
        return {g: checksum(r, cfg.flit_bytes) for g, r in regs.items()}
    if isinstance(pp, Cells):
        regs = {c.minion: _regs(c.minion, cfg) for c in pp.cells}
        for _ in range(pp.exchanges):
            for sender, receiver in pp.order:
                _deliver(cfg, regs[sender], regs[receiver], pp.nregs, pp.op)
        return {g: checksum(r, cfg.flit_bytes) for g, r in regs.items()} if pp.order else {}
    ra, rb = _regs(pp.a, cfg), _regs(pp.b, cfg)
    for _ in range(pp.exchanges):
        _deliver(cfg, ra, rb, pp.nregs, pp.op)
        if isinstance(pp, PingPong):
            _deliver(cfg, rb, ra, pp.nregs, pp.op)
    return {pp.a: checksum(ra, cfg.flit_bytes), pp.b: checksum(rb, cfg.flit_bytes)}


def _members(pp):
    """Global minion indices a program uses, each once."""
    if isinstance(pp, Cells):
        return [c.minion for c in pp.cells]
    if isinstance(pp, Tree):
        return list(pp.members)
    if isinstance(pp, Flows):
        return list(dict.fromkeys(g for pair in pp.pairs for g in pair))
    if isinstance(pp, Barrier):
        return list(pp.members)
    return [pp.a, pp.b]


def build_run(cfg, label, programs, dirty=None, meta=None):
    """Register writes of one run, the counters to read and the checksums expected.

    ``programs`` is a :class:`PingPong`, :class:`OneWay`, :class:`Cells`,
    :class:`Tree`, :class:`Flows`, :class:`CreditPingPong` or
    :class:`Barrier`, or a list of them running at the same
    time on distinct minions; ``meta`` (a dict, or a list
    with one dict per program) is kept with each program for analysis.
    ``dirty`` is the set of minions programmed by the previous run (cleared
    here, then set to this run's).

    Raises
    ------
    ValueError
        If a minion is not built or used twice, a barrier's members are not of
        one shire, or ``nregs`` or ``op`` is out of range; the message names
        the field and the allowed values.
    """
    if isinstance(programs, (_Exchange, Cells, Tree, Flows, Barrier)):
        programs, meta = [programs], [meta or {}]
    meta = meta if isinstance(meta, list) else [meta or {}] * len(programs)
    if len(meta) != len(programs):
        raise ValueError(f"meta must have one entry per program ({len(programs)}), "
                         f"not {len(meta)}")
    dirty = set() if dirty is None else dirty
    for pp in programs:
        if isinstance(pp, Tree) and not (isinstance(pp.levels, int) and 0 < pp.levels < 1024
                                         and pp.base & pp.levels == 0):
            raise ValueError(f"levels must be a mask of tree levels 0-9 (1 to 1023) sharing no "
                             f"bit with base ({pp.base}), not {pp.levels!r}")
    for pp in programs:
        if isinstance(pp, Barrier) and not (
                isinstance(pp.members, tuple) and pp.members
                and all(isinstance(g, int) and not isinstance(g, bool) for g in pp.members)
                and len({g >> 5 for g in pp.members}) == 1):
            raise ValueError(f"members must be a non-empty tuple of global minion indices of "
                             f"one shire, not {pp.members!r}")
    barrier_shires = [pp.members[0] >> 5 for pp in programs if isinstance(pp, Barrier)]
    if len(set(barrier_shires)) != len(barrier_shires):
        raise ValueError(f"barriers must be in different shires within a run (a shire has one "
                         f"barrier counter), not two in shire {barrier_shires}")
    used = [g for pp in programs for g in _members(pp)]
    partners = [g for pp in programs if isinstance(pp, Cells) for c in pp.cells
                for g in c.tx + c.rx]
    for gid in used + partners:
        if not isinstance(gid, int) or isinstance(gid, bool):
            raise ValueError(f"minion must be a global minion index (shire << 5 | minion), "
                             f"not {gid!r}")
    for gid in used + partners:
        shire, minion = gid >> 5, gid & 31
        if not (0 <= shire < cfg.compute_shires and 0 <= minion < cfg.minions_per_shire):
            raise ValueError(f"minion must be in a built shire position (shire < "
                             f"{cfg.compute_shires}, minion < {cfg.minions_per_shire}), "
                             f"not shire {shire} minion {minion}")
    if len(set(used)) != len(used):
        raise ValueError(f"minions must be distinct within a run, not {sorted(used)}")
    for pp in programs:
        if not (isinstance(pp.exchanges, int) and 2 <= pp.exchanges <= 65535):
            raise ValueError(f"exchanges must be an integer from 2 to 65535, "
                             f"not {pp.exchanges!r}")
        if isinstance(pp, Barrier):
            continue
        most = cfg.registers if isinstance(pp, Tree) else 127
        if not (isinstance(pp.nregs, int) and 1 <= pp.nregs <= most):
            # a tree message that wrapped past f31 would combine a word twice
            raise ValueError(f"nregs must be an integer from 1 to {most}"
                             f"{' for a tree' if most != 127 else ''}, not {pp.nregs!r}")
        ops = COMBINE_OPS[1:] if isinstance(pp, Tree) else COMBINE_OPS
        if not isinstance(pp.op, int) or isinstance(pp.op, bool) \
                or pp.op not in range(len(COMBINE_OPS)) or COMBINE_OPS[pp.op] not in ops:
            raise ValueError(f"op must be one of {', '.join(ops)}, not {pp.op!r}")
    writes = [(GLOBAL | reg, value) for reg, value in mesh_registers(cfg).items()]
    # CREDIT and BARRIER are written only where a run sets them, or a run before
    # did, so other runs keep their register writes (and with them the phase of
    # the two clocks at the start).
    minions = {g for g in dirty if isinstance(g, int)}
    controlled = {g[1] for g in dirty if isinstance(g, tuple)}
    for gid in sorted(minions - set(used)):
        writes += [(gid << 4 | reg, 0) for reg in (EngineReg.TX_COUNT, EngineReg.RX_COUNT,
                                                   EngineReg.TREE)]
    for gid in sorted(controlled - set(used)):
        writes += [(gid << 4 | EngineReg.CREDIT, 0), (gid << 4 | EngineReg.BARRIER, 0)]
    now_controlled = set()

    def control(gid, credit=0, barrier=0):
        """CREDIT and BARRIER writes of ``gid``, where needed."""
        if credit or barrier:
            now_controlled.add(gid)
        if credit or barrier or gid in controlled:
            return [(EngineReg.CREDIT, credit), (EngineReg.BARRIER, barrier)]
        return []
    counts, expect, sum_pairs = {}, {}, []
    for pp in programs:
        n = pp.exchanges
        if isinstance(pp, Tree):
            for me in pp.members:
                parent, children = tree_roles(me, pp.levels)
                for reg, value in ((EngineReg.TX_COUNT, 0), (EngineReg.RX_COUNT, 0),
                                   (EngineReg.NREGS, pp.nregs), (EngineReg.OP, pp.op),
                                   (EngineReg.COUPLE, Couple.NONE),
                                   (EngineReg.TX_PEER2, 0), (EngineReg.RX_PEER2, 0),
                                   (EngineReg.TREE, pp.levels), *control(me)):
                    writes.append((me << 4 | reg, int(value)))
                messages = len(children) + (parent is not None)
                counts[f"{minion_name(me)}.tx_msgs"] = messages
                counts[f"{minion_name(me)}.rx_msgs"] = messages
            expect.update({f"{minion_name(g)}.checksum": v
                           for g, v in expected_checksums(cfg, pp).items()})
            continue
        if isinstance(pp, Barrier):
            for me in pp.members:
                for reg, value in ((EngineReg.TX_COUNT, n), (EngineReg.RX_COUNT, 0),
                                   (EngineReg.COUPLE, Couple.NONE), (EngineReg.TREE, 0),
                                   *control(me, barrier=pp.mask)):
                    writes.append((me << 4 | reg, int(value)))
                counts[f"{minion_name(me)}.tx_msgs"] = n
                counts[f"{minion_name(me)}.rx_msgs"] = 0
            expect.update({f"{minion_name(g)}.checksum": v
                           for g, v in expected_checksums(cfg, pp).items()})
            continue
        if isinstance(pp, (PingPong, CreditPingPong)):
            roles = ((pp.a, (pp.b,), (pp.b,), Couple.PING, n, n),
                     (pp.b, (pp.a,), (pp.a,), Couple.PONG, n, n))
        elif isinstance(pp, OneWay):
            roles = ((pp.a, (pp.b,), (pp.b,), Couple.NONE, n, 0),
                     (pp.b, (pp.a,), (pp.a,), Couple.NONE, 0, n))
        elif isinstance(pp, Flows):
            to = dict(pp.pairs)
            came = {r: t for t, r in pp.pairs}
            if len(to) != len(pp.pairs) or len(came) != len(pp.pairs):
                raise ValueError("pairs must give each minion at most one receiver and one "
                                 f"sender, not {pp.pairs}")
            roles = tuple((g, (to[g],) if g in to else (), (came[g],) if g in came else (),
                           pp.couple if g in to and g in came else Couple.NONE,
                           n if g in to else 0, n if g in came else 0)
                          for g in _members(pp))
            sum_pairs += [(f"{minion_name(r)}.rx_sum", f"{minion_name(t)}.tx_sum")
                          for t, r in pp.pairs]
        else:
            roles = tuple((c.minion, c.tx, c.rx, c.couple, n * len(c.tx), n * len(c.rx))
                          for c in pp.cells)
        for me, txs, rxs, couple, tx, rx in roles:
            if len(txs) > 2 or len(rxs) > 2:
                raise ValueError(f"tx and rx must name at most two partners, not {txs}, {rxs}")
            if max(tx, rx) > 0xFFFF:
                raise ValueError(f"exchanges must keep each minion's message count under "
                                 f"65536, not {max(tx, rx)} for {minion_name(me)}")
            second = {EngineReg.TX_PEER2: txs[1:], EngineReg.RX_PEER2: rxs[1:]}
            for reg, value in ((EngineReg.TX_PEER, (txs or (0,))[0]),
                               (EngineReg.RX_PEER, (rxs or (0,))[0]),
                               (EngineReg.TX_PEER2, 1 << 10 | second[EngineReg.TX_PEER2][0]
                                if second[EngineReg.TX_PEER2] else 0),
                               (EngineReg.RX_PEER2, 1 << 10 | second[EngineReg.RX_PEER2][0]
                                if second[EngineReg.RX_PEER2] else 0),
                               (EngineReg.TX_COUNT, tx), (EngineReg.RX_COUNT, rx),
                               (EngineReg.NREGS, pp.nregs), (EngineReg.OP, pp.op),
                               (EngineReg.COUPLE, couple), (EngineReg.TREE, 0),
                               *control(me, credit=int(isinstance(pp, CreditPingPong)))):
                writes.append((me << 4 | reg, int(value)))
            counts[f"{minion_name(me)}.tx_msgs"] = tx
            counts[f"{minion_name(me)}.rx_msgs"] = rx
        expect.update({f"{minion_name(g)}.checksum": v
                       for g, v in expected_checksums(cfg, pp).items()})
    dirty.clear()
    dirty.update(used)
    dirty.update(("control", g) for g in now_controlled)
    names = [minion_name(g) for g in used]
    return {
        "label": label, "writes": broadcast_writes(cfg, writes),
        "programs": [dict(m, a=pp.a, b=pp.b, exchanges=pp.exchanges)
                     for pp, m in zip(programs, meta)],
        "read": [f"{n}.{c}" for n in names for c in ("tx_msgs", "rx_msgs", "first_rx",
                                                      "last_rx", "errors", "tx_sum",
                                                      "rx_sum", "state", "first_stray_cycle")],
        "sum_pairs": sum_pairs,
        "verify": [f"{n}.checksum" for n in names],
        "on_stuck": [f"{n}.{c}" for n in names for c in ("ready_from", "blocked_ready",
                                                          "state")]
        + [f"{b.name}.{c}" for b in stall_blocks(cfg)
           for c in ("occupied", "no_credit", *(f"in{p}.wants" for p in range(len(Port))))],
        "expect": expect,
        "exchanges": max(pp.exchanges for pp in programs),
        "counts": counts,
        "expect_stuck": any(m.get("expect_stuck") for m in meta),
    }


def broadcast_writes(cfg, writes):
    """``writes`` (``[(cfg_addr, value)]``) with every engine register that
    they set on each minion of the build written once for all minions
    (:data:`~hdl.etsoc.mesh.ALL_MINIONS` ``| reg``, its commonest value),
    followed by the minions that take another value.  Every register ends as
    the per-minion writes leave it; a run over all 1,024 minions takes 8 writes
    of the configuration bus (minion cycles) instead of 8,192.  Mesh-wide
    writes stay first and in order."""
    built = {cfg.minion_id(s, k) for s in range(cfg.compute_shires)
             for k in range(cfg.minions_per_shire)}
    final = {}
    for addr, value in writes:
        if not addr & GLOBAL:
            final.setdefault(addr & 15, {})[addr >> 4] = value
    common = {reg: statistics.mode(values.values()) for reg, values in final.items()
              if values.keys() == built}
    out = [(addr, value) for addr, value in writes if addr & GLOBAL]
    out += [(ALL_MINIONS | reg, value) for reg, value in common.items()]
    for addr, value in writes:
        reg, gid = addr & 15, addr >> 4
        if addr & GLOBAL:
            continue
        if reg not in common:
            out.append((addr, value))
        elif gid in final[reg]:
            last = final[reg].pop(gid)      # a register written twice keeps its last value
            if last != common[reg]:
                out.append((addr, last))
    return out


def build_runs(cfg, exp, part=None):
    """Every run of ``exp`` (of its part named ``part``) under ``cfg`` (register
    writes, counters to read, the checksums expected).

    Raises
    ------
    ValueError
        If a run names a minion the build does not have, or a bad message size or op.
    """
    runs = exp.runs if part is None else next(p.runs for p in exp.parts if p.name == part)
    dirty = set()
    return [build_run(cfg, label, programs, dirty, meta) for label, programs, meta in runs(cfg)]


def plan(cfg, runs):
    """The JSON plan handed to ``testbenches.mesh``.

    A run may take ``run_cycles`` minion cycles before it is called still
    moving (a live run the watchdog cannot stop): twice ``watchdog_cycles``
    plus 2,000 cycles per exchange of its longest program, the most any run
    takes at the seed's settings, times :func:`slowdown_bound`."""
    longest = max((r["exchanges"] for r in runs), default=1)
    return {"counter_names": counter_names(cfg), "runs": runs,
            "clock_ps": {"clk": round(1e6 / cfg.minion_mhz), "mesh_clk": round(1e6 / cfg.mesh_mhz)},
            "init_cycles": 4 * cfg.registers * cfg.flits_per_register * 8 + 1000,
            "run_cycles": 2 * cfg.watchdog_cycles + 2000 * longest * slowdown_bound(cfg),
            "settle_cycles": settle_cycles(cfg)}


def settle_cycles(cfg):
    """Minion cycles the testbench reads the senders' ``credits_away`` after
    the checksum, until all are 0: ``watchdog_cycles`` times
    :func:`slowdown_bound` (the last ACKs of a large mesh, or of a mesh clock
    slow against the minions', may still be on their way)."""
    return cfg.watchdog_cycles * slowdown_bound(cfg)


def slowdown_bound(cfg):
    """An integer of at least 1 that a run's cycle limit and its settle read
    (:func:`settle_cycles`) are multiplied by (a margin, never a result) for
    the settings that slow a stream most: a window of ``w`` flits
    (``mesh_window_flits`` or ``send_window_flits``) below the seed's 51
    streams up to ``51 / w`` times slower, a mesh clock slower against the
    minion clock than the seed's 400 to 600 MHz, or a router hop longer than
    its 4 mesh cycles, in proportion.  Longer stage
    latencies (``crossbar_cycles`` and the like, up to 255 each), narrower
    flits or shallower buffers are not counted: a run they slow past its
    limit says to raise ``watchdog_cycles``, which the limit grows with."""
    seed = MeshConfig()
    factor = 1
    for window in (cfg.mesh_window_flits, cfg.send_window_flits):
        if window:
            factor = max(factor, math.ceil(seed.mesh_window_flits / window))
    ratio = (cfg.minion_mhz / cfg.mesh_mhz) / (seed.minion_mhz / seed.mesh_mhz)
    factor *= max(1, math.ceil(ratio - 1e-9))
    return factor * max(1, math.ceil(cfg.router_hop_mesh_cycles / seed.router_hop_mesh_cycles))


def stall_blocks(cfg):
    """The mesh routers as :class:`sim.stall.Block`: ports named by
    :class:`~hdl.etsoc.mesh.Port`, VCs ``req`` and ``rsp``."""
    ports = tuple(p.name.lower() for p in Port)
    return [stall.Block(f"router_{x}_{y}", ports, ports, ("req", "rsp"))
            for y in range(cfg.mesh_rows) for x in range(cfg.mesh_cols)]


def check_run(cfg, run, got):
    """Raise :class:`ExperimentError` unless the run ended cleanly with every
    register right and, read after the checksum (``got``'s ``settled``),
    every mesh stop is idle and every sender holds all its credits (a lost or
    doubled credit changes no timing while others remain, and a stop left
    busy shows only at the next run's fill, so they show only there)."""
    label = run["label"]
    _raise_sticky_faults(label, got)
    if got["ended"] != "done":
        c = got["counters"]
        # a READY register is {valid, source[9:0]}: only a valid one is held
        held = ", ".join(f"{k}={v:#x}" for k, v in c.items()
                         if k.endswith(".state")
                         or (k.endswith(("ready_from", "blocked_ready")) and v & READY_VALID))
        asleep = [k.rsplit(".", 1)[0] for k, v in c.items()
                  if k.endswith(".state") and v & STATE_SLEEPING]
        if asleep:
            held += "; asleep waiting for a credit: " + ", ".join(asleep)
        held = "; ".join([held, *stall.describe(c, stall_blocks(cfg))])
        raise ExperimentError(unfinished(label, got["ended"], c.get("cycles"),
                                         stuck="run ended {ended}",
                                         watchdog=cfg.watchdog_cycles) + held)
    counters = got["counters"]
    if wrong := miscounted_cycles(label, got):
        raise ExperimentError(wrong)
    for key, value in counters.items():
        if key.endswith(".errors") and value:
            first = value >> 16
            raise ExperimentError(
                f"{label}: {key} = {value & 0xFFFF} flits arrived outside a receive, the first "
                + (f"from {minion_name(first & 0x3FF)} to {key[:-7]} at minion cycle "
                   f"{counters.get(key[:-7] + '.first_stray_cycle', '?')}"
                   if first >> 10 else "not recorded"))
        if key in run["counts"] and value != run["counts"][key]:
            raise ExperimentError(f"{label}: {key} = {value}, expected {run['counts'][key]}")
    for key, value in counters.items():
        if key.endswith(".state") and value >> 8:
            raise ExperimentError(f"{label}: {key[:-6]} ends with {value >> 8} credits not "
                                  "taken by a wake (a credit sent twice, or to the wrong minion)")
    for rx, tx in run.get("sum_pairs", ()):
        if counters[rx] != counters[tx]:
            raise ExperimentError(f"{label}: {rx} = {counters[rx]:#010x} but {tx} = "
                                  f"{counters[tx]:#010x}: flits lost, duplicated or corrupted "
                                  "in flight")
    for key, want in run["expect"].items():
        have = got["checksums"][key]
        if have != want:
            raise ExperimentError(f"{label}: {key} = {have:#010x}, expected {want:#010x}: "
                                  "register data lost, duplicated or corrupted")
    if busy := got.get("settled", {}).get("stops_busy"):
        stops = ", ".join(f"s{s}" for s in range(cfg.compute_shires) if busy >> s & 1)
        raise ExperimentError(f"{label}: the mesh stop of {stops} still has request flits in "
                              f"flight or owes an ACK after the checksum (nor "
                              f"{settle_cycles(cfg)} minion cycles later): a flit or ACK lost, "
                              "or miscounted")
    if away := credits_away(cfg, got.get("settled", {})):
        raise ExperimentError(f"{label}: credits not home after the checksum (nor "
                              f"{settle_cycles(cfg)} minion cycles later) at "
                              f"{', '.join(away)} (a credit lost or returned twice on that "
                              "link)")


def _raise_sticky_faults(label, got):
    # checked before how the run ended: the hang that may follow is their consequence
    c = got["counters"]
    if c["overflow"]:
        raise ExperimentError(sticky_fault(
            label, got["ended"], c.get("cycles"),
            "a buffer overflowed, or a mesh stop's window or ACK count broke (credit "
            "protocol broken)"))
    if c.get("misrouted"):
        raise ExperimentError(sticky_fault(label, got["ended"], c.get("cycles"),
                                           misrouted_report(c)))
    if broken := [k[:-len(".state")] for k, v in c.items()
                  if k.endswith(".state") and v & STATE_WINDOW_BROKEN]:
        raise ExperimentError(sticky_fault(
            label, got["ended"], c.get("cycles"),
            f"{', '.join(broken)} had more message flits in flight than send_window_flits "
            "allows (the send window did not hold)"))


def misrouted_report(counters):
    """What the routers' route checks saw (``router_<x>_<y>.misrouted`` of
    ``counters``, :attr:`~hdl.etsoc.mesh.MeshRouter.o_misrouted`): ``"a
    flit left router_1_2.east, ... where dimension-order routing would not
    send it (misrouted)"``."""
    where = [f"{k[:-len('.misrouted')]}.{p.name.lower()}" for k, v in counters.items()
             if k.endswith(".misrouted") for p in Port if v >> p & 1]
    return (f"a flit left {', '.join(where) or 'a router'} where dimension-order routing "
            "would not send it (misrouted)")


def credits_away(cfg, settled):
    """The senders whose ``credits_away`` bits are set in ``settled``: router
    outputs by port and VC (:func:`sim.stall.credits_away`), then each
    shire's stages (:class:`~hdl.etsoc.shire.Shire` and
    :class:`~hdl.etsoc.mesh.ShirePort` ``o_credits_away``)."""
    away = stall.credits_away(settled, stall_blocks(cfg))
    stages = (["minion links", *(f"nb{n}" for n in range(cfg.neighbourhoods)), "crossbar",
               "barrier unit"])
    port = ["port.up.req", "port.up.rsp", "port.down.req", "port.down.rsp"]
    for s in range(cfg.compute_shires):
        for counter, names in (("credits_away", stages), ("port_credits_away", port)):
            bits = settled.get(f"s{s}.{counter}", 0)
            away += [f"s{s}.{n}" for b, n in enumerate(names) if bits >> b & 1]
    return away


def _spacing(program, got, side="a"):
    """Spacing of one minion's receives (a ping-pong's round trip at ``a``, a
    stream's time per message at ``b``), minion cycles."""
    c = got["counters"]
    name = minion_name(program[side])
    return (c[f"{name}.last_rx"] - c[f"{name}.first_rx"]) / (program["exchanges"] - 1)


def _measured(runs, results, side="a"):
    """``(program dict, spacing)`` of every program of every run."""
    return [(p, _spacing(p, got, side)) for run, got in zip(runs, results)
            for p in run["programs"]]


def _need_hop_counts(cfg, counts, where, least=2):
    """Refuse a build whose shire pairs give fewer than ``least`` distinct mesh
    hop counts ``counts`` (``where`` says which pairs), since a fit of cycles
    per hop needs them.

    Raises
    ------
    ValueError
        Naming ``compute_shires`` and the hop counts there are.
    """
    found = sorted(set(counts))
    if len(found) < least:
        raise ValueError(f"compute_shires ({cfg.compute_shires}) and placement must give at "
                         f"least {least} different mesh hop counts {where} for a fit per "
                         f"hop, not {found or 'none'}")


def _affine(xs, ys):
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    residuals = np.asarray(ys, float) - (intercept + slope * np.asarray(xs, float))
    return float(intercept), float(slope), residuals


def _costs_nothing_row(quantity, difference, key, than):
    """A row for a seed claim that something costs no time (no number given):
    ``difference`` (cycles) must lie within a cycle of 0; ``key`` is the
    claim's entry in ``mesh.toml`` (its source), ``than`` what the difference
    is taken against."""
    return {"quantity": quantity, "model": difference, "reference": None, "unit": "cycles",
            "minimum": -1.0, "maximum": 1.0, "target": f"within a cycle of {than}",
            "source": _reference_entry(key)["source"]}


def _reference_entry(key):
    """The entry of ``mesh.toml`` at the dotted ``key`` (``"allreduce.minions_32"``)."""
    entry = reference()
    for part in key.split("."):
        entry = entry[part]
    return entry


def _ref_row(quantity, model, key, **extra):
    entry = _reference_entry(key)
    row = {"quantity": quantity, "model": None if model is None else float(model),
           "reference": entry["value"], "unit": entry["unit"], "source": entry["source"],
           "error_pct": None}
    if "range" in entry:
        # the seed gives a range; "reference" is its midpoint
        row["reference_range"] = [float(v) for v in entry["range"]]
    if "tolerance_pct" in entry:
        row["tolerance_pct"] = entry["tolerance_pct"]
        row["target"] = f"within {entry['tolerance_pct']:g} %"
    if "tolerance_cycles" in entry:
        tol = entry["tolerance_cycles"]
        row["minimum"], row["maximum"] = entry["value"] - tol, entry["value"] + tol
        row["target"] = f"within {tol:g} cycle of {entry['value']:g}"
    for bound in ("minimum", "maximum"):
        if bound in entry:
            row[bound] = entry[bound]
    if "target" not in row and "minimum" in row and "maximum" in row:
        row["target"] = f"{row['minimum']:g} to {row['maximum']:g}"
    row.update(extra)
    row["error_pct"] = row_error_pct(row["model"], row["reference"], minimum=row.get("minimum"),
                                     maximum=row.get("maximum"),
                                     tolerance_pct=row.get("tolerance_pct"))
    return row


def _seed_mark(what, key, first, last=None):
    """A chart's mark (see :class:`sim.report.ExperimentResult`, ``chart``) of
    the seed's value at ``mesh.toml``'s ``key``, over x from ``first`` to
    ``last`` (one x if ``last`` is None): the range the seed gives, or its
    value with the row's target, a tolerance in % or in cycles.

    Raises
    ------
    ValueError
        If the entry has neither a range nor a tolerance (nothing to draw
        a target from).
    """
    entry = _reference_entry(key)
    unit = entry["unit"]
    mark = {"x": [first, first if last is None else last]}
    if "range" in entry:
        low, high = (float(v) for v in entry["range"])
        between = " to " if low < 0 else "–"
        mark["name"] = f"seed, {what}: {low:g}{between}{high:g} {unit}"
    else:
        value = float(entry["value"])
        if "tolerance_pct" in entry:
            spread = value * entry["tolerance_pct"] / 100
            target = f"within {entry['tolerance_pct']:g} %"
        elif "tolerance_cycles" in entry:
            spread = float(entry["tolerance_cycles"])
            target = f"within {spread:g} cycle{'s' * (spread != 1)}"
        else:
            raise ValueError(f"mesh.toml [{key}] has no range or tolerance to mark")
        low, high = value - spread, value + spread
        mark["value"] = value
        mark["name"] = f"seed, {what}: {value:g} {unit} (target {target})"
    mark["low"], mark["high"] = low, high
    return mark


# --- round trip against hops -----------------------------------------------------

def xy_links(cfg, a, b):
    """Directed mesh links (cell, next cell) of the X-then-Y route from shire
    ``a``'s cell to shire ``b``'s, plus the two local ports."""
    (x, y), (tx, ty) = cfg.placement[a], cfg.placement[b]
    links = [("in", a), ("out", b)]
    while (x, y) != (tx, ty):
        nxt = (x + (tx > x) - (tx < x), y) if x != tx else (x, y + (ty > y) - (ty < y))
        links.append(((x, y), nxt))
        x, y = nxt
    return links


def route_cells(cfg, a, b):
    """Cells the X-then-Y route from shire ``a`` to shire ``b`` enters (its
    destination's included, its source's not)."""
    return {link[1] for link in xy_links(cfg, a, b) if isinstance(link[0], tuple)}


def sample_pairs(cfg, per_hop=2):
    """Up to ``per_hop`` shire pairs at each hop count (a quick stand-in for all
    496 pairs), preferring pairs of shires not yet used so they pack into few runs."""
    seen, used = {}, set()
    for fresh in (True, False):
        for a, b in itertools.combinations(range(cfg.compute_shires), 2):
            h = hops(cfg.placement[a], cfg.placement[b])
            if len(seen.setdefault(h, [])) < per_hop and (a, b) not in seen[h] \
                    and not (fresh and {a, b} & used):
                seen[h].append((a, b))
                used |= {a, b}
    return [p for h in sorted(seen) for p in seen[h]]


def pack_pairs(cfg, pairs, both_ways=True):
    """Shire pairs ``(a, b)`` packed first-fit into rounds whose pairs share no
    shire and no directed mesh link (of the route ``a`` to ``b``, and with
    ``both_ways`` of ``b`` to ``a`` too), so no two pairs' traffic meets.
    Returns ``[{"pairs": [(a, b), ...], "links": set, "shires": set}]``."""
    rounds = []
    for a, b in pairs:
        need = set(xy_links(cfg, a, b)) | (set(xy_links(cfg, b, a)) if both_ways else set())
        for r in rounds:
            if not (need & r["links"]) and not ({a, b} & r["shires"]):
                break
        else:
            r = {"links": set(), "shires": set(), "pairs": []}
            rounds.append(r)
        r["links"] |= need
        r["shires"] |= {a, b}
        r["pairs"].append((a, b))
    return rounds


def pairs_runs(cfg, nregs=1, pairs=None, credits=False):
    """Ping-pong runs between minion 0 of shire pairs (all 496 unless ``pairs``
    lists some), packed first-fit into runs whose pairs share no shire and no
    directed mesh link in either direction, so no two exchanges ever meet;
    messages of ``nregs`` registers.  With ``credits`` each run is followed by
    the same pairs passing credits (:class:`CreditPingPong`) instead, each
    program's meta saying which (``"signal"``: ``"tensor_send"`` or
    ``"credit"``).  Yields ``(label, programs, metas)``.

    Raises
    ------
    ValueError
        If the pairs span fewer than two mesh hop counts (no fit per hop).
    """
    pairs = list(itertools.combinations(range(cfg.compute_shires), 2) if pairs is None
                 else pairs)
    _need_hop_counts(cfg, (hops(cfg.placement[a], cfg.placement[b]) for a, b in pairs),
                     "between the measured pairs of shires")
    for i, r in enumerate(pack_pairs(cfg, pairs)):
        for program, signal in ((PingPong, "tensor_send"), (CreditPingPong, "credit"))[
                :1 + bool(credits)]:
            yield (f"round {i}{' (credits)' if signal == 'credit' else ''}: "
                   + " ".join(f"{a}-{b}" for a, b in r["pairs"]),
                   [program(cfg.minion_id(a, 0), cfg.minion_id(b, 0), nregs=nregs)
                    for a, b in r["pairs"]],
                   [{"hops": hops(cfg.placement[a], cfg.placement[b]), "shires": [a, b],
                     "signal": signal} for a, b in r["pairs"]])


NON_COMPUTE_SOURCE = ("002_ef78cf597185d0e6.txt, note 1: 'Pure Manhattan distance means the "
                      "routes are shortest paths through all 36 cells, the four non-compute "
                      "ones included' and round trips 'fit a+b×(Manhattan distance) within "
                      "1.5 cycles'")


def _hop_points(runs, measured):
    return [(p["hops"], rt) for p, rt in _measured(runs, measured)]


def _pairs_rows(cfg, runs, measured):
    points = _hop_points(runs, measured)
    rts = {tuple(p["shires"]): rt for p, rt in _measured(runs, measured)}
    a, b, res = _affine(*zip(*points))
    series = [{"name": "TensorSend round trip, minion 0 of every pair of shires",
               "x": "hops", "points": [{"hops": h, "cycles": c} for h, c in points],
               "fit": {"alpha_cycles": a, "beta_cycles_per_hop": b,
                       "max_residual_cycles": float(np.max(np.abs(res)))}}]
    rows = [
        _ref_row(f"round trip per mesh hop (fit over {len(points)} pairs)", b,
                 "round_trip.per_hop"),
        {"quantity": "worst residual of the fit", "model": float(np.max(np.abs(res))),
         "reference": None, "unit": "cycles", "maximum": 2.0, "target": "under 2 cycles",
         "source": reference()["round_trip"]["max_residual"]["source"]},
        _ref_row("round trip at 0 hops (fit intercept)", a, "three_speeds.mesh_base"),
    ]
    # Routes through the cells without a compute shire: their routers carry
    # traffic like any other, so those round trips sit on the same line.
    idle_cells = set(cfg.non_compute_cells)
    crossing = [rt - (a + b * hops(cfg.placement[s], cfg.placement[t]))
                for (s, t), rt in rts.items()
                if (route_cells(cfg, s, t) | route_cells(cfg, t, s)) & idle_cells]
    if crossing:
        rows.append({
            "quantity": f"round trips routed through a non-compute cell ({len(crossing)} of "
                        f"{len(rts)} pairs): worst distance from the fit",
            "model": float(np.max(np.abs(crossing))), "reference": None, "unit": "cycles",
            "maximum": 1.5, "target": "within 1.5 cycles, as every route",
            "source": NON_COMPUTE_SOURCE})
    rows += _map_rows(cfg, rts, a, b)
    source = 0
    heat = [{"shire": s, "x": cfg.placement[s][0], "y": cfg.placement[s][1],
             "cycles": rts[(source, s)]} for s in range(cfg.compute_shires) if s != source]
    extra = {"heatmap": {"from_shire": source, "source_cell": list(cfg.placement[source]),
                         "cols": cfg.mesh_cols, "rows": cfg.mesh_rows,
                         "non_compute": [list(c) for c in cfg.non_compute_cells],
                         "cells": heat}}
    return series, rows, extra


#: Rows of the seed's statements about the shire map, each boundary's hops
#: read off its round trip: (stat of sim.etsoc_placement.hop_stats,
#: quantity, mesh.toml key).
_MAP_ROWS = (
    ("sequential_mean", "shires 0, 1, ..., 31 in ID order: mean hops per boundary",
     "placement.sequential_mean"),
    ("sequential_max", "shires 0, 1, ..., 31 in ID order: most hops at a boundary",
     "placement.sequential_max"),
    ("closed_mean", "shires 0, 1, ..., 31 and back to 0: mean hops per boundary",
     "placement.closed_mean"),
    ("closed_max", "shires 0, 1, ..., 31 and back to 0: most hops at a boundary",
     "placement.closed_max"),
    ("ring_max_step", "the seed's ring through all 32 shires: most hops at a step",
     "placement.ring_step"),
    ("ring_min_step", "the seed's ring through all 32 shires: fewest hops at a step",
     "placement.ring_step"),
)


def _map_rows(cfg, rts, a, b):
    """The shire map rows (:data:`_MAP_ROWS`): each boundary's hops are its
    round trip less the fit's intercept ``a``, over its cycles per hop ``b``.
    The fit is against the placement's own hop counts, so these are the
    placement's hops as the routers deliver them: each differs from the
    placement's by its pair's residual over ``b`` (under 2 cycles: 0.17
    hop).  No rows unless the build has 32 compute shires and every pair the
    statements name was measured (``rts``: ``{(shire, shire): cycles}``,
    either order)."""
    def measured(s, t):
        return ((rts[(s, t)] if (s, t) in rts else rts[(t, s)]) - a) / b

    if cfg.compute_shires != N_SHIRES:
        return []
    try:
        stats = hop_stats(measured)
    except KeyError:
        return []
    out = []
    for stat, quantity, key in _MAP_ROWS:
        row = _ref_row(f"{quantity}, from round trips", stats[stat], key)
        row["target"] = (f"{row['reference']:g} to one decimal" if stat.endswith("_mean")
                         else f"{row['reference']:g} to the nearest hop")
        out.append(row)
    return out


# --- credit round trips against hops ----------------------------------------------

def _credit_runs(cfg):
    return pairs_runs(cfg, credits=True)


def _credit_rows(cfg, runs, measured):
    ns = 1e3 / cfg.minion_mhz
    by = {"tensor_send": {}, "credit": {}}
    for p, rt in _measured(runs, measured):
        by[p["signal"]][tuple(p["shires"])] = (p["hops"], rt)
    points = sorted(by["credit"].values())
    a, b, res = _affine(*zip(*points))
    worst = float(np.max(np.abs(res)))
    diffs = [by["credit"][k][1] - by["tensor_send"][k][1] for k in by["credit"]]
    median = float(np.median(diffs))
    within = sum(abs(d) <= 15 for d in diffs)
    series = [{"name": f"{label} round trip, minion 0 of every pair of shires", "x": "hops",
               "points": [{"hops": h, "cycles": c} for h, c in sorted(by[signal].values())]}
              for signal, label in (("credit", "credit"), ("tensor_send", "TensorSend"))]
    series[0]["fit"] = {"alpha_cycles": a, "beta_cycles_per_hop": b,
                        "max_residual_cycles": worst}
    series[0]["seed_lines"] = [
        {"label": f"{fit['base_ns']:g} + {fit['per_hop_ns']:g} ns/hop ({name.replace('_', ' ')})",
         "alpha_cycles": fit["base_ns"] / ns, "beta_cycles_per_hop": fit["per_hop_ns"] / ns}
        for name, fit in _reference_entry("credit.fits").items()]
    rows = [
        _ref_row("credit round trip per mesh hop (fit)", b * ns, "credit.per_hop_ns"),
        _ref_row("credit round trip at 0 hops (fit intercept)", a * ns, "credit.base_ns"),
        _ref_row("worst residual of the credit fit", worst, "credit.max_residual",
                 target="at most 15 cycles (the chip's worst)"),
        _ref_row("credit against TensorSend round trip, median pair's difference", median,
                 "credit.median_difference", target="under a cycle either way"),
        _ref_row(f"credit against TensorSend round trip, pairs within 15 cycles (of the "
                 f"{len(diffs)} measured)", within, "credit.pairs_within_15_cycles"),
    ]
    chart = {"title": "Credit and TensorSend round trips between shires", "x_label": "mesh hops",
             "y_label": "round trip (minion cycles)", "x_log2": False,
             "lines": [{"name": s["name"].split(",")[0],
                        "points": [[q["hops"], q["cycles"]] for q in s["points"]]}
                       for s in series]}
    return series, rows, {"chart": chart}


# --- the shire barrier ---------------------------------------------------------------

BARRIERS_PER_RUN = 8


def _barrier_runs(cfg):
    """Runs of the barrier experiment: barriers over minions 0 to n - 1 of
    shire 0, n = 2, 4, ... up to the shire's minions.

    Raises
    ------
    ValueError
        If a shire has fewer than two minions.
    """
    if cfg.minions_per_shire < 2:
        raise ValueError(f"minions_per_neighbourhood must make neighbourhoods x "
                         f"minions_per_neighbourhood at least 2 for a barrier inside a shire, "
                         f"not {cfg.minions_per_neighbourhood} (neighbourhoods "
                         f"{cfg.neighbourhoods})")
    n = 2
    while n <= cfg.minions_per_shire:
        yield (f"{BARRIERS_PER_RUN} barriers in a row over minions 0-{n - 1} of shire 0",
               Barrier(tuple(cfg.minion_id(0, k) for k in range(n)), BARRIERS_PER_RUN),
               {"minions": n})
        n *= 2


def _barrier_rows(cfg, runs, measured):
    points = []
    for run, got in zip(runs, measured):
        p = run["programs"][0]
        c = got["counters"]
        names = sorted({k.rsplit(".", 1)[0] for k in run["read"]})
        # barrier to barrier, at the member that leaves each one last
        first = max(c[f"{n}.first_rx"] for n in names)
        last = max(c[f"{n}.last_rx"] for n in names)
        points.append({"minions": p["minions"],
                       "cycles": (last - first) / (p["exchanges"] - 1)})
    at = {q["minions"]: q["cycles"] for q in points}
    if 32 in at:
        rows = [_ref_row("FLB plus credit barrier over 32 minions (one shire)", at[32],
                         "barrier.minions_32")]
    else:
        # a what-if shire of fewer minions still reports its largest barrier,
        # under one name whatever its size, so a sweep's points line up
        most = max(at)
        rows = [{"quantity": "FLB plus credit barrier over every minion of this build's shire",
                 "model": float(at[most]), "reference": None, "unit": "cycles",
                 "target": "information",
                 "source": f"not in the seed: the seed's barrier spans 32 minions, this "
                           f"build's shire has {most}"}]
    chart = {"title": "FLB plus credit barrier inside a shire", "x_label": "minions",
             "y_label": "cycles per barrier", "x_log2": True,
             "lines": [{"name": "one shire", "points": [[q["minions"], q["cycles"]]
                                                        for q in points]}],
             "seed": [_seed_mark("32 minions", "barrier.minions_32", 32)] if 32 in at else []}
    return [], rows, {"barrier_points": points, "chart": chart}


# --- 1 KB round trips: a window on flits in flight ----------------------------------

ONE_KB_REGISTERS = 32
ONE_KB_KNEE_HOPS = 5


def _one_kb_runs(cfg):
    """Ping-pong runs of 1 KB messages between minion 0 of every pair of shires.

    Raises
    ------
    ValueError
        If the pairs span fewer than two hop counts up to the knee (5 hops) or
        from it on (each side of the knee has its own fit).
    """
    distances = [hops(cfg.placement[a], cfg.placement[b])
                 for a, b in itertools.combinations(range(cfg.compute_shires), 2)]
    _need_hop_counts(cfg, (h for h in distances if h <= ONE_KB_KNEE_HOPS),
                     f"up to {ONE_KB_KNEE_HOPS} hops")
    _need_hop_counts(cfg, (h for h in distances if h >= ONE_KB_KNEE_HOPS),
                     f"from {ONE_KB_KNEE_HOPS} hops on")
    return pairs_runs(cfg, ONE_KB_REGISTERS)


def _one_kb_rows(cfg, runs, measured):
    points = sorted(_hop_points(runs, measured))
    series, rows = [], []
    for name, keep, key in (
            (f"1 KB round trip, 1 to {ONE_KB_KNEE_HOPS} hops",
             lambda h: 1 <= h <= ONE_KB_KNEE_HOPS, "one_kb.per_hop_near"),
            (f"1 KB round trip, {ONE_KB_KNEE_HOPS} hops and beyond",
             lambda h: h >= ONE_KB_KNEE_HOPS, "one_kb.per_hop_far")):
        seg = [(h, c) for h, c in points if keep(h)]
        a, b, res = _affine(*zip(*seg))
        series.append({"name": name, "x": "hops",
                       "points": [{"hops": h, "cycles": c} for h, c in seg],
                       "fit": {"alpha_cycles": a, "beta_cycles_per_hop": b,
                               "max_residual_cycles": float(np.max(np.abs(res)))}})
        rows.append(_ref_row(f"{name}: cycles per hop (fit)", b, key))
    return series, rows, {}


# --- three speeds ---------------------------------------------------------------

def _need_two_neighbourhoods(cfg):
    """Minions 0 and 1 share a tree edge and minion ``mpn`` sits in another
    neighbourhood only with at least 2 minions in each of 2 neighbourhoods."""
    for name in ("minions_per_neighbourhood", "neighbourhoods"):
        if getattr(cfg, name) < 2:
            raise ValueError(f"{name} must be at least 2 for the tree-edge and crossbar "
                             f"paths, not {getattr(cfg, name)}")


#: The combining receives three_speeds times against a copy on the tree edge
#: (seed 002, "What the numbers say", item 4: "Combining in the channel is
#: free").
COMBINING_OPS = ("add", "max", "min")


def _speeds_runs(cfg):
    _need_two_neighbourhoods(cfg)
    _need_hop_counts(cfg, (hops(cfg.placement[0], cfg.placement[s])
                           for s in range(1, cfg.compute_shires)), "from shire 0")
    mpn = cfg.minions_per_neighbourhood
    yield "tree edge: minion 0 - minion 1", PingPong(cfg.minion_id(0, 0),
                                                     cfg.minion_id(0, 1)), {"path": "tree_edge"}
    # the same exchange with each receive combining into the registers it holds
    for op in COMBINING_OPS:
        yield (f"tree edge, receives that {op}: minion 0 - minion 1",
               PingPong(cfg.minion_id(0, 0), cfg.minion_id(0, 1), op=COMBINE_OPS.index(op)),
               {"path": f"tree_edge_{op}"})
    yield (f"crossbar: minion 0 - minion {mpn}", PingPong(cfg.minion_id(0, 0),
                                                          cfg.minion_id(0, mpn)),
           {"path": "crossbar"})
    seen = set()
    for s in range(1, cfg.compute_shires):
        h = hops(cfg.placement[0], cfg.placement[s])
        if h not in seen:
            seen.add(h)
            yield (f"mesh: shire 0 - shire {s} ({h} hop{'s' * (h != 1)})",
                   PingPong(cfg.minion_id(0, 0), cfg.minion_id(s, 0)), {"path": "mesh", "hops": h})


def _speeds_rows(cfg, runs, measured):
    by_path = {}
    points = []
    for p, rt in _measured(runs, measured):
        if p["path"] == "mesh":
            points.append((p["hops"], rt))
        else:
            by_path[p["path"]] = rt
    points.sort()
    a, b, res = _affine(*zip(*points))
    base = _reference_entry("three_speeds.mesh_base")["value"]
    per_hop = _reference_entry("three_speeds.mesh_per_hop")["value"]
    series = [{"name": "mesh round trip from shire 0", "x": "hops",
               "points": [{"hops": h, "cycles": c} for h, c in points],
               "fit": {"alpha_cycles": a, "beta_cycles_per_hop": b,
                       "max_residual_cycles": float(np.max(np.abs(res)))},
               "seed_lines": [{"label": f"{base:g} + {per_hop:g} x hops cycles",
                               "alpha_cycles": base, "beta_cycles_per_hop": per_hop}]}]
    rows = [
        _ref_row("tree edge round trip", by_path["tree_edge"], "three_speeds.tree_edge"),
        _ref_row("crossbar round trip", by_path["crossbar"], "three_speeds.crossbar"),
        _ref_row("mesh round trip at 0 hops (fit intercept)", a, "three_speeds.mesh_base"),
        _ref_row("mesh round trip per hop", b, "three_speeds.mesh_per_hop"),
    ]
    rows += [_costs_nothing_row(f"tree edge round trip with receives that {op}, less with "
                                f"copies", by_path[f"tree_edge_{op}"] - by_path["tree_edge"],
                                "three_speeds.combine", "a copy's")
             for op in COMBINING_OPS]
    return series, rows, {}


# --- message size ---------------------------------------------------------------

MESSAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 127)


def _size_paths(cfg):
    """(path, sender, receiver, hops) of the four paths the seed's stream
    measures, placed so all four can stream at once without meeting.

    The seed does not say which shires its two mesh paths join; their fixed
    costs (135 and 224 cycles, about the round trip minus 28 as on the two
    in-shire paths) put them at about 1 and 8 to 9 hops.  The far path joins
    shire 0 to the lowest-numbered shire 8 hops away; the near path joins the
    first pair of shires 1 hop apart whose X-then-Y routes, both ways, share
    no directed mesh link and no shire with the far path's; the tree-edge
    (minion 0 to 1) and crossbar (minion 0 to minion ``mpn``, the next
    neighbourhood) paths run inside the two lowest-numbered shires that
    neither mesh route touches.

    Raises
    ------
    ValueError
        If the build has fewer than two neighbourhoods of two minions, or its
        placement has no such shires.
    """
    mpn = cfg.minions_per_neighbourhood

    _need_two_neighbourhoods(cfg)
    far = next((s for s in range(1, cfg.compute_shires)
                if hops(cfg.placement[0], cfg.placement[s]) == 8), None)
    if far is None:
        most = max(hops(cfg.placement[0], cfg.placement[s]) for s in range(cfg.compute_shires))
        raise ValueError(f"compute_shires ({cfg.compute_shires}) and placement must put a "
                         f"shire 8 hops from shire 0 for the message-size paths, not at most "
                         f"{most}")

    def touched(a, b):
        cells = route_cells(cfg, a, b) | route_cells(cfg, b, a)
        return {a, b} | {s for s in range(cfg.compute_shires) if cfg.placement[s] in cells}

    def links(a, b):
        return set(xy_links(cfg, a, b)) | set(xy_links(cfg, b, a))

    far_shires, far_links = touched(0, far), links(0, far)
    near = next(((a, b) for a, b in itertools.combinations(range(cfg.compute_shires), 2)
                 if hops(cfg.placement[a], cfg.placement[b]) == 1
                 and not touched(a, b) & far_shires and not links(a, b) & far_links), None)
    if near is None:
        raise ValueError("placement must have two shires 1 hop apart off the 8-hop route "
                         "from shire 0 for the message-size paths")
    busy = far_shires | touched(*near)
    free = [s for s in range(cfg.compute_shires) if s not in busy][:2]
    if len(free) < 2:
        raise ValueError("compute_shires must leave two shires off the mesh routes for the "
                         "message-size paths")
    edge, xbar = free
    return (("tree_edge", cfg.minion_id(edge, 0), cfg.minion_id(edge, 1), 0),
            ("crossbar", cfg.minion_id(xbar, 0), cfg.minion_id(xbar, mpn), 0),
            ("mesh_near", cfg.minion_id(near[0], 0), cfg.minion_id(near[1], 0), 1),
            ("mesh_far", cfg.minion_id(0, 0), cfg.minion_id(far, 0), 8))


def _size_runs(cfg):
    """One run per message size, the four paths of :func:`_size_paths`
    streaming together (they share no minion, shire, router or link)."""
    paths = _size_paths(cfg)
    for n in MESSAGE_SIZES:
        yield (f"{n} registers on " + ", ".join(p for p, *_ in paths),
               [OneWay(a, b, nregs=n, exchanges=6) for _, a, b, _ in paths],
               [{"path": p, "nregs": n, "hops": h} for p, _, _, h in paths])


def _size_rows(cfg, runs, measured):
    from sim.fit import fit_affine
    series, rows = [], []
    for path, _, _, h in _size_paths(cfg):
        pts = [(p["nregs"], t) for p, t in _measured(runs, measured, "b") if p["path"] == path]
        fit = fit_affine([n * cfg.register_bytes for n, _ in pts], [c for _, c in pts])
        per_reg = fit.beta_cycles_per_byte * cfg.register_bytes
        where = f" ({h} hop{'s' * (h != 1)})" if h else ""
        fixed = _reference_entry(f"message_size.{path}.fixed")["value"]
        seed_per_reg = _reference_entry(f"message_size.{path}.per_register")["value"]
        series.append({"name": f"{path}{where}",
                       "points": [{"payload_bytes": n * cfg.register_bytes, "cycles": c}
                                  for n, c in pts], "fit": fit.to_json(),
                       "seed_lines": [{"label": f"{fixed:g} + {seed_per_reg:g} cycles/register "
                                                f"({cfg.register_bytes / seed_per_reg:.3g} "
                                                "B/cycle)",
                                       "alpha_cycles": fixed, "beta_cycles_per_byte":
                                       seed_per_reg / cfg.register_bytes}]})
        rows += [_ref_row(f"{path}{where}: fixed cost per message", fit.alpha_cycles,
                          f"message_size.{path}.fixed"),
                 _ref_row(f"{path}{where}: cost per register", per_reg,
                          f"message_size.{path}.per_register")]
    return series, rows, {}


# --- layouts: who may hold a READY ------------------------------------------------

TRAP = ("002_ef78cf597185d0e6.txt, 'A trap: one ready flag per minion' and 'What it means "
        "for systolic and wavefront designs': 'Over TensorSend a minion may have only one "
        "partner's ready outstanding'")


def _layout_runs(cfg):
    """Four minions of shire 0 as a 2x2 array: m0 m1 / m2 m3, where m0-m1 and
    m2-m3 are tree edges and the columns cross the shire crossbar (minions 0,
    1 and the first two of the next neighbourhood)."""
    _need_two_neighbourhoods(cfg)
    mpn = cfg.minions_per_neighbourhood
    m = [cfg.minion_id(0, k) for k in (0, 1, mpn, mpn + 1)]
    ring = (m[0], m[1], m[3], m[2])
    yield ("1D token ring m0 > m1 > m3 > m2 > m0",
           Cells(tuple(Cell(ring[i], tx=(ring[(i + 1) % 4],), rx=(ring[i - 1],),
                            couple=Couple.PING if i == 0 else Couple.PONG) for i in range(4)),
                 order=tuple((ring[i], ring[(i + 1) % 4]) for i in range(4))),
           {"layout": "ring"})
    yield ("2D in alternating phases: west pass", [OneWay(m[0], m[1]), OneWay(m[2], m[3])],
           [{"layout": "phases"}] * 2)
    yield ("2D in alternating phases: north pass", [OneWay(m[0], m[2]), OneWay(m[1], m[3])],
           [{"layout": "phases"}] * 2)
    yield (f"hardware tree: allreduce over the four (levels 0 and {mpn.bit_length() - 1})",
           Tree(1 | mpn), {"layout": "tree"})
    # Each cell sends south and east and receives from north and west at once:
    # m0 takes readies from two partners.  It must stay the last run: a hang
    # ends the plan.
    yield ("naive 2D: m0 sends south and east, m3 receives north and west",
           Cells((Cell(m[0], tx=(m[2], m[1])),
                  Cell(m[1], tx=(m[3],), rx=(m[0],), couple=Couple.PONG),
                  Cell(m[2], tx=(m[3],), rx=(m[0],), couple=Couple.PONG),
                  Cell(m[3], rx=(m[1], m[2])))),
           {"layout": "naive", "expect_stuck": True})


def _layout_rows(cfg, runs, measured):
    rows = []
    done = {}
    for run, got in zip(runs, measured):
        layout = run["programs"][0]["layout"]
        done.setdefault(layout, []).append(got["ended"] == "done")
    for layout, what in (("ring", "1D token ring completes"),
                         ("phases", "2D in alternating phases (two runs) completes"),
                         ("tree", "hardware reduce and broadcast tree completes")):
        rows.append({"quantity": what, "model": float(all(done.get(layout, [False]))),
                     "reference": None, "unit": "1 = yes", "minimum": 1.0,
                     "target": "completes", "source": TRAP})
    naive = next(((r, g) for r, g in zip(runs, measured)
                  if r["programs"][0]["layout"] == "naive"), None)
    holder = None
    if naive is not None and naive[1]["ended"] == "stuck":
        c = naive[1]["counters"]
        for name in sorted({k.rsplit(".", 1)[0] for k in c if k.endswith(".ready_from")}):
            held, waiting = c[f"{name}.ready_from"], c[f"{name}.blocked_ready"]
            if held & READY_VALID and waiting & READY_VALID:
                holder = (f"{name} holds {minion_name(held & 0x3FF)}'s READY while "
                          f"{minion_name(waiting & 0x3FF)}'s waits behind it")
    rows.append({"quantity": "naive 2D hangs, the watchdog naming the minion with two "
                             "partners' READYs" + (f" ({holder})" if holder else ""),
                 "model": float(holder is not None), "reference": None, "unit": "1 = yes",
                 "minimum": 1.0, "target": "hangs", "source": TRAP})
    return [], rows, {}


# --- reduction trees ---------------------------------------------------------------

#: One whole shire on a 1x1 mesh: the in-shire tree levels and rings need all
#: 32 minions of a shire, which the 32-shire build cannot hold at full size.
ONE_SHIRE = (("compute_shires", 1), ("mesh_cols", 1), ("mesh_rows", 1),
             ("placement", ((0, 0),)), ("neighbourhoods", 4), ("minions_per_neighbourhood", 8))
REDUCED = (("neighbourhoods", 2), ("minions_per_neighbourhood", 2))
#: Minion 0 alone in each shire, for the experiments that run only minion 0 of
#: each shire: its path to the mesh (neighbourhood switch, crossbar, mesh
#: port) has the same stages as in a bigger shire, and the build simulates
#: about twice as fast as :data:`REDUCED` (a quarter of the minion engines).
MINION_ZERO = (("neighbourhoods", 1), ("minions_per_neighbourhood", 1))
TREE_SOURCE = ("002_ef78cf597185d0e6.txt, 'Reduction trees': 'Each level adds about one round "
               "trip between the minions it pairs'")


def tree_levels(cfg):
    """``[(level, path)]``, the hardware tree levels (0 to 9) the build of
    ``cfg`` has and the path each crosses (``"tree_edge"``, ``"crossbar"`` or
    ``"mesh"``): minion-index bits (tree edges inside a neighbourhood, then
    the crossbar), then shire-index bits (the mesh)."""
    out = [(b, "tree_edge") for b in range(5) if 1 << b < cfg.minions_per_neighbourhood]
    out += [(b, "crossbar") for b in range(5)
            if cfg.minions_per_neighbourhood <= 1 << b < cfg.minions_per_shire]
    out += [(5 + b, "mesh") for b in range(5) if 1 << b < cfg.compute_shires
            and 2 << b <= cfg.compute_shires]
    return out


def _tree_sweep(levels, what):
    mask = 0
    for i, (level, path) in enumerate(levels):
        mask |= 1 << level
        n = 1 << (i + 1)
        yield (f"allreduce over {n} {what} (levels {', '.join(str(b) for b, _ in levels[:i + 1])})",
               Tree(mask), {"minions": n, "level": level, "path": path})


def _tree_shire_runs(cfg):
    levels = [lp for lp in tree_levels(cfg) if lp[1] != "mesh"]
    if not levels:
        raise ValueError("neighbourhoods x minions_per_neighbourhood must be at least 2 for a "
                         "tree inside a shire")
    yield from _tree_sweep(levels, "minions of shire 0")


def _tree_chip_runs(cfg):
    levels = [lp for lp in tree_levels(cfg) if lp[1] == "mesh"]
    if not levels:
        raise ValueError("compute_shires must be at least 2 for a tree over the mesh")
    yield from _tree_sweep(levels, "shires' minion 0")


def _tree_all_runs(cfg):
    levels = tree_levels(cfg)
    if not levels:
        raise ValueError("compute_shires x neighbourhoods x minions_per_neighbourhood must be "
                         "at least 2 for a tree over every minion")
    n, built = 1 << len(levels), cfg.compute_shires * cfg.minions_per_shire
    # the tree levels pair power-of-two groups: with 24 shires, 512 of 768 minions
    what = f"all {n} minions" if n == built else f"{n} of the {built} minions built"
    yield (f"allreduce over {what}", Tree(sum(1 << b for b, _ in levels)),
           {"minions": n, "level": None, "path": "all"})
    # Seed 002, 'What the numbers say': "all 32 shires can reduce at once
    # without slowing down": every shire's tree at once, against the shire
    # part's tree over the same minions of one shire alone.
    inside = [b for b, path in levels if path != "mesh"]
    if inside and cfg.compute_shires > 1:
        mask, n = sum(1 << b for b in inside), 1 << len(inside)
        yield (f"allreduce over each shire's {n} minions, all {cfg.compute_shires} shires at "
               f"once", [Tree(mask, base=s << 5) for s in range(cfg.compute_shires)],
               [{"minions": n, "level": None, "path": "shires_at_once"}] * cfg.compute_shires)


def _tree_latencies(runs, results):
    return [(p, got["counters"]["cycles"]) for run, got in zip(runs, results)
            for p in run["programs"]]


_LEVEL_KEYS = {"tree_edge": "tree", "crossbar": "crossbar", "mesh": "mesh"}


def _tree_rows(parts):
    rows, points = [], []
    latencies = {part: _tree_latencies(*parts[part][1:]) for part in ("shire", "chip")}
    for part, measured in latencies.items():
        before = 0
        for p, cycles in measured:
            if p["level"] is None:
                continue
            points.append({"part": part, "minions": p["minions"], "level": p["level"],
                           "path": p["path"], "cycles": cycles})
            where = {"tree_edge": "tree edge", "crossbar": "shire crossbar",
                     "mesh": "mesh"}[p["path"]]
            rows.append(_ref_row(f"level {p['level']} ({where}): cycles it adds to the allreduce",
                                 cycles - before, f"allreduce.level_{_LEVEL_KEYS[p['path']]}"))
            before = cycles
    shire = {p["minions"]: c for p, c in latencies["shire"]}
    whole = _tree_latencies(*parts["all"][1:])
    every = {p["minions"]: c for p, c in whole if p["path"] == "all"}
    other = [(n, c) for n, c in every.items() if n != 1024]
    rows.append(_ref_row("allreduce over 32 minions (one shire)", shire.get(32),
                         "allreduce.minions_32"))
    rows.append(_ref_row("allreduce over 1,024 minions", every.get(1024), "allreduce.minions_1024"))
    # a build of other than 1,024 minions still reports its own tree over all of them
    rows += [{"quantity": f"allreduce over {n} minions (this build)", "model": float(c),
              "reference": None, "unit": "cycles", "target": "information",
              "source": "not in the seed: the seed's tree spans 1,024 minions"}
             for n, c in other]
    at_once = [(p, c) for p, c in whole if p["path"] == "shires_at_once"]
    alone = shire.get(at_once[0][0]["minions"]) if at_once else None
    if alone is not None:
        slowest = max(c for _, c in at_once)
        rows.append(_costs_nothing_row(
            f"allreduce over each shire's {at_once[0][0]['minions']} minions, all "
            f"{len(at_once)} shires at once, less one shire's alone", float(slowest - alone),
            "allreduce.shires_at_once", "one shire's alone"))
    chart = {"title": "Allreduce of 32 B on the hardware trees", "x_label": "minions in the tree",
             "y_label": "latency (minion cycles)", "x_log2": True,
             "lines": [{"name": {"shire": "one shire (levels 0-4)",
                                 "chip": "minion 0 of 2-32 shires (levels 5-9)"}[part],
                        "points": [[p["minions"], p["cycles"]] for p in points
                                   if p["part"] == part]}
                       for part in ("shire", "chip")],
             "seed": [_seed_mark("one shire, 32 minions", "allreduce.minions_32", 32)]
             if 32 in shire else []}
    return [], rows, {"allreduce_points": points, "chart": chart}


# --- ring bandwidth -------------------------------------------------------------------

RING_MESSAGE_REGISTERS = 32   # 1 KB messages (seed 002, "Energy per byte moved")
RING_STRIDES = (1, 2, 4, 8, 16)


def _ring_shire_runs(cfg):
    if cfg.minions_per_shire < 2:
        raise ValueError("neighbourhoods x minions_per_neighbourhood must be at least 2 for a "
                         "ring inside a shire")
    pairs = []
    for s in range(cfg.compute_shires):
        ring = [cfg.minion_id(s, k) for k in range(cfg.minions_per_shire)]
        pairs += [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]
    yield (f"rings inside each shire, {cfg.minions_per_shire} minions each",
           Flows(tuple(pairs), nregs=RING_MESSAGE_REGISTERS), {"ring": "shire", "stride": 0})


def _ring_chip_runs(cfg):
    n = cfg.compute_shires
    for k in RING_STRIDES:
        if k >= n:
            continue
        pairs = tuple((cfg.minion_id(s, m), cfg.minion_id((s + k) % n, m))
                      for s in range(n) for m in range(cfg.minions_per_shire))
        mean_hops = statistics.mean(hops(cfg.placement[s], cfg.placement[(s + k) % n])
                                    for s in range(n))
        yield (f"every minion to the same minion of shire s + {k}",
               Flows(pairs, nregs=RING_MESSAGE_REGISTERS),
               {"ring": "mesh", "stride": k, "mean_hops": mean_hops})


def _bytes_per_cycle(cfg, run, got, names=None):
    """Aggregate message bytes per minion cycle of one :class:`Flows` run (of
    the minions ``names`` only, when given): each receiver's ``exchanges - 1``
    messages between its first and last completion.  The receivers are
    summed in name order, so the float sum is the same on every run."""
    c = got["counters"]
    total = 0.0
    for name in names or sorted({k.rsplit(".", 1)[0] for k in run["read"]}):
        if c.get(f"{name}.rx_msgs"):
            span = c[f"{name}.last_rx"] - c[f"{name}.first_rx"]
            n = c[f"{name}.rx_msgs"]
            total += (n - 1) * RING_MESSAGE_REGISTERS * cfg.register_bytes / span
    return total


def _ring_rows(parts):
    cfg_s, runs_s, results_s = parts["shire"]
    cfg_c, runs_c, results_c = parts["chip"]
    gbps_s = lambda cfg, bpc: bpc * cfg.minion_mhz * 1e6 / 1e9   # noqa: E731
    shire = [gbps_s(cfg_s, _bytes_per_cycle(cfg_s, r, g)) / cfg_s.compute_shires
             for r, g in zip(runs_s, results_s)]
    points = [{"ring": "shire", "stride": 0, "mean_hops": 0, "minions": cfg_s.minions_per_shire,
               "gb_per_s_per_shire": shire[0]}]
    cross = []
    for r, g in zip(runs_c, results_c):
        p = r["programs"][0]
        v = gbps_s(cfg_c, _bytes_per_cycle(cfg_c, r, g)) / cfg_c.compute_shires
        cross.append(v)
        points.append({"ring": "mesh", "stride": p["stride"], "mean_hops": p["mean_hops"],
                       "minions": cfg_c.minions_per_shire, "gb_per_s_per_shire": v})
    rows = [_ref_row("inside a shire: message bandwidth per shire", shire[0],
                     "ring_bandwidth.shire_per_shire")]
    for p, v in zip(points[1:], cross):
        rows.append(_ref_row(f"to shire s + {p['stride']} ({p['mean_hops']:.1f} hops on average): "
                             "message bandwidth per shire", v, "ring_bandwidth.mesh_per_shire"))
    ratio_lo, ratio_hi = shire[0] / max(cross), shire[0] / min(cross)
    rows.append(_ref_row("inside a shire against between shires, lowest ratio", ratio_lo,
                         "ring_bandwidth.ratio"))
    rows.append(_ref_row("inside a shire against between shires, highest ratio", ratio_hi,
                         "ring_bandwidth.ratio"))
    chart = {"title": "Message bandwidth of 1 KB rings, per shire", "x_label":
             "mean mesh hops between partners (0: inside a shire)",
             "y_label": "GB/s per shire", "x_log2": False, "y_log": True,
             "lines": [{"name": f"stride s + {p['stride']}" if p["stride"] else "inside a shire",
                        "points": [[p["mean_hops"], p["gb_per_s_per_shire"]]]}
                       for p in points],
             "seed": [_seed_mark("inside a shire", "ring_bandwidth.shire_per_shire", 0),
                      _seed_mark("between shires", "ring_bandwidth.mesh_per_shire",
                                 min(p["mean_hops"] for p in points[1:]),
                                 max(p["mean_hops"] for p in points[1:]))]}
    return [], rows, {"ring_points": points, "chart": chart}



# --- streams through the non-compute cells ------------------------------------------

#: 1 KB messages per stream of the non-compute experiment.
NON_COMPUTE_MESSAGES = 16


def non_compute_pairs(cfg):
    """``[(cell, through, clean)]``: for each non-compute cell that some X-then-Y
    route between compute shires passes through, the longest such route
    ``through`` (shire pair ``(a, b)``) and a route ``clean`` of as many hops
    that passes through compute cells only, no pair chosen twice.  A cell no
    route passes through is left out."""
    idle = set(cfg.non_compute_cells)
    used, out = set(), []
    pairs = sorted(itertools.permutations(range(cfg.compute_shires), 2),
                   key=lambda p: (-hops(cfg.placement[p[0]], cfg.placement[p[1]]), p))
    for cell in sorted(idle):
        for through in pairs:
            if cell not in route_cells(cfg, *through) or through in used:
                continue
            h = hops(cfg.placement[through[0]], cfg.placement[through[1]])
            clean = next((p for p in pairs
                          if hops(cfg.placement[p[0]], cfg.placement[p[1]]) == h
                          and not route_cells(cfg, *p) & idle and p not in used), None)
            if clean is not None:
                used |= {through, clean}
                out.append((cell, through, clean))
                break
    return out


def _non_compute_runs(cfg, cells=None):
    """Runs of the non-compute experiment (of the first ``cells`` cells only, when given).

    Raises
    ------
    ValueError
        If no route between compute shires crosses a non-compute cell with a
        route of as many hops through compute cells only to compare it with.
    """
    chosen = non_compute_pairs(cfg)[:cells]
    if not chosen:
        raise ValueError(f"compute_shires and placement must route some pair of compute shires "
                         f"through a non-compute cell, with a route of as many hops through "
                         f"compute cells only to compare it with, not {cfg.compute_shires} "
                         f"shires on a {cfg.mesh_cols}x{cfg.mesh_rows} mesh, where none is")
    meta = {}
    for cell, through, clean in chosen:
        meta[through] = {"route": "through", "cell": list(cell)}
        meta[clean] = {"route": "compute cells only", "cell": list(cell)}
    for i, r in enumerate(pack_pairs(cfg, list(meta))):
        flows, metas = [], []
        for a, b in r["pairs"]:
            flows.append(Flows(((cfg.minion_id(a, 0), cfg.minion_id(b, 0)),),
                               nregs=RING_MESSAGE_REGISTERS, couple=Couple.NONE,
                               exchanges=NON_COMPUTE_MESSAGES))
            metas.append(dict(meta[a, b], shires=[a, b],
                              hops=hops(cfg.placement[a], cfg.placement[b]),
                              receivers=[minion_name(cfg.minion_id(b, 0))]))
        yield (f"round {i}: " + " ".join(f"{a}->{b}" for a, b in r["pairs"]), flows, metas)


def _non_compute_rows(cfg, runs, results):
    gbps = {}
    for run, got in zip(runs, results):
        for p in run["programs"]:
            bpc = _bytes_per_cycle(cfg, run, got, p["receivers"])
            gbps[tuple(p["cell"]), p["route"]] = (p, bpc * cfg.minion_mhz * 1e6 / 1e9)
    rows, points = [], []
    for cell in sorted({c for c, _ in gbps}):
        (pt, via), (pc, plain) = gbps[cell, "through"], gbps[cell, "compute cells only"]
        (a, b), (c, d) = pt["shires"], pc["shires"]
        rows.append({
            "quantity": f"bandwidth cost through non-compute cell {cell}: shire {a} to {b} "
                        f"({pt['hops']} hops) {via:.2f} GB/s against shire {c} to {d} "
                        f"through compute cells only {plain:.2f} GB/s",
            "model": 100 * (1 - via / plain), "reference": None, "unit": "%",
            "minimum": -2.0, "maximum": 2.0,
            "target": "within 2 % either way, every byte checked", "source": NON_COMPUTE_SOURCE})
        points.append({"cell": list(cell), "hops": pt["hops"], "through": [a, b],
                       "through_gb_per_s": via, "clean": [c, d], "clean_gb_per_s": plain})
    return [], rows, {"non_compute_points": points}



_REDUCED_NOTE = ("Built with 2 neighbourhoods of 2 minions per shire (the measured minions "
                 "need no more; the seed finds minion 31 gives the same numbers as minion 0, "
                 "since each shire meets the mesh at one point). Set neighbourhoods and "
                 "minions_per_neighbourhood to build full shires.")
_MINION_ZERO_NOTE = ("Built with minion 0 alone in each shire: only minion 0 of each shire "
                     "takes part, and its path to the mesh (neighbourhood switch, shire "
                     "crossbar, mesh port) has the same stages in any size of shire; the "
                     "seed finds minion 31 gives the same numbers as minion 0, since each "
                     "shire meets the mesh at one point. Set neighbourhoods and "
                     "minions_per_neighbourhood to build full shires.")

#: The build-shape notes and the shire shape, (neighbourhoods, minions per
#: neighbourhood), that each describes.
_SHAPE_NOTES = {_REDUCED_NOTE: (dict(REDUCED)["neighbourhoods"],
                                dict(REDUCED)["minions_per_neighbourhood"]),
                _MINION_ZERO_NOTE: (dict(MINION_ZERO)["neighbourhoods"],
                                    dict(MINION_ZERO)["minions_per_neighbourhood"])}


def build_notes(notes, cfg):
    """``notes`` (a sequence of str) for a result built with ``cfg``: a note
    on the build's reduced shire that the user's ``neighbourhoods`` or
    ``minions_per_neighbourhood`` overrode is replaced by one giving the shape
    built.  Returns a new list."""
    shape = (cfg.neighbourhoods, cfg.minions_per_neighbourhood)
    return [note if _SHAPE_NOTES.get(note, shape) == shape else
            f"Built with {shape[0]} neighbourhood{'s' * (shape[0] != 1)} of {shape[1]} "
            f"minion{'s' * (shape[1] != 1)} per shire, as set (neighbourhoods, "
            f"minions_per_neighbourhood)." for note in notes]


def _shire_and_chip(shire_runs, chip_runs, chip_build=REDUCED):
    """The two builds of an experiment that needs whole shires and the chip
    (``chip_build``: the chip part's build fields; ``()`` builds every minion)."""
    return (Part("shire", ONE_SHIRE, shire_runs), Part("chip", chip_build, chip_runs))


EXPERIMENTS = {e.name: e for e in (
    Experiment("round_trip", "Round trip between minion 0 of every pair of shires",
               pairs_runs, _pairs_rows, MINION_ZERO,
               notes=(_MINION_ZERO_NOTE,
                      "Three ping-pong exchanges of one register per pair; the round trip is "
                      "the spacing of the pinging minion's receives. Pairs run together only "
                      "when they share no shire and no directed mesh link, so no two "
                      "exchanges meet.",
                      "The shire map rows read each boundary's hops off its round trip, "
                      "(round trip - intercept) / cycles per hop. The fit is against the "
                      "placement's hop counts (sim/etsoc_placement.py), so these are the "
                      "placement's hops as the routers deliver them, each off by its pair's "
                      "residual (under 0.17 hop); they show that the routes between the "
                      "seed's neighbours take the hops the seed states.")),
    Experiment("credit", "Credit round trips between minion 0 of every pair of shires",
               _credit_runs, _credit_rows, MINION_ZERO,
               notes=(_MINION_ZERO_NOTE,
                      "Three credit ping-pongs per pair: minion 0 of one shire sends a credit "
                      "and sleeps until the other's comes back; the other sleeps until the "
                      "first's arrives, then sends its own. A credit is a one-flit message on "
                      "the response channel through the same TensorSend issue stage, "
                      "networks and TensorRecv completion stage as a message (the wake), so "
                      "no latency was set for credits. Every pair also runs a one-register "
                      "TensorSend ping-pong, for the comparison row. Times in ns use the "
                      "600 MHz minion clock.",
                      "The seed's two sessions fitted 234 + 24 ns per hop (three cards, worst "
                      "residual 15 cycles) and 246 + 20.4 ns per hop (first session); the "
                      "rows' ranges span both. Known gap: the slope. Credits ride the same "
                      "routers as messages, so the model's credits cost what its messages "
                      "cost per hop, 20 ns (the seed's TensorSend slope), just under the "
                      "first session's 20.4; the seed's 24 ns for credits would need a cost "
                      "per hop that messages do not pay, which it does not describe.",
                      "Known gap: the median pair's difference. A credit is one flit, a "
                      "one-register TensorSend three (its header and two 16 B data flits), "
                      "and the mesh link moves a flit per 1.5 minion cycles, so a credit "
                      "round trip ends 2 x 2 x 1.5 = 6 cycles sooner. On the chip the two "
                      "coincide, so there a credit costs about what a one-register message "
                      "does; the seed does not say why, and no latency was added to make "
                      "them agree.")),
    Experiment("barrier", "FLB plus credit barrier inside a shire",
               _barrier_runs, _barrier_rows, ONE_SHIRE,
               notes=("One whole shire of 32 minions on a 1x1 mesh. Minions 0 to n-1 of the "
                      "shire pass 8 barriers in a row: each sends an FLB arrival to the "
                      "shire's barrier counter (at the crossbar), and the one told it arrived "
                      "last sends a credit multicast that the barrier unit fans out, one "
                      "credit per cycle, to the others, which sleep until theirs arrives. The "
                      "cost per barrier is the spacing of the last exits. No latency was set "
                      "for the barrier unit: it answers in one cycle.",
                      "The seed's chip-wide barrier (global atomics and credits, 8.3 us) "
                      "goes through memory, which the model does not hold.",
                      "Known gap: 233 cycles on the chip. The seed gives that one number and "
                      "no breakdown of it (neither the FLB counter's latency nor how the "
                      "credits fan out), so no latency was set to meet it; the model's "
                      "barrier is an FLB arrival through the crossbar, a one-cycle counter and "
                      "a credit multicast back, which is what its own paths cost.")),
    Experiment("one_kb", "1 KB round trips between minion 0 of every pair of shires",
               _one_kb_runs, _one_kb_rows, MINION_ZERO,
               notes=(_MINION_ZERO_NOTE,
                      "Three ping-pong exchanges of 32 registers (1 KB) per pair, packed into "
                      "runs as in the round-trip experiment. Each shire's mesh stop, between "
                      "its clock crossing and its router, keeps at most mesh_window_flits "
                      "request flits on the mesh unacknowledged; the destination shire's "
                      "mesh stop returns an ACK every ack_flits flits (and at a message's "
                      "last) over the mesh, so the ACK loop is the two routers at the ends "
                      "and the hops between. Near partners' ACKs return before the window "
                      "fills, so only latency grows with distance; beyond the knee the sender "
                      "waits for them once per 1 KB message. The window and the ACK spacing "
                      "are configuration fields chosen so the knee falls at 5 hops; the same "
                      "window paces the 8-hop stream of message_size.",
                      "Known gap: beyond the knee. The one wait per message grows by a round "
                      "trip per hop, so a round trip grows by 12 + 2 x 12 = 36 cycles per hop, "
                      "and the fit lands a hair above the top of the seed's 27-36; the chip's "
                      "lower slopes are not reproduced.")),
    Experiment("three_speeds", "Three speeds: tree edge, shire crossbar, mesh",
               _speeds_runs, _speeds_rows, REDUCED,
               notes=(_REDUCED_NOTE,
                      "Pipeline depths the seed does not disclose (engine_send_cycles, "
                      "engine_recv_cycles, tree_edge_cycles, crossbar_cycles, "
                      "mesh_port_cycles) are configuration fields chosen so these rows come "
                      "out; the per-hop cost comes from the 4-mesh-cycle router hop and the "
                      "clock ratio alone.",
                      "The tree-edge exchange runs again with each receive adding, taking "
                      "the maximum or the minimum into the registers it holds; every "
                      "combined register is checked. A copy goes through the same "
                      "read-then-write pipeline as a combine (hdl/etsoc/engine.py), so a "
                      "combining receive retires when a copy would; a combine that held "
                      "each flit longer would show here as a longer round trip.")),
    Experiment("message_size", "Message size: one-way streams of 1 to 127 registers",
               _size_runs, _size_rows, REDUCED,
               notes=(_REDUCED_NOTE,
                      "Six messages per size; the time per message is the spacing of the "
                      "receiver's completions. The seed names four paths without their hop "
                      "counts; a pair of shires 1 hop apart and shire 0 with a shire 8 hops "
                      "away stand in for its two mesh paths (see sim/experiments/mesh.py, "
                      "_size_paths). The four paths stream at the same time, one run per "
                      "size, in shires and over links none of the others touch.",
                      "The near mesh path moves a register in 3.0 cycles, the mesh link's "
                      "16 B per 400 MHz cycle; at 8 hops the mesh stop's window paces the "
                      "stream (its ACKs come back over 8 hops), as in one_kb.",
                      "Known gaps. The tree edge and crossbar paths move a flit per cycle "
                      "(2.0 cycles per register against the seed's 2.3 and 4.0): inside a "
                      "shire nothing slows a stream below its one-flit-per-cycle links, the "
                      "crossbar's stage being buffered for its credit round trip "
                      "(crossbar_buffer_flits). The seed does not say what makes its crossbar "
                      "path slower per register than its near mesh path, which crosses the "
                      "same crossbar. The 8-hop path's fitted fixed cost is below the seed's: "
                      "its stream is link-paced up to 16 registers and window-paced above, so "
                      "a straight line through all sizes starts lower.")),
    Experiment("layouts", "TensorSend layouts: which ones hang",
               _layout_runs, _layout_rows, REDUCED,
               notes=(_REDUCED_NOTE,
                      "A 2x2 array of shire 0's minions. The alternating-phase 2D layout "
                      "runs its west and north passes as two runs; the run boundary stands "
                      "for the barrier between the phases. The tree is the hardware reduce and "
                      "broadcast tree over the same four minions (tree levels 0 and "
                      "log2(minions_per_neighbourhood)).")),
    Experiment("allreduce", "Allreduce on the hardware trees against minion count",
               None, _tree_rows, parts=_shire_and_chip(_tree_shire_runs, _tree_chip_runs,
                                                        MINION_ZERO)
               + (Part("all", (), _tree_all_runs),),
               notes=("Three builds. Levels 0-4 (2 to 32 minions) run on one whole shire of "
                      "32 minions on a 1x1 mesh; levels 5-9 run as a tree over minion 0 of 2, "
                      "4, ... 32 shires on the 32-shire build with minion 0 alone in each "
                      "shire (its path to the mesh has the same stages in any size of shire); "
                      "and the allreduce over all 1,024 minions runs on the whole chip (32 "
                      "shires of 32 minions). Each allreduce is one register (32 B) added up the "
                      "tree and broadcast back down; its latency is the cycles from the "
                      "start until every member holds the sum, and a level's cost is what "
                      "it adds to the tree below it.",
                      "The whole-chip build also runs every shire's 32-minion tree at once; "
                      "the slowest stands against the one-shire build's tree over the same "
                      "minions. Each shire's tree edges and crossbar are its own, so nothing "
                      "is shared but the start.",
                      "Every level's receive is posted for the whole run (one ready bit per "
                      "level), so the tree takes no READY messages; a child's flits are "
                      "combined as they arrive, interleaved with its siblings'.")),
    Experiment("non_compute", "Streams routed through the non-compute cells",
               _non_compute_runs, _non_compute_rows, MINION_ZERO,
               notes=(_MINION_ZERO_NOTE,
                      "For each non-compute cell that an X-then-Y route between compute "
                      "shires crosses, the longest such route and a route of as many hops "
                      "through compute cells only each carry a stream: minion 0 of the "
                      "source shire sends 16 messages of 1 KB to minion 0 of the "
                      "destination, free-running. Bandwidth is message bytes per second "
                      "(GB/s, 1e9 B/s, at the 600 MHz minion clock) from the receiver's "
                      "completions, and every stream's data are checked in flight. Streams "
                      "run together only when they share no shire and no directed link "
                      "either way (the acknowledgements ride the route back), so each "
                      "measures its route alone. At these distances the mesh stop's window "
                      "sets a stream's pace, so the rate is the route's round trip made "
                      "visible: a slower or lossy router on the way would show as a cost.",
                      "A non-compute cell that no X-then-Y route between compute shires "
                      "crossed would carry no transit traffic and have no row; with the "
                      "default placement all four are crossed.")),
    Experiment("ring_bandwidth", "Ring bandwidth: inside a shire against between shires",
               None, _ring_rows, parts=_shire_and_chip(_ring_shire_runs, _ring_chip_runs),
               notes=("Two builds. The ring inside a shire runs on one whole shire (all 32 "
                      "minions, each passing 1 KB messages to the next); the rings between "
                      "shires run on the 32-shire build with 4 minions per shire, each passing "
                      "1 KB messages to the same minion of shire s + k. A minion sends its "
                      "next message once it has received the last, so data move around the "
                      "ring step by step. Bandwidth is message "
                      "bytes per second per shire (GB/s, 1e9 B/s, at the 600 MHz minion "
                      "clock), from each receiver's completions; the seed's chip-wide "
                      "figures are divided by its 32 shires. Every stream's data is checked "
                      "in flight: each receiver's transfer sum equals its sender's.",
                      "Between shires, 4 senders per shire stand in for the seed's 32: the "
                      "shire's single mesh port, not its minions, limits that traffic. "
                      "Measured once on the 1,024-minion build, the ring to shire s + 1 with "
                      "all 32 minions of each shire sending moved 2.44 GB/s per shire, "
                      "against 2.43 with 4 (448 s of simulation, so not in the report).",
                      "Known gap: between shires the slowest link of each ring sets the pace, "
                      "and for strides 1, 2 and 4 that lands below the seed's range. The "
                      "ratio, the acceptance target, is inside 7-34.")),
)}


def check_expected_hang(cfg, run, got):
    """Raise :class:`ExperimentError` unless a run the seed says hangs (the
    naive 2D layout, ``run["expect_stuck"]``) ended ``stuck``, the watchdog
    having seen no progress, without an overflow; or ended ``done`` and passes
    :func:`check_run` (its row then says the model did not hang).  Ending
    ``timeout`` fails it: traffic still moving, or a watchdog that never
    fired, and either way the row's "hangs" would not be the watchdog's."""
    if got["ended"] == "done":
        check_run(cfg, run, got)
        return
    _raise_sticky_faults(run["label"], got)
    if got["ended"] != "stuck":
        raise ExperimentError(unfinished(run["label"], got["ended"], got["counters"].get("cycles"))
                              + "a run expected to hang must be stopped by the watchdog")


def _check_all(cfg, exp, runs, results):
    for run, got in zip(runs, results):     # in order: the first run that went wrong
        (check_expected_hang if run["expect_stuck"] else check_run)(cfg, run, got)
    if len(results) != len(runs):
        if results and runs[len(results) - 1]["expect_stuck"]:
            check_run(cfg, runs[len(results) - 1], results[-1])
        raise ExperimentError(f"{exp.name}: {len(results)} of {len(runs)} runs came back")


def _config_json(cfg):
    config = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    config["placement"] = [list(c) for c in cfg.placement]
    return config


def analyse(cfg, exp, runs, results, simulator):
    """Check every run and build the result JSON of ``exp``.  For an experiment
    with :attr:`Experiment.parts`, ``cfg``, ``runs`` and ``results`` are dicts
    keyed by part name.

    Raises
    ------
    ExperimentError
        If a run is missing, stuck, or any register came back wrong.
    ValueError
        If a fit cannot be made from the runs (:func:`sim.fit.fit_affine`).
    """
    if exp.parts:
        for name in cfg:
            try:
                _check_all(cfg[name], exp, runs[name], results[name])
            except ExperimentError as error:
                raise ExperimentError(f"{name} build: {error}") from None
        series, rows, extra = exp.rows({name: (cfg[name], runs[name], results[name])
                                        for name in cfg})
        extra["parts"] = {name: _config_json(c) for name, c in cfg.items()}
        cfg = cfg[exp.parts[-1].name]
    else:
        _check_all(cfg, exp, runs, results)
        series, rows, extra = exp.rows(cfg, runs, results)
    config = _config_json(cfg)
    notes = build_notes(exp.notes, cfg)
    if "parts" in extra:
        last = extra["parts"][exp.parts[-1].name]
        notes.append("Builds: " + "; ".join(
            f"{name}: " + (", ".join(f"{k}={v}" for k, v in part.items()
                                     if v != last[k] and k != "placement") or "the configuration shown")
            for name, part in extra["parts"].items()) + ".")
    out = {"fabric": FABRIC, "experiment": exp.name, "title": exp.title,
           "simulator": simulator, "config": config, "series": series, "rows": rows,
           "notes": notes}
    out.update(extra)
    return out
