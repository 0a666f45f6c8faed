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
    assert "sim.prove" not in done.stdout


@pytest.mark.parametrize("fresh, flag", [("FRESH=1", True), ("FRESH=0", False), (None, False)])
def test_fresh_means_what_it_says(fresh, flag):
    done = _make("report", *([fresh] if fresh else []))
    assert done.returncode == 0, done.stderr
    assert ("--fresh" in done.stdout) == flag


def test_refused_input_stops_synth_and_report_before_their_next_step():
    # exit status 2 is fabricsim's and the tools' refusal of bad input
    for target in ("synth", "report"):
        assert "test $status -ne 2 || exit 2" in _make(target).stdout
