"""cocotb testbench of the Hopper GPC DSM fabric (top level ``dsm_gpc``).

For every run of the plan: write the SM registers, fill the shared memories,
start, wait for the cluster barrier's ``done`` (or the watchdog's ``stuck``),
read every counter, then check the received data and read the SMs'
request, acknowledgement and arrival counters again.  The elapsed cycles
come from the RTL's own cycle counter; the run's ``clock_cycles``, counted
from the simulator's time, checks it.  The runs stop after one that ends stuck
or with the sticky ``overflow`` flag set.
"""

import cocotb

from testbenches.common import (RegisterTB, counter_deltas, load_plan, spoils_later_runs,
                                 write_result)

#: Counters that only grow from the run's ``ctl_init``, which clears them; read
#: before and after the timed region, a run reports their increase.
_CUMULATIVE = (".flits", ".stalls", "inj_flits", "inj_stalls", "tx_flits")

#: Counters read again after the data check: each SM's open reads, stores
#: not yet acknowledged, ACKs owed and framing check must be 0, its received
#: granules must not have grown since ``done``, every credit must be home, and the flits
#: counted since reset (the run's ``ctl_init``) must agree from stage to stage.
_SETTLED = (".outstanding_reads", ".unacked_flits", ".owed_acks", ".rx_granules", ".frames",
            "credits_away", ".flits", ".inj_flits", ".tx_flits")


@cocotb.test()
async def run_plan(dut):
    """Drive every run of the plan and record the counters of each.

    Raises
    ------
    RuntimeError
        If a run's memory fill or data check does not finish within the
        plan's ``init_cycles``.
    """
    plan = load_plan()
    tb = RegisterTB(dut, plan["counter_names"])
    await tb.start()
    results = []
    for index, run in enumerate(plan["runs"]):
        dut.plane_enable.value = run["plane_enable"]
        await tb.write(run["writes"])
        await tb.pulse("ctl_init")
        if await tb.wait_for("init_done", plan["init_cycles"]) is None:
            raise RuntimeError(f"run {index} ({run['label']}): memory fill did not finish")
        before = await tb.read_counters()
        ended, clock_cycles = await tb.run(plan["run_cycles"])
        after = await tb.read_counters()
        entry = {"label": run["label"], "ended": ended or "timeout", "clock_cycles": clock_cycles,
                 "counters": counter_deltas(before, after, _CUMULATIVE)}
        if ended == "done":
            await tb.pulse("ctl_verify")
            if await tb.wait_for("verify_done", plan["init_cycles"]) is None:
                raise RuntimeError(f"run {index} ({run['label']}): data check did not finish")
            checked = await tb.read_counters()
            entry["errors"] = {k: v for k, v in checked.items()
                               if k.endswith((".errors", ".first_bad"))}
            # after the check pass, thousands of cycles on: every ACK and
            # read answer has landed, and nothing more has arrived
            entry["settled"] = {k: v for k, v in checked.items() if k.endswith(_SETTLED)}
            entry["checks"] = run.get("checks", {})
        results.append(entry)
        dut._log.info("run %d/%d %s: %s after %d cycles", index + 1, len(plan["runs"]),
                      run["label"], entry["ended"], after["cycles"])
        if spoils_later_runs(ended, entry["counters"]):
            break
    write_result({"runs": results})
