"""cocotb testbench of the PCIe copy machine (top level ``pcie_system``).

One clock of 1 ns (the model's 1 GHz).  For every run of the plan: write the
GPUs' and the machine's registers, start, wait for ``done`` (or the
watchdog's ``stuck``) and read every counter.  The start returns the fabric
to its reset state (``ctl_start``, :class:`~hdl.pcie.system.PcieSystem`), so
the link, socket-link and root-port counters read at the end are the run's;
``now`` keeps counting, so a run reports its increase.  From a run's ``done`` until the
next run starts (or :data:`QUIET_CYCLES` after the last), the TLP, byte and
error counters must not move: what did is the run's ``after_done``.
:data:`SETTLE_CYCLES` after ``done`` every sender's ``credits_away``, every
link direction's ``unacked_tlps`` and the socket link's ``read_held`` are read
again (the run's ``settled``): all must be 0, every credit home, every TLP
acknowledged and every peer-to-peer read's tracker room free.  The
runs stop after one that ends stuck or with the sticky ``overflow`` flag set.
"""

import cocotb
from cocotb.triggers import ClockCycles

from testbenches.common import (RegisterTB, counter_deltas, load_plan, spoils_later_runs,
                                 write_result)

#: Counters the start does not clear; a run reports their increase over the run.
_CUMULATIVE = ("now",)


#: Counters that hold still from a run's ``done`` until the next run
#: starts: once every copy is done no TLP moves and no byte lands (flow
#: control DLLPs may).  Watched through the next run's register writes, and
#: for :data:`QUIET_CYCLES` cycles after the last run.
_QUIET = (".tlps", ".payload_bytes", ".rx_bytes", ".tx_bytes", ".errors")

#: Cycles (ns) the last run's quiet counters are watched after its ``done``.
QUIET_CYCLES = 200

#: Cycles (ns) after ``done`` before the credit counters are read: every
#: UpdateFC and Ack DLLP owed has gone by then (one flush sweep of 64 cycles, 32
#: waiting for a header beat, and at most 60 on the wire per link) and every
#: switch's credit returned.
SETTLE_CYCLES = 1000


@cocotb.test()
async def run_plan(dut):
    """Drive every run of the plan and record its counters."""
    plan = load_plan()
    tb = RegisterTB(dut, plan["counter_names"], clocks=(("clk", 1000),))
    at_rest = [n for n in plan["counter_names"]
               if n.endswith((".credits_away", ".unacked_tlps", ".read_held"))]
    await tb.start()
    results, after = [], None
    for index, run in enumerate(plan["runs"]):
        await tb.write(run["writes"])
        before = await tb.read_counters()
        if after is not None:
            results[-1]["after_done"] = moved(after, before)
        ended, clock_cycles = await tb.run(plan["run_cycles"])
        after = await tb.read_counters()
        results.append({"label": run["label"], "ended": ended or "timeout",
                        "clock_cycles": clock_cycles,
                        "counters": counter_deltas(before, after, _CUMULATIVE)})
        if ended == "done":
            await ClockCycles(dut.clk, SETTLE_CYCLES)
            results[-1]["settled"] = await tb.read_counters(at_rest)
        dut._log.info("run %d/%d %s: %s after %d cycles", index + 1, len(plan["runs"]),
                      run["label"], results[-1]["ended"], after["cycles"])
        if spoils_later_runs(ended, after):
            after = None
            break
    if after is not None:
        await ClockCycles(dut.clk, QUIET_CYCLES)
        results[-1]["after_done"] = moved(after, await tb.read_counters())
    write_result({"runs": results})


def moved(after, later):
    """``{counter: change}`` of the :data:`_QUIET` counters that changed
    between a run's ``done`` (``after``) and ``later``; empty when none did."""
    return {k: v - after[k] for k, v in later.items()
            if k.endswith(_QUIET) and v != after[k]}
