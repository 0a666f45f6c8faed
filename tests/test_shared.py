"""One Verilog module per shared block (:mod:`hdl.common.shared`).

A small block with a per-instance constant port, an array of streams and a
register stands in for a shire: the hierarchical Verilog holds it once, the
flat design (Amaranth's simulator) behaves as the hierarchy would, and
misuse is refused with a clear error.
"""

import os
import re
import subprocess
import sys

import pytest
from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hdl.common.shared import SharedModule, collect_shared_modules
from sim import build
from sim.build import FLAT_TOPS, HIER_BLOCK, convert_hierarchy
from sim.runner import VERILATOR_WAIVERS
from sim.toolchain import verilator_env


class Tagger(wiring.Component):
    """Adds ``i_id + bias`` to each of ``lanes`` input streams' payloads, one
    register stage."""

    def __init__(self, *, lanes, width, bias=0):
        self.lanes, self.bias = lanes, bias
        super().__init__({"i_id": In(8), "i": In(stream.Signature(width)).array(lanes),
                          "o": Out(stream.Signature(width)).array(lanes)})

    def elaborate(self, platform):
        m = Module()
        for k in range(self.lanes):
            m.d.comb += self.i[k].ready.eq(~self.o[k].valid | self.o[k].ready)
            with m.If(self.i[k].ready):
                m.d.sync += [self.o[k].valid.eq(self.i[k].valid),
                             self.o[k].payload.eq(self.i[k].payload + self.i_id + self.bias)]
        return m


class Chain(wiring.Component):
    """Three taggers in a row (ids 1, 2, 3), each a shared module; the last
    one built with ``bias``."""

    def __init__(self, name="tagger", bias=0):
        self.module_name, self.bias = name, bias
        super().__init__({"i": In(stream.Signature(16)).array(2),
                          "o": Out(stream.Signature(16)).array(2)})

    def elaborate(self, platform):
        m = Module()
        prev = [wiring.flipped(self.i[k]) for k in range(2)]
        for n in range(3):
            t = SharedModule(Tagger, self.module_name, lanes=2, width=16,
                             bias=self.bias if n == 2 else 0)
            m.submodules[f"t{n}"] = t
            m.d.comb += t.i_id.eq(n + 1)
            for k in range(2):
                wiring.connect(m, prev[k], t.i[k])
            prev = list(t.o)
        for k in range(2):
            wiring.connect(m, prev[k], wiring.flipped(self.o[k]))
        return m


class TwoClocks(wiring.Component):
    """Registers ``i`` in the ``sync`` domain and again in ``mesh``."""

    def __init__(self):
        super().__init__({"i": In(8), "o": Out(8)})

    def elaborate(self, platform):
        m = Module()
        stage = Signal(8)
        m.d.sync += stage.eq(self.i)
        m.d.mesh += self.o.eq(stage)
        return m


class TwoClockPair(wiring.Component):
    """Two shared :class:`TwoClocks` in a row."""

    def __init__(self):
        super().__init__({"i": In(8), "o": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.a = a = SharedModule(TwoClocks, "two_clocks", domains=("sync", "mesh"))
        m.submodules.b = b = SharedModule(TwoClocks, "two_clocks", domains=("sync", "mesh"))
        m.d.comb += [a.i.eq(self.i), b.i.eq(a.o), self.o.eq(b.o)]
        return m


def two_clock_verilog():
    """The hierarchy of :class:`TwoClockPair` (for the subprocesses below)."""
    return convert_hierarchy(TwoClockPair(), "pair")


def test_a_shared_module_s_clock_ports_do_not_depend_on_string_hashing():
    # Amaranth creates the domains a block uses but does not define in the
    # order of a set of their names; the shared module's come in its order.
    texts = set()
    for seed in range(4):
        done = subprocess.run(
            [sys.executable, "-c", "import test_shared; print(test_shared.two_clock_verilog())"],
            cwd=os.path.dirname(__file__), capture_output=True, text=True, check=True,
            env=dict(os.environ, PYTHONHASHSEED=str(seed),
                     PYTHONPATH=os.pathsep.join(sys.path)))
        # The shared module's text only: the top here, unlike the fabrics',
        # leaves both of its domains to Amaranth.
        texts.add(done.stdout[done.stdout.index("module two_clocks("):])
    assert len(texts) == 1
    header = texts.pop().splitlines()[0]
    assert header.index("clk, rst") < header.index("mesh_clk, mesh_rst"), header


def test_a_top_s_shared_modules_take_its_staged_reset():
    """Every shared module of a top gets the reset that passed the top's
    flip-flop (sim.build's ``_convert_top``), not the ``rst`` port."""
    text = convert_hierarchy(Chain(), "chain")
    top = text[:text.index("endmodule")]
    resets = re.findall(r"\.rst\(([^)]*)\)", top)
    assert len(resets) == 3 and "rst" not in resets, resets
    assert len(re.findall(r"<= rst;", top)) == 1


def test_the_hierarchy_holds_one_module_for_every_instance():
    text = convert_hierarchy(Chain(), "chain")
    assert text.count("module tagger(") == 1
    assert text.count("  tagger t") == 3


def test_only_tops_outside_flat_tops_mark_hierarchical_blocks():
    """Verilator builds a top of ``FLAT_TOPS`` flat: its shared modules are
    still one module each, without the hierarchical-block mark."""
    marked = convert_hierarchy(Chain(), "chain")
    assert marked.count(HIER_BLOCK) == 1
    for top in FLAT_TOPS:
        flat = convert_hierarchy(Chain(), top)
        assert HIER_BLOCK not in flat and flat.count("module tagger(") == 1


def test_a_module_of_flat_modules_is_not_a_hierarchical_block(monkeypatch):
    """A shared module in ``FLAT_MODULES`` is still one module, unmarked, so
    Verilator builds it flat inside its parent (the ET-SoC-1 minion engine)."""
    monkeypatch.setattr(build, "FLAT_MODULES", frozenset({"tagger"}))
    flat = convert_hierarchy(Chain(), "chain")
    assert HIER_BLOCK not in flat and flat.count("module tagger(") == 1


class One(wiring.Component):
    """One shared :class:`Tagger`, as a 1x1 mesh holds one shire."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(16)), "o": Out(stream.Signature(16))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.t = t = SharedModule(Tagger, "tagger", lanes=1, width=16)
        m.d.comb += t.i_id.eq(1)
        wiring.connect(m, wiring.flipped(self.i), t.i[0])
        wiring.connect(m, t.o[0], wiring.flipped(self.o))
        return m


def test_a_module_with_one_instance_is_not_a_hierarchical_block():
    """Verilator would build a module instantiated once as a block of its own
    for nothing, behind the DPI wrapper every block is called through: it is
    unmarked, and built flat inside its parent."""
    text = convert_hierarchy(One(), "one")
    assert HIER_BLOCK not in text and text.count("module tagger(") == 1


def test_the_flat_design_behaves_as_the_shared_one_would():
    dut = Chain()
    got = []

    async def bench(ctx):
        for k in range(2):
            ctx.set(dut.o[k].ready, 1)
        for value in (10, 20, 30):
            ctx.set(dut.i[1].valid, 1)
            ctx.set(dut.i[1].payload, value)
            await ctx.tick()
        ctx.set(dut.i[1].valid, 0)
        for _ in range(5):
            if ctx.get(dut.o[1].valid):
                got.append(ctx.get(dut.o[1].payload))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == [16, 26, 36]      # + 1 + 2 + 3


def test_verilator_accepts_the_hierarchy(tmp_path):
    path = tmp_path / "chain.v"
    path.write_text(convert_hierarchy(Chain(), "chain"))
    done = subprocess.run(["verilator", "--lint-only", *VERILATOR_WAIVERS, "--top-module",
                           "chain", str(path)], env=dict(os.environ, **verilator_env()),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_one_name_for_two_different_blocks_is_refused():
    with pytest.raises(ValueError, match="module_name 'tagger' names two different blocks"):
        convert_hierarchy(Chain(bias=5), "chain")


def test_a_shared_module_may_not_take_the_top_level_name():
    with pytest.raises(ValueError, match="shared module 'chain' has the top level's name"):
        convert_hierarchy(Chain(name="chain"), "chain")


def test_bad_module_name_and_nested_collection_are_refused():
    with pytest.raises(ValueError, match="module_name must be a Verilog identifier"):
        SharedModule(Tagger, "tag-ger", lanes=1, width=8)
    with collect_shared_modules():
        with pytest.raises(RuntimeError, match="already active"):
            with collect_shared_modules():
                pass


class Counter(wiring.Component):
    """Counts cycles."""

    def __init__(self):
        super().__init__({"o": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.o.eq(self.o + 1)
        return m


class ClearedCounter(wiring.Component):
    """A shared :class:`Counter` that ``i_clear`` returns to 0."""

    def __init__(self):
        super().__init__({"i_clear": In(1), "o": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.c = c = SharedModule(Counter, "counter", resets=self.i_clear)
        m.d.comb += self.o.eq(c.o)
        return m


def test_resets_clear_a_shared_module_flat_and_in_the_hierarchy():
    dut = ClearedCounter()
    seen = []

    async def bench(ctx):
        for cycle in range(8):
            ctx.set(dut.i_clear, cycle == 4)
            await ctx.tick()
            seen.append(ctx.get(dut.o))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [1, 2, 3, 4, 0, 1, 2, 3]
    top = convert_hierarchy(ClearedCounter(), "cleared")
    top = top[:top.index("endmodule")]
    reset = re.findall(r"\.rst\(([^)]*)\)", top)
    assert len(reset) == 1, reset
    assert re.search(rf"assign {re.escape(reset[0])} = \S+ \| i_clear;", top), top


def test_resets_of_a_domain_the_block_lacks_or_wider_than_a_bit_are_refused():
    with pytest.raises(ValueError, match=r"^resets must name domains of the block "
                                         r"\('sync',\), not mesh$"):
        SharedModule(Counter, "counter", resets={"mesh": Signal()})
    with pytest.raises(ValueError, match=r"^resets must be 1-bit values, not 2 bits for sync$"):
        SharedModule(Counter, "counter", resets=Signal(2))
