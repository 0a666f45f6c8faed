"""The Makefile's variables: bad values stop make before anything runs.

Each case is a dry run (``make -n``), so nothing is built or simulated.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args):
    return subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True,
                          text=True, check=False, timeout=60)


@pytest.mark.parametrize("assignment, message", [
    ("SIM=vcs", "SIM must be verilator or icarus, not 'vcs'"),
    ("SIM=", "SIM must be verilator or icarus, not ''"),
    ("FRESH=no", "FRESH must be 1 or 0, not 'no'"),
    ("FRESH=yes", "FRESH must be 1 or 0, not 'yes'"),
])
def test_a_bad_variable_stops_make_with_one_line(assignment, message):
    done = _make("report", assignment)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_target_that_does_not_simulate_ignores_sim():
    # cocotb's own makefiles read SIM too (SIM=ghdl, say)
    done = _make("clean", "SIM=ghdl", "FRESH=no")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fresh, flag", [("FRESH=1", True), ("FRESH=0", False), (None, False)])
def test_fresh_means_what_it_says(fresh, flag):
    done = _make("report", *([fresh] if fresh else []))
    assert done.returncode == 0, done.stderr
    assert ("--fresh" in done.stdout) == flag


@pytest.mark.skipif(not (ROOT / ".venv" / ".fabricsim-installed").exists(),
                    reason="needs the project's .venv (make venv)")
def test_refused_input_stops_make_synth_before_its_sweep(tmp_path):
    # exit status 2 is fabricsim's refusal of bad input; the sweep would
    # synthesise three points
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "synth", "SYNTH_TIMEOUT=-5",
                           f"BUILD={tmp_path / 'b'}", f"RESULTS={tmp_path / 'r'}"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2
    assert "--timeout must be a positive number of seconds, not -5" in done.stderr
    assert "synth.tpc_arbiter" not in done.stdout + done.stderr
    assert not (tmp_path / "r").exists()
