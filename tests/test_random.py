"""Seeded constrained-random traffic on every fabric (sim/random_traffic.py).

For each fabric and simulator, the runs drawn from every selected seed go
through one simulation and the experiments' own checks: every run must end
``done`` with every byte, TLP payload or register at its destination, none
lost, duplicated or corrupted.  ``--seeds N`` selects seeds 1 to N (default
2, the CI handful), ``--seed S`` one seed; ``make soak`` runs many.  Icarus
runs the small variant (smaller payloads, a four-minion mesh) and is
skipped where it is not installed.  A failure names the seed and the
command that re-runs it.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from sim import random_traffic
from sim.random_traffic import FABRICS, run_seeds, trial

BUILD = Path(__file__).resolve().parent.parent / "build"


@pytest.mark.parametrize("sim", ("verilator", "icarus"))
@pytest.mark.parametrize("fabric", FABRICS)
def test_random_traffic_arrives_intact(fabric, sim, random_seeds, tmp_path):
    if sim == "icarus" and (shutil.which("iverilog") is None or shutil.which("vvp") is None):
        pytest.skip("Icarus Verilog (iverilog, vvp) is not installed")
    got = run_seeds(fabric, random_seeds, sim=sim, build_root=BUILD, test_dir=tmp_path)
    assert not got["failures"], "\n".join(got["failures"])
    assert got["runs"] == 3 * len(random_seeds) and got["transfers"] > 0


@pytest.mark.parametrize("fabric", FABRICS)
def test_a_seed_draws_the_same_runs_every_time(fabric):
    again = trial(fabric, 7)
    assert [r["writes"] for r in trial(fabric, 7).runs] == [r["writes"] for r in again.runs]
    assert [r["writes"] for r in trial(fabric, 8).runs] != [r["writes"] for r in again.runs]


@pytest.mark.parametrize("small", [False, True])
def test_the_ci_seeds_draw_allreduce_trees(small):
    """Seeds 1 and 2 (``make test``'s) draw hardware allreduce trees among the
    mesh's programs, max or min among them: a tree's combine is checked in a
    run, not only in a unit test."""
    traffic = "; ".join(run["traffic"] for seed in (1, 2)
                        for run in trial("mesh", seed, small=small).runs)
    ops = re.findall(r"Tree\(levels=\d+, base=\d+, nregs=\d+, op=(\d)", traffic)
    assert ops and {"2", "3"} & set(ops), traffic


@pytest.mark.parametrize("seed", [1, 2])
def test_every_seed_draws_every_pcie_copy_mode(seed):
    """A seed's three PCIe runs take push, pull and staged copies in turn, so
    make test's seeds run reads and completions too (drawn at random, seeds
    1 and 2 drew no pull)."""
    modes = [run["traffic"].split()[0] for run in trial("pcie", seed).runs]
    assert sorted(modes) == ["pull", "push", "staged"]


def test_main_rejects_bad_arguments(tmp_path, capsys):
    for argv, field in ((["noc"], "FABRIC"), (["dsm", "--sim", "vcs"], "--sim"),
                        (["dsm", "--seeds", "0"], "--seeds")):
        assert random_traffic.main([*argv, "--results", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"sim.random_traffic: error: {field}") and "\n" not in err
    with pytest.raises(SystemExit) as exit_:
        random_traffic.main(["dsm", "--jobs", "0", "--results", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "sim.random_traffic: error: --jobs must be an integer from 1 to 1024, not '0' "
        "(see python -m sim.random_traffic --help)\n")
    assert not (tmp_path / "random.json").exists()


def test_a_seed_given_twice_runs_once(tmp_path, monkeypatch, capsys):
    """``--seed 3 --seed 3 --seed 1`` simulates seeds 3 and 1, once each, and
    the table names them as given (not as a range)."""
    asked = []

    def fake(fabric, seeds, **kw):
        asked.append(list(seeds))
        return {"fabric": fabric, "simulator": kw["sim"], "seeds": list(seeds), "runs": 0,
                "transfers": 0, "checked_bytes": 0, "failures": []}

    monkeypatch.setattr(random_traffic, "run_seeds", fake)
    assert random_traffic.main(["dsm", "--seed", "3", "--seed", "3", "--seed", "1",
                                "--jobs", "1", "--results", str(tmp_path),
                                "--build", str(tmp_path / "build")]) == 0
    assert asked == [[3, 1]]
    assert "random traffic, seeds 3, 1" in capsys.readouterr().out


def test_a_failing_run_names_its_seed_and_the_command_to_rerun_it(tmp_path, monkeypatch):
    real = random_traffic.trial

    def broken(fabric, seed, **kw):
        t = real(fabric, seed, **kw)
        t.runs[1]["expect"] = {g: n + 16 for g, n in t.runs[1]["expect"].items()}
        return t

    monkeypatch.setattr(random_traffic, "trial", broken)
    assert random_traffic.main(["pcie", "--seed", "5", "--sim", "verilator",
                                "--results", str(tmp_path), "--build", str(BUILD)]) == 1
    row = json.loads((tmp_path / "random.json").read_text())["rows"][0]
    assert row["passed"] is False and len(row["failures"]) == 1
    assert "seed 5 run 1" in row["failures"][0]
    assert "python -m sim.random_traffic pcie --seed 5 --sim verilator" in row["failures"][0]


def test_runs_after_a_stopped_run_are_failures_not_checked(tmp_path, monkeypatch):
    """A simulation that stops after a run (the testbench stops once a run
    ends stuck or sets the sticky overflow flag) leaves the later runs
    unchecked: each is a failure that names the run it followed, and no run
    that failed or was not simulated counts transfers or checked bytes."""
    from hdl.pcie.system import counter_names
    from sim import runner

    t = trial("pcie", 5)
    counters = dict.fromkeys(counter_names(t.cfg), 0)
    counters["overflow"] = 1
    first = {"label": t.runs[0]["label"], "ended": "done", "counters": counters}
    monkeypatch.setattr(random_traffic.Trial, "verilog", lambda self, root: root / "top.v")
    monkeypatch.setattr(runner, "run_cocotb_cached", lambda *a, **k: ({"runs": [first]}, None))
    got = run_seeds("pcie", [5], build_root=tmp_path, test_dir=tmp_path)
    assert got["runs"] == 3 and len(got["failures"]) == 3
    assert got["transfers"] == 0 and got["checked_bytes"] == 0
    for k in (1, 2):
        assert got["failures"][k].startswith(
            f"seed 5 run {k}: not simulated, the simulation stopped after seed 5 run 0 |")
        assert "re-run: python -m sim.random_traffic pcie --seed 5" in got["failures"][k]
    monkeypatch.setattr(runner, "run_cocotb_cached", lambda *a, **k: ({"runs": []}, None))
    got = run_seeds("pcie", [5], build_root=tmp_path, test_dir=tmp_path)
    assert got["failures"][0].startswith("seed 5 run 0: not simulated, the simulation "
                                         "returned no runs |")
