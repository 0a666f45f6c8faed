"""``make bench``: the ops a plan becomes, the report's speed table, and (under
``make soak``) a short bench of the PCIe machine on every simulator."""

import json

import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from sim import bench
from sim.report import _bench_section


def test_a_plan_becomes_writes_pulses_and_waits():
    plan = {"run_cycles": 99, "init_cycles": 7,
            "runs": [{"writes": [(3, 5), (4, -1)], "plane_enable": 2}]}
    stages = [("ctl_init", "init_done", None, "init_cycles"),
              ("ctl_start", "done", "stuck", "run_cycles")]
    assert bench.ops_of_plan(plan, stages) == [
        "S plane_enable 2", "W 3 5", f"W 4 {0xFFFFFFFF}",
        "P ctl_init", "U init_done init_done 7", "P ctl_start", "U done stuck 99"]


def test_idle_cycles_follow_each_run_and_the_last():
    plan = {"run_cycles": 99, "runs": [{"writes": [(3, 5)]}, {"writes": [(4, 6)]}]}
    stages = [("ctl_start", "done", "stuck", "run_cycles")]
    assert bench.ops_of_plan(plan, stages, settle_cycles=1000, quiet_cycles=200) == [
        "W 3 5", "P ctl_start", "U done stuck 99", "I 1000",
        "W 4 6", "P ctl_start", "U done stuck 99", "I 1000", "I 200"]


def test_the_report_shows_the_speed_table(tmp_path):
    row = {"top": "pcie_system", "simulator": "verilator-bare", "cycles": 1000000,
           "wall_s": 2.0, "cycles_per_s": 500000.0, "ratio_to_bare": 1.0, "build_s": 60.0,
           "peak_rss_mib": 80.0}
    (tmp_path / "bench.json").write_text(json.dumps({"rows": [row]}))
    text = "\n".join(_bench_section(tmp_path))
    assert "## Simulation speed" in text and "| pcie_system | verilator-bare | 1,000,000 |" in text
    assert "| peak memory of one simulation (Verilator, Icarus) | 80 MiB | < 4096 MiB | yes |" \
        in text
    cocotb = dict(row, simulator="verilator-cocotb", cycles_per_s=100000.0, ratio_to_bare=0.2)
    report = {"cold_s": 960.0, "warm_s": 120.0, "fresh_s": 900.0, "cold_exit": 0,
              "warm_exit": 0, "fresh_exit": 1, "cpus": 2}
    (tmp_path / "bench.json").write_text(json.dumps({"rows": [row, cocotb], "report": report}))
    text = "\n".join(_bench_section(tmp_path))
    assert "| cocotb at a quarter of the bare harness or more over a million cycles: " \
           "pcie_system | 0.200 | >= 0.25 | **no** |" in text
    assert "| `make report`, empty build folder, 2 CPUs (exit 0) | 16.0 min | <= 15 min | " \
           "**no** |" in text
    assert "| `make report`, the build folder it left (builds and simulation results reused), " \
           "2 CPUs (exit 0) | 2.0 min | <= 3 min | yes |" in text
    assert "| `make report`, builds reused, every run simulated again (`FRESH=1`), 2 CPUs " \
           "(exit 1) | 15.0 min | <= 3 min | **no** |" in text
    short = dict(cocotb, cycles=51133, ratio_to_bare=0.763)
    (tmp_path / "bench.json").write_text(json.dumps({"rows": [row, short]}))
    assert "| cocotb at a quarter of the bare harness or more over a million cycles: " \
           "pcie_system, only 51,133 cycles | 0.763 | >= 0.25 | not measured: a run under a " \
           "million cycles |" in "\n".join(_bench_section(tmp_path))
    (tmp_path / "bench.json").write_text(json.dumps({"rows": [{"top": "x"}]}))
    with pytest.raises(ValueError, match="not a bench file"):
        _bench_section(tmp_path)
    assert _bench_section(tmp_path / "nothing") == []


def test_a_piped_table_is_not_cut_at_80_columns(capsys, monkeypatch):
    from rich.table import Table

    from sim.cli import wide_console

    monkeypatch.delenv("COLUMNS", raising=False)
    table = Table()
    for name in ("top", "simulator", "cycles", "wall s", "cycles/s", "ratio to bare",
                 "build s", "peak RSS MiB"):
        table.add_column(name)
    table.add_row("pcie_system (8 GPUs)", "verilator-cocotb", "51,133", "0.83", "61,606",
                  "0.905", "1", "49")
    wide_console().print(table)
    assert "pcie_system (8 GPUs) │ verilator-cocotb" in capsys.readouterr().out


def test_the_bench_help_prints(capsys):
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0 and "--pysim-timeout" in capsys.readouterr().out


def test_bad_bench_input_is_refused(capsys):
    assert bench.main(["nvlink"]) == 2
    assert "FABRIC must be one of dsm, mesh, pcie, not 'nvlink'" in capsys.readouterr().err
    assert bench.main(["--megacycles", "0"]) == 2
    assert bench.main(["--pysim-timeout", "0"]) == 2


@pytest.mark.slow
def test_a_short_bench_of_the_pcie_machine(tmp_path):
    assert bench.main(["pcie", "--megacycles", "0.05", "--pysim-cycles", "200",
                       "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    by = {r["simulator"]: r for r in rows}
    assert by["verilator-bare"]["ratio_to_bare"] == 1.0
    # the same workload, the testbench's idle cycles at rest included: the
    # cocotb path counts the bare harness's cycles within a few of start-up
    assert abs(by["verilator-cocotb"]["cycles"] - by["verilator-bare"]["cycles"]) < 10
    assert all(r["cycles_per_s"] > 0 and r["peak_rss_mib"] > 0 for r in rows)


class _Countdown(Elaboratable):
    """A top with the bench's ports whose ``done`` rises 3 cycles after ``ctl_start``'s."""

    def __init__(self):
        self.cfg_addr, self.cfg_data = Signal(8), Signal(32)
        self.cfg_we, self.ctl_start = Signal(), Signal()
        self.done, self.stuck = Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        left = Signal(3)
        with m.If(self.ctl_start):
            m.d.sync += left.eq(3)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        m.d.comb += self.done.eq(left == 1)
        return m


def _countdown_work():
    class Config:
        def hardware(self):
            return None
    return {"component": lambda hardware: _Countdown(), "config": Config(),
            "plan": {"run_cycles": 10, "runs": [{"writes": [(1, 2)]}] * 4},
            "stages": [("ctl_start", "done", "stuck", "run_cycles")], "settle_cycles": 5,
            "clocks": [("clk", "rst", 1000)]}


def test_amaranth_simulator_runs_the_cycles_asked_or_stops_at_its_time():
    # per run: 1 write, 1 pulse (loads 3), 2 cycles until done, 5 idle = 9 cycles
    assert bench._measure_pysim(_countdown_work(), 1000)[0] == 36
    assert bench._measure_pysim(_countdown_work(), 17)[0] == 17
    assert bench._measure_pysim(_countdown_work(), 1000, seconds=0)[0] == 0
