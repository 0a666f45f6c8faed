"""Simulation speed: cycles per second of a fabric's top under each simulator.

    python -m sim.bench [FABRIC...] [--megacycles N] [--report-times]   (``make bench``)

One workload per top, the same register writes and start pulses for every
simulator, long enough that start-up does not count: a million cycles or
more of the top's main clock by default (:data:`DEFAULT_MEGACYCLES`; the
1,024-minion mesh, at about 300 cycles per second here, takes about an hour
per simulator):

- ``dsm``: the GPC with a 16-SM cluster (seed 000's largest), every SM
  putting 96 KiB by TMA into the next SM's shared memory (a ring), with
  the memory fill and the data check of every run; the run is repeated.
- ``mesh``: the whole ET-SoC-1 mesh, 32 shires of 32 minions (1,024), every
  minion streaming 1 KB messages to the same minion of the next shire ID
  (seed 002's chip ring), filled and checksummed; repeated.
- ``pcie``: the eight-GPU PCIe machine, four disjoint peer-copy pairs pushing
  ``--megacycles`` x 25 MB each (seed 001's Gen4 x16 links move about 25 B per
  1 GHz cycle).

A repeated workload is first run once on the bare harness; the number of
repetitions that reaches ``--megacycles`` is then fixed for every simulator.

Each workload runs

- ``verilator-bare``: a C++ main of our own around the Verilated top, no
  Python and no VPI, the upper limit on this machine;
- ``verilator-cocotb``: the project's own path (``sim.runner.run_cocotb``
  and the fabric's cocotb testbench);
- ``icarus-cocotb``: the same under Icarus, when ``iverilog`` is on PATH
  (listed under ``skipped`` when it is not);
- ``amaranth-pysim``: Amaranth's Python simulator on the same design, for the
  first ``--pysim-cycles`` cycles only (it is thousands of times slower), or
  fewer when nine tenths of ``--pysim-timeout`` (elaboration included) have
  passed; listed under ``skipped`` when it simulates no cycle in that time
  or has not stopped by the timeout.

With ``--report-times`` (as ``make bench`` runs it) the bench also times
``make report`` from a cold and then a warm build folder, and with
``FRESH=1`` (:func:`time_report`).

Rows go to ``results/bench.json`` (``{"rows": [{"top", "simulator",
"cycles", "wall_s", "cycles_per_s", "ratio_to_bare", "build_s",
"peak_rss_mib"}], "skipped": [{"top", "simulator", "reason"}], "report":
{"cold_s", "warm_s", "fresh_s", "cold_exit", "warm_exit", "fresh_exit",
"cpus"}}``, ``report`` with
``--report-times`` only), measured in one run; ``cycles`` counts rising edges of
the top's main clock, ``wall_s`` the simulation alone (not the build),
``build_s`` the simulator build's seconds in this run (near 0 when it was
cached), ``peak_rss_mib`` the simulator process's peak resident memory.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["WORKLOADS", "bare_harness", "main", "ops_of_plan", "run_bare", "time_report"]

#: The C++ harness: reads ``W addr value`` (one register write, one cycle),
#: ``S port value`` (hold an input), ``P port`` (pulse an input for one cycle),
#: ``U port port2 max`` (run until either output is high, at most ``max``
#: cycles) and ``I n`` (run ``n`` cycles with the inputs held) from the file
#: named by its first argument, and prints the cycles and wall seconds.
#: PORTS lines are generated per top.
_HARNESS = r"""
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include "Vtop.h"
#include "verilated.h"

static Vtop* top;
static uint64_t cycles = 0;

static void tick() {
%(tick)s
    ++cycles;
}

static void set_input(const std::string& name, uint64_t value) {
%(inputs)s
    std::fprintf(stderr, "unknown input %%s\n", name.c_str());
    std::exit(2);
}

static bool output_high(const std::string& name) {
%(outputs)s
    std::fprintf(stderr, "unknown output %%s\n", name.c_str());
    std::exit(2);
}

int main(int argc, char** argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %%s OPS\n", argv[0]); return 2; }
    Verilated::commandArgs(argc, argv);
    top = new Vtop;
%(reset_on)s
    for (int i = 0; i < 4; ++i) tick();
%(reset_off)s
    tick();  // the tops' resets pass a flip-flop: this edge still resets them
    std::ifstream in(argv[1]);
    auto t0 = std::chrono::steady_clock::now();
    std::string op;
    while (in >> op) {
        if (op == "W") {
            uint64_t addr, value;
            in >> addr >> value;
            top->cfg_addr = addr; top->cfg_data = value; top->cfg_we = 1;
            tick();
            top->cfg_we = 0;
        } else if (op == "S") {
            std::string name; uint64_t value;
            in >> name >> value;
            set_input(name, value);
        } else if (op == "P") {
            std::string name;
            in >> name;
            set_input(name, 1); tick(); set_input(name, 0);
        } else if (op == "U") {
            std::string a, b; uint64_t most;
            in >> a >> b >> most;
            uint64_t start = cycles;
            tick();
            while (!output_high(a) && !output_high(b) && cycles - start < most) tick();
            std::printf("wait %%s %%llu\n", output_high(a) ? a.c_str()
                        : output_high(b) ? b.c_str() : "timeout",
                        (unsigned long long)(cycles - start));
        } else if (op == "I") {
            uint64_t n;
            in >> n;
            for (uint64_t i = 0; i < n; ++i) tick();
        } else {
            std::fprintf(stderr, "unknown op %%s\n", op.c_str());
            return 2;
        }
    }
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("cycles %%llu wall_s %%.6f\n", (unsigned long long)cycles, wall);
    top->final();
    delete top;
    return 0;
}
"""


def _port_switch(names, body):
    return "\n".join(f'    if (name == "{n}") {{ {body.format(n=n)} }}' for n in names)


def bare_harness(verilog, toplevel, inputs, outputs, clocks, build_dir):
    """Build the C++ harness of ``toplevel`` (Verilog file ``verilog``) in
    ``build_dir/bare`` (``bare`` + :data:`sim.runner.HIER_BUILD_TAG` when
    hierarchical) with the project's Verilator and the same optimisation
    as the cocotb path; returns ``(binary, build seconds)``.

    ``inputs`` and ``outputs`` are the port names the ops may name;
    ``clocks`` is ``[(clock port, reset port, period ps)]``, the first the main
    clock whose rising edges are counted (edges of all clocks are
    interleaved in time).

    Raises
    ------
    RuntimeError
        If Verilator or the C++ build fails (the message ends with its log).
    """
    from sim.runner import (HIER_BUILD_TAG, VERILATOR_SPEED, VERILATOR_WAIVERS,
                            _verilator_make_overrides, hierarchical)
    from sim.toolchain import verilator_env

    hier = hierarchical(verilog)
    out = Path(build_dir) / ("bare" + (HIER_BUILD_TAG if hier else ""))
    out.mkdir(parents=True, exist_ok=True)
    if len(clocks) == 1:
        clk = clocks[0][0]
        tick = f"    top->{clk} = 0; top->eval(); top->{clk} = 1; top->eval();"
    else:
        # Edges of every clock in time order; a cycle ends at the main clock's rise.
        lines = ["    static uint64_t now = 0;",
                 "    static uint64_t next[%d] = {%s};" % (
                     len(clocks), ", ".join(str(p // 2) for _, _, p in clocks)),
                 "    for (;;) {",
                 "        uint64_t t = next[0];"]
        lines += [f"        if (next[{i}] < t) t = next[{i}];" for i in range(1, len(clocks))]
        lines.append("        now = t; bool main_rose = false;")
        for i, (clk, _, period) in enumerate(clocks):
            lines += [f"        if (next[{i}] == t) {{ top->{clk} = !top->{clk}; "
                      f"next[{i}] += {period // 2};"
                      + (f" if (top->{clk}) main_rose = true;" if i == 0 else "") + " }"]
        lines += ["        top->eval();", "        if (main_rose) break;", "    }"]
        tick = "\n".join(lines)
    source = _HARNESS % {
        "tick": tick,
        "inputs": _port_switch(inputs, "top->{n} = value; return;"),
        "outputs": _port_switch(outputs, "return top->{n};"),
        "reset_on": "\n".join(f"    top->{rst} = 1;" for _, rst, _ in clocks),
        "reset_off": "\n".join(f"    top->{rst} = 0;" for _, rst, _ in clocks),
    }
    main_cpp = out / "bench_main.cpp"
    if not main_cpp.is_file() or main_cpp.read_text() != source:
        main_cpp.write_text(source)
    env = dict(os.environ, **verilator_env(), MAKEFLAGS=_verilator_make_overrides())
    command = ["verilator", "--cc", "--exe", "--build", "-j", str(os.cpu_count() or 1),
               "--top-module", toplevel, "--prefix", "Vtop", "-Mdir", str(out / "obj"),
               "-o", "bench", *VERILATOR_WAIVERS, *VERILATOR_SPEED,
               *(["--hierarchical"] if hier else []),
               str(verilog), str(main_cpp)]
    t0 = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - t0
    (out / "build.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"bare Verilator build of {verilog} failed; last lines:\n{tail}")
    return out / "obj" / "bench", seconds


def run_bare(binary, ops, work_dir):
    """Run the harness on ``ops`` (lines, see ``_HARNESS``) in a process of its
    own (call it from a fresh process for the peak memory to be the harness's); returns
    ``(cycles, wall seconds, peak RSS MiB, waits)``, ``waits`` being
    ``[(output that rose or "timeout", cycles)]``.

    Raises
    ------
    RuntimeError
        If the harness exits non-zero.
    """
    path = Path(work_dir) / "bare_ops.txt"
    path.write_text("\n".join(ops) + "\n")
    process = subprocess.Popen([str(binary), str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"bare harness {binary} exited {process.returncode}: {stderr.strip()}")
    waits, cycles, wall = [], None, None
    for line in stdout.splitlines():
        parts = line.split()
        if parts[0] == "wait":
            waits.append((parts[1], int(parts[2])))
        elif parts[0] == "cycles":
            cycles, wall = int(parts[1]), float(parts[3])
    return cycles, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, waits


def ops_of_plan(plan, stages, settle_cycles=0, quiet_cycles=0):
    """Harness ops of a cocotb plan: per run its register writes, then
    ``stages`` (``[(pulse port, wait output, other output or None, plan key of
    the most cycles)]``), then ``settle_cycles`` idle cycles; after the last
    run ``quiet_cycles`` idle cycles more.  The idle cycles are those the
    testbench clocks after a run to check the fabric at rest (the PCIe
    testbench's ``SETTLE_CYCLES`` and ``QUIET_CYCLES``), so that both paths
    simulate the same cycles."""
    ops = []
    for run in plan["runs"]:
        if "plane_enable" in run:
            ops.append(f"S plane_enable {run['plane_enable']}")
        ops += [f"W {addr} {value & 0xFFFFFFFF}" for addr, value in run["writes"]]
        for pulse, wait, other, most in stages:
            ops += [f"P {pulse}", f"U {wait} {other or wait} {plan[most]}"]
        if settle_cycles:
            ops.append(f"I {settle_cycles}")
    if quiet_cycles and plan["runs"]:
        ops.append(f"I {quiet_cycles}")
    return ops


def _ops(work):
    """Harness ops of workload ``work``."""
    return ops_of_plan(work["plan"], work["stages"], work.get("settle_cycles", 0),
                       work.get("quiet_cycles", 0))


# --- workloads ----------------------------------------------------------------------

def _pcie_workload(megacycles):
    from hdl.pcie.config import PcieConfig
    from hdl.pcie.system import PcieSystem
    from sim.experiments import pcie
    from testbenches.pcie import QUIET_CYCLES, SETTLE_CYCLES

    cfg = PcieConfig()
    nbytes = int(megacycles * 25e6) // 4096 * 4096
    run = pcie.copy_run(cfg, "bench: four disjoint peer-copy pairs",
                        [(0, 1), (2, 3), (4, 5), (6, 7)], nbytes, cfg.max_payload_bytes)
    return {"top": "pcie_system (8 GPUs)", "fabric": "pcie", "component": PcieSystem,
            "config": cfg, "toplevel": "pcie_system", "testbench": "testbenches.pcie",
            "plan": pcie.plan(cfg, [run]),
            "stages": [("ctl_start", "done", "stuck", "run_cycles")],
            "settle_cycles": SETTLE_CYCLES, "quiet_cycles": QUIET_CYCLES,
            "inputs": ["ctl_start"], "outputs": ["done", "stuck"],
            "clocks": [("clk", "rst", 1000)]}


#: Stages of a top that fills its memories, runs and checks the data (the
#: DSM's and the mesh's testbenches do the same).
_FILL_RUN_CHECK = [("ctl_init", "init_done", None, "init_cycles"),
                   ("ctl_start", "done", "stuck", "run_cycles"),
                   ("ctl_verify", "verify_done", None, "init_cycles")]
_FILL_RUN_CHECK_INPUTS = ["ctl_init", "ctl_start", "ctl_verify"]
_FILL_RUN_CHECK_OUTPUTS = ["init_done", "done", "stuck", "verify_done"]


def _dsm_workload(megacycles):
    import dataclasses

    from hdl.hopper.config import DsmConfig
    from hdl.hopper.gpc import Gpc
    from sim.experiments import dsm
    from testbenches.common import CLOCK_PERIOD_NS

    cfg = dataclasses.replace(DsmConfig(), cluster_size=16)
    ring = [dsm.Stream("tma", r, (r + 1) % 16, 96 * 1024) for r in range(16)]
    run = dsm.build_run(cfg, ring, "bench: 16-SM TMA ring, 96 KiB each")
    return {"top": "dsm_gpc (16-SM cluster)", "fabric": "dsm", "component": Gpc,
            "config": cfg, "toplevel": "dsm_gpc", "testbench": "testbenches.dsm",
            "plan": dsm.plan(cfg, [run]), "repeat": True,
            "stages": _FILL_RUN_CHECK,
            "inputs": [*_FILL_RUN_CHECK_INPUTS, "plane_enable"], "outputs": _FILL_RUN_CHECK_OUTPUTS,
            # the testbench's clock period: cocotb's simulated time counts cycles
            "clocks": [("clk", "rst", CLOCK_PERIOD_NS * 1000)]}


def _mesh_workload(megacycles):
    from hdl.etsoc.config import MeshConfig
    from hdl.etsoc.mesh import EtSocMesh
    from sim.experiments import mesh

    cfg = MeshConfig()
    n = cfg.compute_shires
    pairs = tuple((cfg.minion_id(s, k), cfg.minion_id((s + 1) % n, k))
                  for s in range(n) for k in range(cfg.minions_per_shire))
    run = mesh.build_run(cfg, "bench: every minion to shire s + 1, three 1 KB messages",
                         mesh.Flows(pairs, nregs=mesh.RING_MESSAGE_REGISTERS, exchanges=3))
    plan = mesh.plan(cfg, [run])
    # 32 streams share each shire's one mesh port: allow far longer than a
    # single stream's bound before calling the run timed out.
    plan["run_cycles"] *= 10
    return {"top": "etsoc_mesh (1,024 minions)", "fabric": "mesh", "component": EtSocMesh,
            "config": cfg, "toplevel": "etsoc_mesh", "testbench": "testbenches.mesh",
            "plan": plan, "repeat": True,
            "stages": _FILL_RUN_CHECK,
            "inputs": _FILL_RUN_CHECK_INPUTS, "outputs": _FILL_RUN_CHECK_OUTPUTS,
            "clocks": [("clk", "rst", plan["clock_ps"]["clk"]),
                       ("mesh_clk", "mesh_rst", plan["clock_ps"]["mesh_clk"])]}


#: Fabric name -> function of ``megacycles`` giving the workload.
WORKLOADS = {"dsm": _dsm_workload, "mesh": _mesh_workload, "pcie": _pcie_workload}

#: Default workload length, millions of main-clock cycles: a million, the
#: length the cocotb-to-bare ratio is judged at.  The 1,024-minion mesh
#: simulates at about 300 minion cycles per second here (1,011,410 cycles in
#: 3,480 s on the bare harness), so its million cycles take about an hour
#: per simulator (``--megacycles 0.04`` gives two of its runs, about 4
#: minutes per simulator).
DEFAULT_MEGACYCLES = {"dsm": 1.0, "mesh": 1.0, "pcie": 1.0}


def _measure_cocotb(work, verilog, sim, test_dir):
    """``(cycles, wall seconds, peak RSS MiB)`` of the plan under cocotb; the
    simulator is built first, so neither number includes the build."""
    from sim.runner import run_cocotb

    t0 = time.monotonic()
    got = run_cocotb(verilog, work["toplevel"], work["testbench"], sim=sim,
                     plan=work["plan"], test_dir=test_dir)
    wall = time.monotonic() - t0
    for run in got["runs"]:
        if run["ended"] != "done":
            raise RuntimeError(f"{sim}: the bench run ended {run['ended']}")
    log = (Path(test_dir) / "sim.log").read_text()
    sim_ns, real_s = _sim_log_times(log)
    period_ns = work["clocks"][0][2] / 1000
    return int(sim_ns / period_ns), real_s or wall, \
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _sim_log_times(log):
    """``(simulated ns, real seconds)`` from cocotb's summary line."""
    for line in log.splitlines():
        if "TESTS=" in line:
            numbers = line.replace("*", " ").split()
            return float(numbers[-3]), float(numbers[-2])
    raise RuntimeError("cocotb's log has no summary line")


def _in_child(function, *args, timeout=None):
    """Run ``function(*args)`` in a fresh process, so its peak memory is its own.

    Raises
    ------
    multiprocessing.TimeoutError
        After ``timeout`` seconds (the process is then killed).
    """
    with multiprocessing.get_context("spawn").Pool(1) as one:
        return one.apply_async(function, args).get(timeout)


def _measure_pysim(work, cycles, seconds=math.inf):
    """``(cycles, wall seconds, peak RSS MiB)`` of the workload's first
    ``cycles`` cycles under Amaranth's Python simulator, or of as many as it
    simulated before ``seconds`` had passed since the call (elaboration
    included); the wall seconds are the simulation's alone."""
    from amaranth.sim import Simulator

    deadline = time.monotonic() + seconds
    dut = work["component"](work["config"].hardware())
    ops = _ops(work)
    count = [0]

    def more():
        return count[0] < cycles and time.monotonic() < deadline

    async def bench(ctx):
        for op in ops:
            parts = op.split()
            if not more():
                return
            if parts[0] == "S":
                ctx.set(getattr(dut, parts[1]), int(parts[2]))
            elif parts[0] == "W":
                ctx.set(dut.cfg_addr, int(parts[1]))
                ctx.set(dut.cfg_data, int(parts[2]))
                ctx.set(dut.cfg_we, 1)
                await ctx.tick()
                ctx.set(dut.cfg_we, 0)
                count[0] += 1
            elif parts[0] == "P":
                ctx.set(getattr(dut, parts[1]), 1)
                await ctx.tick()
                ctx.set(getattr(dut, parts[1]), 0)
                count[0] += 1
            elif parts[0] == "U":
                while more() and not ctx.get(getattr(dut, parts[1])):
                    await ctx.tick()
                    count[0] += 1
            elif parts[0] == "I":
                for _ in range(int(parts[1])):
                    if not more():
                        return
                    await ctx.tick()
                    count[0] += 1

    sim = Simulator(dut)
    sim.add_clock(work["clocks"][0][2] * 1e-12)
    for name, _, period_ps in work["clocks"][1:]:
        # Another clock is an input port of the top (the mesh's 400 MHz).
        async def toggle(ctx, port=getattr(dut, name), half=period_ps * 1e-12 / 2):
            while True:
                await ctx.delay(half)
                ctx.set(port, 1)
                await ctx.delay(half)
                ctx.set(port, 0)
        sim.add_process(toggle)
    sim.add_testbench(bench)
    t0 = time.monotonic()
    sim.run()
    return count[0], time.monotonic() - t0, \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: Share of ``--pysim-timeout`` after which Amaranth's simulator stops and
#: reports the cycles it simulated (the rest is margin for the last cycle
#: and the process's exit).  On the 1,024-minion mesh it elaborated for
#: 470 s, or more than 540 s beside other work, in 4.0 GiB, and then
#: simulated 0.9 cycles per second.
PYSIM_BUDGET = 0.9


def bench_fabric(fabric, megacycles, pysim_cycles, build_root, log=print, pysim_timeout=900):
    """``(rows, skipped)`` of one fabric's top (see the module docstring);
    ``skipped`` lists ``{"top", "simulator", "reason"}`` of a simulator that
    measured nothing: Amaranth's simulator when it simulated no cycle in
    :data:`PYSIM_BUDGET` of ``pysim_timeout`` seconds (elaboration took them)
    or was still running at ``pysim_timeout``.

    Raises
    ------
    RuntimeError
        If a build fails, or the workload does not finish on some simulator.
    """
    from sim.build import generate_verilog
    from sim.runner import run_cocotb
    from sim.toolchain import available_simulators

    work = WORKLOADS[fabric](megacycles)
    t0 = time.monotonic()
    verilog = generate_verilog(work["component"], work["config"].hardware(), work["toplevel"],
                               build_root=build_root)
    generate_s = time.monotonic() - t0
    log(f"{fabric}: Verilog {verilog} ({generate_s:.0f} s)")
    run_root = Path(build_root) / "runs" / "bench" / fabric
    run_root.mkdir(parents=True, exist_ok=True)
    rows = []
    binary, build_s = bare_harness(verilog, work["toplevel"], work["inputs"], work["outputs"],
                                   work["clocks"], verilog.parent)
    log(f"{fabric}: bare harness built ({build_s:.0f} s); running")
    def bare():
        got = _in_child(run_bare, binary, _ops(work), run_root)
        if any(w in ("stuck", "timeout") for w, _ in got[3]):
            raise RuntimeError(f"{fabric}: the bench run ended {got[3]} on the bare harness")
        return got[:3]

    cycles, wall, rss = bare()
    if work.get("repeat"):
        # That was one run; repeat it to reach the workload's length.
        repeats = max(1, math.ceil(megacycles * 1e6 / cycles))
        log(f"{fabric}: one run is {cycles:,} cycles; {repeats} runs")
        if repeats > 1:
            work["plan"] = dict(work["plan"], runs=work["plan"]["runs"] * repeats)
            cycles, wall, rss = bare()
    rows.append(_row(work["top"], "verilator-bare", cycles, wall, build_s, rss))
    log(f"{fabric}: verilator-bare {cycles} cycles in {wall:.1f} s")
    skipped = []
    simulators = available_simulators()
    if "icarus" not in simulators:
        skipped.append({"top": work["top"], "simulator": "icarus-cocotb",
                        "reason": "iverilog is not on PATH"})
        log(f"{fabric}: icarus-cocotb skipped, iverilog is not on PATH")
    for sim in [s for s in ("verilator", "icarus") if s in simulators]:
        # Build (or find built) first, with an empty plan, so the timing is the run's.
        t0 = time.monotonic()
        run_cocotb(verilog, work["toplevel"], work["testbench"], sim=sim,
                   plan=dict(work["plan"], runs=[]), test_dir=run_root / f"{sim}-build")
        build_s = time.monotonic() - t0
        cycles, wall, rss = _in_child(_measure_cocotb, work, verilog, sim, run_root / sim)
        bare_cycles = rows[0]["cycles"]
        if abs(cycles - bare_cycles) > max(1000, bare_cycles // 100):
            raise RuntimeError(f"{fabric}: {sim}-cocotb counted {cycles:,} cycles, the bare "
                               f"harness {bare_cycles:,}: the workload's clock period is not "
                               f"the testbench's")
        rows.append(_row(work["top"], f"{sim}-cocotb", cycles, wall, build_s, rss))
        log(f"{fabric}: {sim}-cocotb {cycles} cycles in {wall:.1f} s")
    try:
        cycles, wall, rss = _in_child(_measure_pysim, work, pysim_cycles,
                                      PYSIM_BUDGET * pysim_timeout, timeout=pysim_timeout)
        if cycles:
            rows.append(_row(work["top"], "amaranth-pysim", cycles, wall, 0.0, rss))
            log(f"{fabric}: amaranth-pysim {cycles} cycles in {wall:.1f} s"
                + (f" ({pysim_cycles} asked; stopped at {PYSIM_BUDGET:g} of "
                   f"--pysim-timeout)" if cycles < pysim_cycles else ""))
        else:
            reason = (f"no cycle simulated in {PYSIM_BUDGET * pysim_timeout:g} s: elaboration "
                      f"took them (peak memory {rss:,.0f} MiB)")
            skipped.append({"top": work["top"], "simulator": "amaranth-pysim",
                            "reason": reason})
            log(f"{fabric}: amaranth-pysim {reason}")
    except multiprocessing.TimeoutError:
        reason = (f"not finished in {pysim_timeout:g} s (elaboration included), "
                  f"{pysim_cycles} cycles asked")
        skipped.append({"top": work["top"], "simulator": "amaranth-pysim", "reason": reason})
        log(f"{fabric}: amaranth-pysim {reason}")
    bare = rows[0]["cycles_per_s"]
    for row in rows:
        row["ratio_to_bare"] = row["cycles_per_s"] / bare
    return rows, skipped


def time_report(project, log=print):
    """Wall seconds of ``make report`` in ``project`` (the folder holding the
    Makefile) from an empty build folder (``cold``), then again with the
    build folder it left (``warm``: Verilog, simulator builds, simulation
    results and passed proofs all reused), then with ``FRESH=1`` (``fresh``:
    the builds reused, every run simulated and every proof run again, what a
    change to the testbench costs at most): ``{"cold_s", "warm_s",
    "fresh_s", "cold_exit", "warm_exit", "fresh_exit", "cpus"}``.

    The three runs write to one temporary build and results folder, so the
    project's own are untouched.  ``ccache`` is switched off, so a cold build
    compiles everything.

    Raises
    ------
    FileNotFoundError
        If ``project`` has no Makefile.
    """
    import tempfile

    if not (Path(project) / "Makefile").is_file():
        raise FileNotFoundError(f"{project} has no Makefile; run the bench from the project folder")
    out = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="fabricsim-report-") as tmp:
        for kind in ("cold", "warm", "fresh"):
            log(f"make report, {kind} ({tmp}/build)")
            t0 = time.monotonic()
            done = subprocess.run(["make", "-s", "report", f"BUILD={tmp}/build",
                                   f"RESULTS={tmp}/results",
                                   *(["FRESH=1"] if kind == "fresh" else [])], cwd=project,
                                  env=dict(os.environ, OBJCACHE=""), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, check=False)
            out[f"{kind}_s"] = time.monotonic() - t0
            out[f"{kind}_exit"] = done.returncode
            log(f"make report, {kind}: {out[f'{kind}_s']:.0f} s, exit {done.returncode}")
    return out


def _row(top, simulator, cycles, wall, build_s, rss):
    return {"top": top, "simulator": simulator, "cycles": cycles, "wall_s": wall,
            "cycles_per_s": cycles / wall if wall else 0.0, "ratio_to_bare": None,
            "build_s": build_s, "peak_rss_mib": rss}


def main(argv=None):
    """``python -m sim.bench``; returns the exit status (2 on bad input).

    Raises
    ------
    RuntimeError
        If a simulator build or a simulation fails (the message ends with
        its log's last lines).
    """
    from rich.table import Table

    from sim.cli import OneLineParser, UsageError, _writable_folders, folder_option, \
        wide_console, write_json_atomically

    parser = OneLineParser(prog="python -m sim.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("fabrics", nargs="*", metavar="FABRIC", default=list(WORKLOADS),
                        help=f"the tops to bench, of {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--megacycles", type=float, default=None,
                        help="length of each workload, millions of main-clock cycles (default: 1)")
    parser.add_argument("--pysim-cycles", type=int, default=2000,
                        help="cycles run under Amaranth's Python simulator (fewer if "
                             "its time runs out; default: %(default)s)")
    parser.add_argument("--pysim-timeout", type=float, default=900,
                        help="seconds Amaranth's simulator may take, elaboration included; "
                             f"it stops simulating at {PYSIM_BUDGET * 100:.0f}%% of them "
                             "(default: %(default)g)")
    parser.add_argument("--report-times", action="store_true",
                        help="also time `make report` from a cold and a warm build cache")
    parser.add_argument("--results", type=folder_option, default="results",
                        help="folder of bench.json (default: %(default)s)")
    parser.add_argument("--build", type=folder_option, default="build",
                        help="build folder, Verilog and simulators reused from it "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    args.fabrics = list(dict.fromkeys(args.fabrics))
    for fabric in args.fabrics:
        if fabric not in WORKLOADS:
            return parser.refuse(f"FABRIC must be one of {', '.join(WORKLOADS)}, "
                                 f"not {fabric!r}")
    for bad, message in ((args.megacycles is not None and not 0 < args.megacycles <= 100,
                          f"--megacycles must be above 0 and at most 100, not {args.megacycles}"),
                         (args.pysim_cycles < 1,
                          f"--pysim-cycles must be at least 1, not {args.pysim_cycles}"),
                         (not args.pysim_timeout > 0,
                          f"--pysim-timeout must be a positive number of seconds, "
                          f"not {args.pysim_timeout}")):
        if bad:
            return parser.refuse(message)
    try:
        # Checked before the benchmarks, whose rows would otherwise be lost.
        _writable_folders((Path(args.build), "--build"), (Path(args.results), "--results"))
    except UsageError as error:
        return parser.refuse(error)
    console = wide_console(stderr=True, log_path=False)
    rows, skipped = [], []
    for fabric in args.fabrics:
        got, missed = bench_fabric(fabric, args.megacycles or DEFAULT_MEGACYCLES[fabric],
                                   args.pysim_cycles, Path(args.build).resolve(),
                                   log=console.log, pysim_timeout=args.pysim_timeout)
        rows += got
        skipped += missed
    bench = {"rows": rows, "skipped": skipped}
    if args.report_times:
        bench["report"] = time_report(Path.cwd(), log=console.log)
    out = Path(args.results) / "bench.json"
    write_json_atomically(out, bench)
    table = Table(title="simulated cycles per second")
    for col in ("top", "simulator", "cycles", "wall s", "cycles/s", "ratio to bare",
                "build s", "peak RSS MiB"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["top"], r["simulator"], f"{r['cycles']:,}", f"{r['wall_s']:.2f}",
                      f"{r['cycles_per_s']:,.0f}", f"{r['ratio_to_bare']:.3f}",
                      f"{r['build_s']:.0f}", f"{r['peak_rss_mib']:.0f}")
    wide_console().print(table)
    if "report" in bench:
        r = bench["report"]
        print(f"make report on {r['cpus']} CPUs: {r['cold_s'] / 60:.1f} min from an empty "
              f"build folder (exit {r['cold_exit']}), {r['warm_s'] / 60:.1f} min again "
              f"(exit {r['warm_exit']}), {r['fresh_s'] / 60:.1f} min with FRESH=1 "
              f"(exit {r['fresh_exit']})")
    print(f"bench: {out}")
    return 0


if __name__ == "__main__":
    from sim.cli import exit_status
    sys.exit(exit_status(main, "python -m sim.bench"))
