"""cocotb testbench of the ET-SoC-1 mesh (top level ``etsoc_mesh``).

Drives the minion clock (600 MHz) and the mesh clock (400 MHz) from cocotb,
with the periods the plan gives (``minion_mhz``, ``mesh_mhz``), rounded to
the simulator's 1 ps.  1/600 MHz rounds to 1.667 ns: the two clocks then
slide 1 ps past each other every 5 ns, sweeping their phase as independent
clocks do.  Cycle counts are
minion cycles from the RTL's counters; nanoseconds use the nominal 600 MHz.

For every run of the plan: write the engines' registers, fill the register
files, start, wait for ``done`` (or the watchdog's ``stuck``), read the
counters the run names (and, if any router's route check flagged a flit,
every router's ``misrouted``), then checksum the register files and read
those, and every sender's ``credits_away`` and the mesh stops'
``stops_busy`` (the run's ``settled``: all must be 0 once the mesh is at
rest, so they are read until they are, for at most the plan's
``settle_cycles``, :func:`sim.experiments.mesh.settle_cycles`; the last ACKs
of a large mesh, or of a slow mesh clock, may still be on their way when
the checksum ends).  The runs stop after one that ends stuck, with the
sticky ``overflow`` or ``misrouted`` flag set, or with anything of
``settled`` left non-zero.
"""

import cocotb

from testbenches.common import RegisterTB, load_plan, spoils_later_runs, write_result

MINION_PERIOD_PS = 1667
MESH_PERIOD_PS = 2500


@cocotb.test()
async def run_plan(dut):
    """Drive every run of the plan and record the counters each names.

    Raises
    ------
    RuntimeError
        If a run's register fill or checksum does not finish within the
        plan's ``init_cycles``.
    """
    plan = load_plan()
    clocks = plan.get("clock_ps", {"clk": MINION_PERIOD_PS, "mesh_clk": MESH_PERIOD_PS})
    tb = RegisterTB(dut, plan["counter_names"],
                    clocks=(("clk", clocks["clk"]), ("mesh_clk", clocks["mesh_clk"])))
    await tb.start()
    away = [n for n in plan["counter_names"] if n.endswith("credits_away") or n == "stops_busy"]
    misrouted = [n for n in plan["counter_names"] if n.endswith(".misrouted")]
    results = []
    for index, run in enumerate(plan["runs"]):
        await tb.write(run["writes"])
        await tb.pulse("ctl_init")
        if await tb.wait_for("init_done", plan["init_cycles"]) is None:
            raise RuntimeError(f"run {index} ({run['label']}): register fill did not finish")
        ended, clock_cycles = await tb.run(plan["run_cycles"])
        entry = {"label": run["label"], "ended": ended or "timeout", "clock_cycles": clock_cycles,
                 "counters": await tb.read_counters(["cycles", "stuck", "overflow", "misrouted"]
                                                    + run["read"])}
        if entry["counters"]["misrouted"]:
            entry["counters"].update(await tb.read_counters(misrouted))
        if ended == "done":
            await tb.pulse("ctl_verify")
            if await tb.wait_for("verify_done", plan["init_cycles"]) is None:
                raise RuntimeError(f"run {index} ({run['label']}): checksum did not finish")
            entry["checksums"] = await tb.read_counters(run["verify"])
            entry["settled"] = await tb.read_until_zero(away, plan["settle_cycles"])
        else:
            entry["counters"].update(await tb.read_counters(run.get("on_stuck", [])))
        results.append(entry)
        # one line per run: fabricsim's progress line counts them
        overflow = entry["counters"]["overflow"]
        dut._log.info("run %d/%d %s: %s%s after %d cycles", index + 1, len(plan["runs"]),
                      run["label"], entry["ended"], ", overflow" if overflow else "",
                      entry["counters"]["cycles"])
        # a sticky misrouted flag would fail every later run too, and a
        # sender short of credits or a stop left busy would fail the next
        # run's fill or timing, not its own check: stop here
        if (spoils_later_runs(ended, entry["counters"]) or entry["counters"]["misrouted"]
                or any(entry.get("settled", {}).values())):
            break
    write_result({"runs": results})
