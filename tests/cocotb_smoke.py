"""cocotb testbench for the counter design in ``test_infra.py``.

It exercises the plan/result contract of :func:`sim.runner.run_cocotb`: the
plan gives the clock period and a watchdog (and may hold the counter off,
withhold the result, for the error-path tests, or name a signal whose
visibility the result reports); the result reports the
counter's value when ``done`` rose and the cycles that took, measured by
simulation time. Python is woken only at reset, at enable and at ``done``,
never per cycle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, First, RisingEdge, Timer


@cocotb.test()
async def count_to_limit(dut):
    """Enable the counter and time how long it takes to raise ``done``."""
    plan = json.loads(Path(os.environ["FABRICSIM_PLAN"]).read_text())
    period_ns = plan["clock_ns"]
    Clock(dut.clk, period_ns, unit="ns").start()

    dut.en.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    # A plan may hold the counter off, to exercise watchdogs and timeouts.
    dut.en.value = 1 if plan.get("enable", True) else 0
    start_ns = get_sim_time(unit="ns")

    watchdog = Timer(plan["watchdog_cycles"] * period_ns, unit="ns")
    fired = await First(RisingEdge(dut.done), watchdog)
    assert fired is not watchdog, f"done did not rise within {plan['watchdog_cycles']} cycles"

    elapsed_ns = get_sim_time(unit="ns") - start_ns
    result = {
        "count": dut.count.value.to_unsigned(),
        "cycles": round(elapsed_ns / period_ns),
    }
    # A plan may name a signal to look for, to test what the build exposes.
    if "probe" in plan:
        try:
            dut[plan["probe"]]
            result["probe_visible"] = True
        except KeyError:
            result["probe_visible"] = False
    if plan.get("write_result", True):
        Path(os.environ["FABRICSIM_RESULT"]).write_text(json.dumps(result))
