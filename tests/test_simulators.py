"""The two simulators agree cycle for cycle.

One short run per fabric, on the Verilog its own tests use, goes through
Verilator and Icarus; both must finish cleanly with every counter (cycles,
bytes, flits, time stamps) equal.  Skipped where Icarus is not installed.
"""

import shutil
from pathlib import Path

import pytest

from sim.build import generate_verilog
from sim.runner import run_cocotb

BUILD = Path(__file__).resolve().parent.parent / "build"

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                reason="Icarus Verilog (iverilog, vvp) is not installed")


def _dsm():
    from hdl.hopper.config import DsmConfig
    from hdl.hopper.gpc import Gpc
    from sim.experiments import dsm
    cfg = DsmConfig()
    runs = [dsm.build_run(cfg, [dsm.Stream("tma", 0, 1, 4096), dsm.Stream("load", 1, 0, 2048)],
                          "tma and load")]
    verilog = generate_verilog(Gpc, cfg.hardware(), "dsm_gpc", build_root=BUILD)
    return verilog, "dsm_gpc", "testbenches.dsm", dsm.plan(cfg, runs), \
        lambda got: dsm.check_run(cfg, got)


def _pcie():
    from hdl.pcie.config import PcieConfig
    from hdl.pcie.system import PcieSystem
    from sim.experiments import pcie
    cfg = PcieConfig()
    runs = [pcie.copy_run(cfg, "push in a socket and across", [(0, 1), (2, 5)], 4096, 128)]
    verilog = generate_verilog(PcieSystem, cfg.hardware(), "pcie_system", build_root=BUILD)
    return verilog, "pcie_system", "testbenches.pcie", pcie.plan(cfg, runs), \
        lambda got: pcie.check_run(cfg, runs[0], got)


def _mesh():
    # the whole chip would take Icarus minutes; two shires of two minions each
    # still cross both clock domains, two routers and the shire crossbars
    from hdl.etsoc.config import MeshConfig
    from hdl.etsoc.mesh import EtSocMesh
    from sim.experiments import mesh
    cfg = MeshConfig(compute_shires=2, mesh_cols=2, mesh_rows=1, placement=((0, 0), (1, 0)),
                     neighbourhoods=1, minions_per_neighbourhood=2, watchdog_cycles=3000)
    pp = mesh.PingPong(cfg.minion_id(0, 1), cfg.minion_id(1, 0), nregs=8, exchanges=2)
    runs = [mesh.build_run(cfg, "ping-pong between two shires", pp, set(), {})]
    verilog = generate_verilog(EtSocMesh, cfg.hardware(), "etsoc_mesh", build_root=BUILD)
    return verilog, "etsoc_mesh", "testbenches.mesh", mesh.plan(cfg, runs), \
        lambda got: mesh.check_run(cfg, runs[0], got)


@pytest.mark.parametrize("fabric", [_dsm, _pcie, _mesh], ids=["dsm", "pcie", "mesh"])
def test_verilator_and_icarus_count_the_same_cycles(fabric, tmp_path):
    verilog, top, testbench, plan, check = fabric()
    counters = {}
    for sim in ("verilator", "icarus"):
        got = run_cocotb(verilog, top, testbench, sim=sim, plan=plan, test_dir=tmp_path / sim)
        check(got["runs"][0])
        counters[sim] = got["runs"][0]["counters"]
    differ = {k: (v, counters["icarus"].get(k)) for k, v in counters["verilator"].items()
              if counters["icarus"].get(k) != v}
    assert counters["verilator"]["cycles"] > 0
    assert not differ, f"verilator vs icarus: {differ}"
