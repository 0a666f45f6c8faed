"""Integration: the DSM experiments through the generated Verilog under cocotb.

Each experiment runs exactly as ``fabricsim run`` runs it, and its rows are
checked against the seed values in ``sim/reference/dsm.toml``: a model change
that moves a fitted bandwidth outside its tolerance fails here.
"""

import os
from pathlib import Path

import pytest

from hdl.hopper.config import DsmConfig
from hdl.hopper.endpoint import Fault
from hdl.hopper.gpc import Gpc
from sim.build import generate_verilog
from sim.experiments import dsm
from sim.report import row_met
from sim.runner import run_cocotb

SIM = os.environ.get("FABRICSIM_SIM", "verilator")
BUILD = Path(__file__).resolve().parent.parent / "build"


@pytest.fixture(scope="session")
def verilog():
    return generate_verilog(Gpc, DsmConfig().hardware(), "dsm_gpc", build_root=BUILD)


def simulate(verilog, cfg, runs, tmp_path):
    result = run_cocotb(verilog, "dsm_gpc", "testbenches.dsm", sim=SIM,
                        plan=dsm.plan(cfg, runs), test_dir=tmp_path)
    return result["runs"]


def run_experiment(verilog, name, tmp_path, cfg=None):
    cfg = cfg or DsmConfig()
    experiment = dsm.EXPERIMENTS[name]
    runs = dsm.build_runs(cfg, experiment)
    return dsm.analyse(cfg, experiment, runs, simulate(verilog, cfg, runs, tmp_path), SIM)


@pytest.mark.parametrize("name", ["one_way", "bidirectional", "mixed", "ring"])
def test_fitted_bandwidths_meet_the_seed(verilog, name, tmp_path):
    data = run_experiment(verilog, name, tmp_path)
    missed = [f"{r['quantity']}: model {r['model']:.3f} vs {r['reference']} {r['unit']} "
              f"({r['target']})" for r in data["rows"] if not row_met(r)]
    assert not missed, "; ".join(missed)


def test_topology_adjacent_pairs_beat_the_median_stride(verilog, tmp_path):
    data = run_experiment(verilog, "topology", tmp_path)
    row = next(r for r in data["rows"] if r["quantity"].startswith("adjacent pairs"))
    assert row["model"] > 0


def test_isolated_pairs_are_within_two_percent(verilog, tmp_path):
    data = run_experiment(verilog, "isolated_pairs", tmp_path)
    row = next(r for r in data["rows"] if r["quantity"].startswith("spread"))
    assert row["model"] < 2.0


def test_gx1_off_delivers_every_byte(verilog, tmp_path):
    data = run_experiment(verilog, "plane_off", tmp_path,
                          DsmConfig(payload_kib=(16, 32, 48)))
    # analyse() raised already if a byte was lost; check GX1 carried nothing.
    for counters in data["lane_flits"].values():
        assert all(v == 0 for k, v in counters.items() if k.startswith("gx1."))
        assert any(v for k, v in counters.items() if k.startswith("gx0."))


@pytest.mark.parametrize("fault,message", [
    (Fault.CORRUPT, "words corrupted or misplaced"),
    (Fault.DUPLICATE, "received 16416 B, expected 16384 B"),
    (Fault.DROP, "stuck after"),
])
def test_checks_catch_every_fault(verilog, tmp_path, fault, message):
    cfg = DsmConfig()
    run = dsm.build_run(cfg, [dsm.Stream("tma", 0, 1, 16384)], "fault", fault=(1, fault))
    result = simulate(verilog, cfg, [run], tmp_path)[0]
    with pytest.raises(dsm.ExperimentError, match=message):
        dsm.check_run(cfg, result)


def test_stuck_report_names_where_traffic_waits(verilog, tmp_path):
    cfg = DsmConfig()
    run = dsm.build_run(cfg, [dsm.Stream("store", 0, 1, 16384)], "drop", fault=(1, Fault.DROP))
    result = simulate(verilog, cfg, [run], tmp_path)[0]
    with pytest.raises(dsm.ExperimentError) as info:
        dsm.check_run(cfg, result)
    text = str(info.value)
    # The source waits for an acknowledgement that never comes; the target is a byte short.
    assert "sm0 unacked_flits=1" in text and "sm1 received 16352/16384 B" in text
