"""cocotb testbench of the PCIe copy machine (top level ``pcie_system``).

One clock of 1 ns (the model's 1 GHz).  For every run of the plan: write the
GPUs' and the machine's registers, start, wait for ``done`` (or the
watchdog's ``stuck``) and read every counter; the link counters only grow, so
a run reports their increase over the run.  The runs stop after one that
ends stuck or with the sticky ``overflow`` flag set.
"""

import cocotb

from testbenches.common import (RegisterTB, counter_deltas, load_plan, spoils_later_runs,
                                 write_result)

#: Counters that only grow; a run reports their increase over the run.
_CUMULATIVE = (".tlps", ".payload_bytes", ".lane_bytes", ".wire_bytes", ".dllp_beats",
               ".busy", ".host_busy", ".read_wait")


@cocotb.test()
async def run_plan(dut):
    """Drive every run of the plan and record its counters."""
    plan = load_plan()
    tb = RegisterTB(dut, plan["counter_names"], clocks=(("clk", 1000),))
    await tb.start()
    results = []
    for index, run in enumerate(plan["runs"]):
        await tb.write(run["writes"])
        before = await tb.read_counters()
        await tb.pulse("ctl_start")
        ended = await tb.wait_for("done", plan["run_cycles"], "stuck")
        after = await tb.read_counters()
        results.append({"label": run["label"], "ended": ended or "timeout",
                        "counters": counter_deltas(before, after, _CUMULATIVE)})
        dut._log.info("run %d/%d %s: %s after %d cycles", index + 1, len(plan["runs"]),
                      run["label"], results[-1]["ended"], after["cycles"])
        if spoils_later_runs(ended, after):
            break
    write_result({"runs": results})
