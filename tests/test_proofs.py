"""Bounded proofs of the small blocks (sim/prove.py): every registered proof
passes at its depth, each planted fault makes its proof fail, and each
stated bound is tight (one cycle, grant or flit less and the proof fails), so
no proof passes vacuously."""

# No `from __future__ import annotations`: Amaranth reads Component
# annotations at run time.
import json
import re

import pytest
from amaranth import Array, Cat, Module, Signal
from amaranth.lib.fifo import SyncFIFOBuffered

from hdl.common.arbiter import RoundRobin
from hdl.common.credit import CreditCounter
from hdl.common.queue import RegisteredReadFIFO
from hdl.etsoc.mesh import Port
from hdl.hopper.fabric import GxPlane
from sim.prove import (_REUSED, PROOFS, AckHarness, CreditCounterHarness, FifoEquivalenceHarness,
                       GxPlaneHarness, MeshRouterHarness, RoundRobinHarness, ShaperHarness, check,
                       main, prove)


class FixedPriority(RoundRobin):
    """Planted fault: the lowest-numbered requester always wins, so a higher
    one starves while a lower one keeps requesting."""

    def elaborate(self, platform):
        m = Module()
        for i in reversed(range(self.n)):
            with m.If(self.requests[i]):
                m.d.comb += self.grant_index.eq(i)
        m.d.comb += self.valid.eq(self.requests.any())
        for i in range(self.n):
            m.d.comb += self.grant[i].eq(self.valid & (self.grant_index == i))
        return m


class CreditReturnedTwice(CreditCounter):
    """Planted fault: each credit pulse reaches the counter twice (stretched
    over two cycles), so one returned slot is counted as two credits."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.counter = counter = CreditCounter(n_vc=self.n_vc, depth=self.depth)
        again = Signal(self.n_vc)
        m.d.sync += again.eq(self.i_return)
        m.d.comb += [counter.i_return.eq(self.i_return | again),
                     counter.i_take.eq(self.i_take), self.o_avail.eq(counter.o_avail),
                     self.o_away.eq(counter.o_away)]
        return m


class OpaqueReadFIFO(RegisteredReadFIFO):
    """Planted fault: the registered read port is not transparent, so an
    entry read in the cycle after it was written into the next read slot
    shows the memory's old contents."""

    _transparent = False


class DroppingGxPlane(GxPlane):
    """Planted fault: output 0 loses its flit in any cycle in which output 1
    also sends (a crossbar write collision)."""

    def _outputs(self, m, heads):
        super()._outputs(m, heads)
        with m.If(m.submodules.vc_arb1.valid):
            m.d.sync += self.o[0].valid.eq(0)


class SharedPointerGxPlane(GxPlane):
    """Planted fault: each output has one round robin over every (input, VC)
    head, its requests masked by the VC's credit, so grants to the other VC
    move the pointer past a head waiting for credit, which can then wait
    without bound."""

    def _outputs(self, m, heads):
        for o in range(self.n_out):
            credits = CreditCounter(n_vc=self.n_vc, depth=self.out_credits)
            arb = RoundRobin(len(heads))
            m.submodules[f"credits{o}"] = credits
            m.submodules[f"arb{o}"] = arb
            m.d.comb += credits.i_return.eq(self.o[o].credit)
            for k, (head, dest, v, _) in enumerate(heads):
                m.d.comb += arb.requests[k].eq(head.valid & (dest == o) & credits.o_avail[v])
            for v in range(self.n_vc):
                m.d.comb += credits.i_take[v].eq(
                    Cat(arb.grant[k] for k, h in enumerate(heads) if h[2] == v).any())
            payloads = Array(h[0].payload.as_value() for h in heads)
            m.d.sync += [self.o[o].valid.eq(arb.valid),
                         self.o[o].flit.eq(payloads[arb.grant_index])]
        for k, (head, *_) in enumerate(heads):
            m.d.comb += head.ready.eq(
                Cat(m.submodules[f"arb{o}"].grant[k] for o in range(self.n_out)).any())


@pytest.mark.parametrize("name", list(PROOFS))
def test_proof_passes(name):
    result = prove(name)
    assert result.passed, f"{name} failed at depth {result.depth}:\n{result.log_tail}"
    assert result.name == name and result.depth == PROOFS[name].depth


@pytest.mark.parametrize("fault, harness, depth, violated", [
    ("starving arbiter", lambda: RoundRobinHarness(3, arbiter=FixedPriority), 12, "passed over"),
    ("credit returned twice", lambda: CreditCounterHarness(counter=CreditReturnedTwice), 14,
     "o_avail disagrees|o_away disagrees|more flits out than credits"),
    ("queue read port not transparent", lambda: FifoEquivalenceHarness(fifo=OpaqueReadFIFO), 12,
     "r_data differs"),
    ("queue read one cycle late (SyncFIFOBuffered)",
     lambda: FifoEquivalenceHarness(fifo=SyncFIFOBuffered), 12, "r_rdy differs"),
    ("flit dropped in a GX plane", lambda: GxPlaneHarness(plane=DroppingGxPlane), 12,
     "marked flit not out"),
    ("GX plane output arbiter starving a credit-blocked VC",
     lambda: GxPlaneHarness(plane=SharedPointerGxPlane, patience=7), 16,
     "marked flit waits over 7 cycles"),
])
def test_planted_fault_is_caught(fault, harness, depth, violated, tmp_path):
    """Each planted fault breaks its proof, and breaks the property it is about."""
    result = check(harness(), depth, name=fault, workdir=tmp_path)
    assert not result.passed, fault
    first = next(line for line in result.log_tail.splitlines() if line.startswith("violated"))
    assert re.search(violated, first), result.log_tail


@pytest.mark.parametrize("claim, harness, depth", [
    ("requester served before 1 other grant of 3", lambda: RoundRobinHarness(3, wait=1), 12),
    ("requester served before 2 other grants of 4", lambda: RoundRobinHarness(4, wait=2), 14),
    ("at most 5 flits in 9 cycles", lambda: ShaperHarness(windows=(9,), slack=1), 20),
    ("no 2 flits back to back", lambda: ShaperHarness(windows=(2,), slack=1), 20),
    ("ACKs sent within 6 quiet cycles", lambda: AckHarness(n_nodes=3, drain=6), 12),
    ("GX plane drains in 5 cycles", lambda: GxPlaneHarness(drain=5), 12),
    ("mesh router drains in 5 cycles", lambda: MeshRouterHarness(drain=5), 12),
    ("GX plane serves any flit within 6 cycles", lambda: GxPlaneHarness(patience=6), 16),
    ("mesh router serves any flit within 6 cycles", lambda: MeshRouterHarness(patience=6), 18),
])
def test_stated_bound_is_tight(claim, harness, depth, tmp_path):
    assert not check(harness(), depth, name=claim, workdir=tmp_path).passed, claim


@pytest.mark.parametrize("patience, passes", [(2, True), (1, False)])
def test_a_lone_sender_is_served_within_two_cycles(patience, passes, tmp_path):
    harness = MeshRouterHarness(active=(Port.LOCAL,), patience=patience)
    assert check(harness, 12, name="lone sender", workdir=tmp_path).passed == passes


def test_main_writes_results_and_rejects_unknown_names(tmp_path, capsys):
    assert main(["credit_counter", "--results", str(tmp_path), "--build", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "proofs.json").read_text())["rows"]
    assert [r["proof"] for r in rows] == ["credit_counter"]
    assert rows[0]["passed"] is True and rows[0]["depth"] == PROOFS["credit_counter"].depth
    assert set(rows[0]) == {"proof", "block", "property", "depth", "passed", "seconds"}
    capsys.readouterr()
    assert main(["no_such_block"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no_such_block" in err and "credit_counter" in err and "\n" not in err


def test_a_pass_is_reused_only_for_the_same_rtlil_and_depth(tmp_path):
    first = check(RoundRobinHarness(3), 12, name="rr", workdir=tmp_path, cache=True)
    assert first.passed and first.log_tail != _REUSED
    again = check(RoundRobinHarness(3), 12, name="rr", workdir=tmp_path, cache=True)
    assert again.passed and again.log_tail == _REUSED and again.seconds == first.seconds
    assert check(RoundRobinHarness(3), 12, name="rr", workdir=tmp_path).log_tail != _REUSED
    assert check(RoundRobinHarness(3), 11, name="rr", workdir=tmp_path,
                 cache=True).log_tail != _REUSED
    # A planted fault in the same folder runs the solver; its failure
    # removes the record and is never recorded itself.
    fault = check(RoundRobinHarness(3, arbiter=FixedPriority), 12, name="rr",
                  workdir=tmp_path, cache=True)
    assert not fault.passed and not (tmp_path / "passed.json").exists()
    assert not check(RoundRobinHarness(3, arbiter=FixedPriority), 12, name="rr",
                     workdir=tmp_path, cache=True).passed


def test_check_rejects_a_bad_depth():
    with pytest.raises(ValueError, match="depth"):
        check(None, 0)


def _flaky_yosys(monkeypatch, tmp_path, stops):
    """Make ``check`` run a Yosys that exits with code 3 and a runtime error,
    no verdict, on its first ``stops`` calls, and then the real one."""
    import sys

    import sim.prove
    import sim.toolchain

    real = sim.prove._yosys()
    script = (f"import os, sys; p = {str(tmp_path / 'calls')!r}\n"
              "n = int(open(p).read()) if os.path.exists(p) else 0\n"
              "open(p, 'w').write(str(n + 1))\n"
              f"if n < {stops}:\n"
              "    sys.stderr.write('wasm trap: out of bounds memory access\\n'); sys.exit(3)\n"
              f"os.execv({real[0]!r}, {real!r} + sys.argv[1:])\n")
    monkeypatch.setattr(sim.prove, "_yosys", lambda: [sys.executable, "-c", script])
    # The calls counted are the proof's runs, so the preparation run
    # (sim.toolchain.prepare_yowasp) is left out here; the real Yosys the
    # fake hands over to compiles itself if it must.
    monkeypatch.setattr(sim.toolchain, "prepare_yowasp", lambda command: None)


def test_a_yosys_that_stops_without_a_verdict_runs_once_more(tmp_path, monkeypatch, capsys):
    _flaky_yosys(monkeypatch, tmp_path, stops=1)
    result = check(RoundRobinHarness(3), 12, name="rr", workdir=tmp_path / "proof")
    assert result.passed and (tmp_path / "calls").read_text() == "2"
    assert "rr: Yosys stopped without a verdict (exit code 3)" in capsys.readouterr().err


def test_a_yosys_that_stops_twice_fails_the_proof_with_both_exits(tmp_path, monkeypatch):
    _flaky_yosys(monkeypatch, tmp_path, stops=2)
    result = check(RoundRobinHarness(3), 12, name="rr", workdir=tmp_path / "proof")
    assert not result.passed and (tmp_path / "calls").read_text() == "2"
    assert result.log_tail.startswith("no counterexample: Yosys stopped early")
    assert "Yosys exited with code 3\nwasm trap: out of bounds memory access" in result.log_tail
    assert "(attempt 1 had stopped the same way: exit code 3, wasm trap" in result.log_tail
