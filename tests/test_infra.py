"""Build and run infrastructure: Verilog cache, simulator choice, cocotb runs.

A tiny counter stands in for a fabric, so these tests check the plumbing
(generation, caching, the plan/result contract, error reporting) on every
available simulator in seconds. The tests share one generated design, so
each simulator builds it once (plus once more with tracing).
"""

# No `from __future__ import annotations` here: Amaranth reads a Component's
# ports from its class annotations at run time, and would see strings.
import concurrent.futures
import dataclasses
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sim import build
from sim.build import generate_verilog, locked
from sim.runner import (_top_ports, _top_public_control_file, run_cocotb, run_cocotb_cached,
                        simulation_key)
from sim.toolchain import available_simulators, check_simulator, verilator_env


@dataclasses.dataclass(frozen=True)
class CounterConfig:
    """Configuration of :class:`Counter`.

    Attributes
    ----------
    limit : int
        Count at which ``done`` rises, in enabled clock cycles, 1..255.
    """

    limit: int = 37


class Counter(wiring.Component):
    """8-bit counter that stops and raises ``done`` at a limit.

    Members
    -------
    en : In(1)
        Count on each ``clk`` rising edge while high.
    count : Out(8)
        Enabled cycles counted so far, in clock cycles.
    done : Out(1)
        High once ``count`` equals ``limit``; counting stops there.
    """

    en: In(1)
    count: Out(8)
    done: Out(1)

    def __init__(self, config: CounterConfig):
        if not 1 <= config.limit <= 255:
            raise ValueError(f"limit must be in 1..255, not {config.limit!r}")
        self._limit = config.limit
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        value = Signal(8)
        m.d.comb += [self.count.eq(value), self.done.eq(value == self._limit)]
        with m.If(self.en & ~self.done):
            m.d.sync += value.eq(value + 1)
        return m


LIMIT = 37
PLAN = {"clock_ns": 10, "watchdog_cycles": 1000}
SIMS = available_simulators()


@pytest.fixture(scope="module")
def counter_verilog(tmp_path_factory):
    build_root = tmp_path_factory.mktemp("build")
    return generate_verilog(Counter, CounterConfig(limit=LIMIT), "counter", build_root=build_root)


@pytest.mark.parametrize("sim", SIMS)
def test_counter_runs_and_reports(sim, counter_verilog, tmp_path):
    assert counter_verilog.name == "counter.v"
    assert counter_verilog.parent.name.startswith("counter-")
    result = run_cocotb(counter_verilog, "counter", "cocotb_smoke", sim=sim, plan=PLAN, test_dir=tmp_path)
    assert result == {"count": LIMIT, "cycles": LIMIT}
    assert json.loads((tmp_path / "plan.json").read_text()) == PLAN
    assert (counter_verilog.parent / sim).is_dir()


def _reads_of_rst(text):
    """Lines of a Verilog top that read its ``rst`` port, declarations and
    the module header left out."""
    return [line.strip() for line in text.splitlines()
            if re.search(r"\brst\b", line) and not line.startswith("module ")
            and line.strip() not in ("input rst;", "wire rst;")]


def test_the_top_s_reset_reaches_its_logic_through_one_flip_flop(counter_verilog):
    """Only one flip-flop reads the ``rst`` port (sim.build's ``_convert_top``);
    the counter's next-state logic reads that flip-flop, so Verilator does
    not evaluate it again on every input change.  The counter still counts
    to its limit in as many cycles (test above): the testbench waits one edge
    after releasing ``rst``."""
    from amaranth.back import verilog

    reads = _reads_of_rst(counter_verilog.read_text())
    assert len(reads) == 1 and re.fullmatch(r"\S+ <= rst;", reads[0]), reads
    # wired straight in, as Amaranth's back end does alone, rst is read by the
    # counter's next-state logic
    plain = verilog.convert(Counter(CounterConfig(limit=LIMIT)), name="counter", emit_src=False)
    assert any(r.startswith("if (rst)") for r in _reads_of_rst(plain)), _reads_of_rst(plain)


def test_verilator_makes_only_the_top_module_s_ports_public(counter_verilog, tmp_path):
    """The control file given to Verilator names each port of the top module
    and nothing else: the counter's own net ``value`` is out of the
    testbench's reach unless ``internal_signals`` is set.  A header that
    cannot be read (a module whose name only starts with the top's, an ANSI
    port list) falls back to every signal of the top module."""
    control = _top_public_control_file(tmp_path, counter_verilog, "counter").read_text()
    named = set(re.findall(r'-module "counter" -var "([^"]+)"', control))
    assert named == {"clk", "rst", "en", "count", "done"}, control
    plan = dict(PLAN, probe="value")
    hidden = run_cocotb(counter_verilog, "counter", "cocotb_smoke", plan=plan,
                        test_dir=tmp_path / "ports")
    shown = run_cocotb(counter_verilog, "counter", "cocotb_smoke", plan=plan,
                       test_dir=tmp_path / "internal", internal_signals=True)
    assert (hidden["probe_visible"], shown["probe_visible"]) == (False, True)
    other = tmp_path / "other.v"
    other.write_text("module counter_x(a);\nendmodule\nmodule counter(b, c);\nendmodule\n")
    assert _top_ports(other, "counter") == ["b", "c"]
    other.write_text("module counter(input clk, output [7:0] count);\nendmodule\n")
    assert _top_ports(other, "counter") is None
    control = _top_public_control_file(tmp_path, other, "counter").read_text()
    assert re.findall(r'-var "([^"]+)"', control) == ["*"]


@pytest.mark.parametrize("sim", SIMS)
def test_waves_are_recorded(sim, counter_verilog, tmp_path):
    result = run_cocotb(
        counter_verilog, "counter", "cocotb_smoke", sim=sim, plan=PLAN, test_dir=tmp_path, waves=True
    )
    waves = result.pop("waves")
    assert result == {"count": LIMIT, "cycles": LIMIT}
    assert os.path.dirname(waves) == str(tmp_path)
    assert os.path.basename(waves) in ("counter.fst", "counter.vcd")
    assert os.path.getsize(waves) > 0


def test_files_written_together_are_all_written_or_none(tmp_path):
    """A file that cannot be written leaves the others as they were, no
    temporary file behind, and an error naming the file, not its temporary
    name (a full disk once left a report's plots new and its text old)."""
    kept = tmp_path / "report.md"
    kept.write_text("old")
    refused = tmp_path / "missing" / "plot.png"
    with pytest.raises(OSError) as info:
        build.write_files_atomically({kept: "new", refused: b"png"})
    assert info.value.filename == str(refused)
    assert kept.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
    build.write_files_atomically({kept: "new", tmp_path / "plot.png": b"png"})
    assert kept.read_text() == "new" and (tmp_path / "plot.png").read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "report.md"]


def test_verilog_is_cached_per_config(tmp_path):
    first = generate_verilog(Counter, CounterConfig(limit=5), "counter", build_root=tmp_path)
    mtime = first.stat().st_mtime_ns
    again = generate_verilog(Counter, CounterConfig(limit=5), "counter", build_root=tmp_path)
    assert again == first
    assert again.stat().st_mtime_ns == mtime
    other = generate_verilog(Counter, CounterConfig(limit=6), "counter", build_root=tmp_path)
    assert other.parent != first.parent
    assert other.read_text() != first.read_text()


def test_generate_verilog_rejects_mutable_config(tmp_path):
    @dataclasses.dataclass
    class Loose:
        limit: int = 3

    with pytest.raises(TypeError, match="config must be an instance of a frozen dataclass"):
        generate_verilog(Counter, Loose(), "counter", build_root=tmp_path)


def test_no_verilog_from_code_older_than_its_source(tmp_path, monkeypatch):
    """The cache keys the Verilog on the source files as they are on disk; a
    source this process loaded and that changed after it started (edited
    during a long run) may not be the code that would generate the text, so
    none is generated, and the message names the file."""
    monkeypatch.setattr(build, "_process_started", lambda: time.time() + 60)
    assert generate_verilog(Counter, CounterConfig(limit=7), "counter", build_root=tmp_path)
    changed = Path(__file__).stat().st_mtime - 60
    monkeypatch.setattr(build, "_process_started", lambda: changed)
    with pytest.raises(build.SourceChanged, match=r"factory/test_infra\.py\b.* changed after "
                                                  r"this process started"):
        generate_verilog(Counter, CounterConfig(limit=8), "counter", build_root=tmp_path)
    assert len(list(tmp_path.glob("counter-*/counter.v"))) == 1
    # Verilog already in the cache is the text its key names: still reused.
    assert generate_verilog(Counter, CounterConfig(limit=7), "counter", build_root=tmp_path)


def test_a_process_knows_when_it_started():
    """The bound the check above compares against: a fresh process's start
    lies just before its first line runs."""
    done = subprocess.run(
        [sys.executable, "-c", "import time; from sim import build; "
                               "print(time.time() - build._process_started())"],
        capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert 0 <= float(done.stdout) < 30


def test_no_verilog_when_a_source_changes_while_generating(tmp_path, monkeypatch):
    """A source edited while the Verilog is generated gives a text that
    matches neither key: nothing is written."""
    source = tmp_path / "growing_factory.py"
    source.write_text("from test_infra import Counter\n\n"
                      "def factory(config):\n"
                      "    with open(__file__, 'a') as handle:\n"
                      "        handle.write('# edited\\n')\n"
                      "    return Counter(config)\n")
    spec = importlib.util.spec_from_file_location("growing_factory", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(build, "_process_started", lambda: time.time() + 60)
    with pytest.raises(build.SourceChanged, match="changed while it was being generated"):
        generate_verilog(module.factory, CounterConfig(limit=9), "counter",
                         build_root=tmp_path / "b")
    assert not list((tmp_path / "b").glob("*/counter.v"))


def test_failing_testbench_is_reported_with_its_message(counter_verilog, tmp_path):
    plan = {"clock_ns": 10, "watchdog_cycles": LIMIT - 1}
    with pytest.raises(RuntimeError) as raised:
        run_cocotb(counter_verilog, "counter", "cocotb_smoke", plan=plan, test_dir=tmp_path)
    message = str(raised.value)
    assert "cocotb_smoke.count_to_limit" in message
    assert f"done did not rise within {LIMIT - 1} cycles" in message


def test_stale_result_is_not_reused(counter_verilog, tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"count": 1, "cycles": 1}))
    plan = dict(PLAN, write_result=False)
    with pytest.raises(RuntimeError, match="wrote no .*result.json"):
        run_cocotb(counter_verilog, "counter", "cocotb_smoke", plan=plan, test_dir=tmp_path)


@pytest.mark.parametrize("cached", [False, True], ids=["run", "cached-run"])
def test_runs_sharing_a_run_folder_take_turns(counter_verilog, tmp_path, caplog, cached):
    # Another simulation (here: the test) holds the folder; this one must
    # wait, saying so, before it writes its plan there.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with locked(tmp_path):
            if cached:
                running = pool.submit(run_cocotb_cached, counter_verilog, "counter",
                                      "cocotb_smoke", plan=PLAN, test_dir=tmp_path,
                                      cache_dir=tmp_path / "cache")
            else:
                running = pool.submit(run_cocotb, counter_verilog, "counter", "cocotb_smoke",
                                      plan=PLAN, test_dir=tmp_path)
            time.sleep(1.0)
            assert not running.done() and not (tmp_path / "plan.json").exists()
        result = running.result(timeout=300)
    assert (result[0] if cached else result) == {"count": LIMIT, "cycles": LIMIT}
    assert any("waiting for another simulation writing" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records)


def test_cached_run_is_reused_only_for_the_same_inputs(counter_verilog, tmp_path):
    cache = tmp_path / "simulations"
    first, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN,
                                      test_dir=tmp_path / "a", cache_dir=cache)
    assert (first, reused) == ({"count": LIMIT, "cycles": LIMIT}, False)
    again, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN,
                                      test_dir=tmp_path / "b", cache_dir=cache)
    assert (again, reused) == (first, True)
    assert not (tmp_path / "b" / "results.xml").exists()     # nothing was simulated
    # Another plan is another key; so is another simulator or testbench.
    key = simulation_key(counter_verilog, "counter", "cocotb_smoke", sim="verilator", plan=PLAN)
    assert key != simulation_key(counter_verilog, "counter", "cocotb_smoke", sim="verilator",
                                 plan=dict(PLAN, watchdog_cycles=999))
    if "icarus" in SIMS:
        assert key != simulation_key(counter_verilog, "counter", "cocotb_smoke", sim="icarus",
                                     plan=PLAN)
    assert key != simulation_key(counter_verilog, "counter", "cocotb_smoke", sim="verilator",
                                 plan=PLAN, internal_signals=True)
    _, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", test_dir=tmp_path / "c",
                                  plan=dict(PLAN, watchdog_cycles=999), cache_dir=cache)
    assert not reused
    # A damaged entry is simulated again and replaced.
    (cache / f"{key}.json").write_text("{")
    got, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN,
                                    test_dir=tmp_path / "d", cache_dir=cache)
    assert (got, reused) == (first, False)
    assert json.loads((cache / f"{key}.json").read_text())["result"] == first


def test_a_reuse_keeps_the_logs_of_the_same_result_only(counter_verilog, tmp_path):
    """A run folder's log and waveform stay when the result reused is the one
    they came from (``key.txt``), as after a ``--waves`` run; a folder whose
    files came from another plan loses them."""
    cache, folder = tmp_path / "simulations", tmp_path / "run"
    run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN, test_dir=folder,
                      cache_dir=cache, waves=True)        # a traced run stores no result
    traced = {p.name for p in folder.iterdir()}
    assert {"sim.log", "key.txt"} <= traced and traced & {"counter.fst", "counter.vcd"}
    run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN, test_dir=folder,
                      cache_dir=cache)                    # simulates and stores
    (folder / "counter.vcd").write_text("a waveform of this result")
    log = (folder / "sim.log").read_text()
    _, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=PLAN,
                                  test_dir=folder, cache_dir=cache)
    assert reused and (folder / "sim.log").read_text() == log
    assert (folder / "counter.vcd").exists() and (folder / "reused.txt").exists()
    other = dict(PLAN, watchdog_cycles=999)
    run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=other,
                      test_dir=tmp_path / "other", cache_dir=cache)
    _, reused = run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=other,
                                  test_dir=folder, cache_dir=cache)
    assert reused
    assert {p.name for p in folder.iterdir()} == {".lock", "plan.json", "result.json", "reused.txt"}


def test_failed_run_is_not_cached(counter_verilog, tmp_path):
    plan = {"clock_ns": 10, "watchdog_cycles": LIMIT - 1}
    for _ in range(2):
        with pytest.raises(RuntimeError, match="done did not rise"):
            run_cocotb_cached(counter_verilog, "counter", "cocotb_smoke", plan=plan,
                              test_dir=tmp_path, cache_dir=tmp_path / "simulations")
    assert not list((tmp_path / "simulations").glob("*.json"))


def test_fst_headers_missing_names_each_header_the_compiler_lacks(tmp_path, monkeypatch):
    """``--waves`` says which of lz4.h and zlib.h is missing, not both."""
    from sim import runner

    compiler = tmp_path / "cxx"
    compiler.write_text("#!/bin/sh\nif grep -q lz4; then exit 1; fi\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    runner.fst_headers_missing.cache_clear()
    try:
        assert runner.fst_headers_missing() == ("lz4.h",)
        assert not runner.verilator_writes_fst()
        runner.fst_headers_missing.cache_clear()
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        assert runner.fst_headers_missing() == ("lz4.h", "zlib.h")
    finally:
        runner.fst_headers_missing.cache_clear()


def test_timeout_stops_a_hung_simulation(counter_verilog, tmp_path):
    # Held off, the counter never finishes; the watchdog is far beyond what
    # the simulator can reach in the time allowed.
    plan = {"clock_ns": 10, "watchdog_cycles": 10**9, "enable": False}
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exceeded timeout_s=2 s"):
        run_cocotb(counter_verilog, "counter", "cocotb_smoke", plan=plan, test_dir=tmp_path, timeout_s=2)
    assert time.monotonic() - start < 30


def test_check_simulator_names_sim_and_allowed_values():
    with pytest.raises(ValueError, match=r"^sim must be one of verilator, icarus, not 'xsim'$"):
        check_simulator("xsim")


def test_run_cocotb_rejects_unknown_simulator(counter_verilog, tmp_path):
    with pytest.raises(ValueError, match="sim must be one of"):
        run_cocotb(counter_verilog, "counter", "cocotb_smoke", sim="xsim", plan=PLAN, test_dir=tmp_path)


def test_verilator_env_points_at_bundled_verilator():
    env = verilator_env()
    bin_dir = os.path.join(env["VERILATOR_ROOT"], "bin")
    assert env["PATH"].split(os.pathsep)[0] == bin_dir
    assert os.access(os.path.join(bin_dir, "verilator"), os.X_OK)


def test_a_yowasp_tool_is_prepared_once_per_process_and_one_process_at_a_time(tmp_path):
    """The first run of a YoWASP tool compiles it: two processes, each with
    two threads, that prepare the same command at once run it once each,
    one after the other (it fails with no lock, or with no memory of a
    command already run)."""
    log, tool = tmp_path / "log", tmp_path / "tool"
    tool.write_text(f"#!/bin/sh\necho start $$ >> {log}\nsleep 0.5\necho end $$ >> {log}\n")
    tool.chmod(0o755)
    code = ("import sys, threading\n"
            "from sim.toolchain import prepare_yowasp\n"
            "threads = [threading.Thread(target=prepare_yowasp, args=([sys.argv[1]],))"
            " for _ in range(2)]\n"
            "for t in threads: t.start()\n"
            "for t in threads: t.join()\n")
    root = Path(__file__).resolve().parents[1]
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tool)], cwd=root)
                 for _ in range(2)]
    assert [p.wait(timeout=60) for p in processes] == [0, 0]
    events = [line.split() for line in log.read_text().splitlines()]
    assert [e[0] for e in events] == ["start", "end", "start", "end"]
    assert events[0][1] == events[1][1] != events[2][1] == events[3][1]


def test_experiments_never_timed_start_first_then_the_longest():
    from sim.cli import Job, longest_first
    jobs = [Job("dsm", name, ()) for name in ("a", "b", "c", "d")]
    order = longest_first(jobs, {"dsm.a": 5.0, "dsm.c": 50.0, "dsm.d": 20.0, "mesh.b": 99.0})
    assert [job.name for job in order] == ["b", "c", "d", "a"]


def test_a_cold_build_folder_starts_the_longest_experiment_first():
    """Every experiment has a typical time, so the first run of a build
    folder starts the longest (the allreduce, with its three mesh builds)
    rather than leaving it last."""
    from sim.cli import TYPICAL_SECONDS, Job, longest_first, resolve_names
    names = [f"{fabric}.{name}" for fabric, name in resolve_names(["all"])]
    assert sorted(TYPICAL_SECONDS) == sorted(names)
    jobs = [Job(*name.split("."), ()) for name in names]
    order = longest_first(jobs, dict(TYPICAL_SECONDS))
    assert f"{order[0].fabric}.{order[0].name}" == "mesh.allreduce"


def test_progress_counts_the_runs_this_invocation_logged(tmp_path):
    from sim.cli import Job, runs_logged, simulation_started
    job = Job("mesh", "allreduce", (("shire", None, [{}] * 5), ("chip", None, [{}] * 8)))
    since = time.time() - 5        # slack for file systems with coarse time stamps
    assert runs_logged(job, tmp_path, since) == 0                  # nothing started yet
    assert not simulation_started(job, tmp_path, since)
    shire, chip = tmp_path / "mesh.allreduce.shire", tmp_path / "mesh.allreduce.chip"
    shire.mkdir()
    chip.mkdir()
    # An earlier invocation's log counts nothing ...
    (chip / "sim.log").write_text("  1.00ns INFO  cocotb  run 8/8 tree: done\n")
    os.utime(chip / "sim.log", (since - 60, since - 60))
    assert not simulation_started(job, tmp_path, since)             # still building
    (shire / "sim.log").write_text("".join(f"  {k}.00ns INFO  cocotb  run {k}/5 level {k}: done\n"
                                           for k in range(1, 4)))
    assert runs_logged(job, tmp_path, since) == 3
    assert simulation_started(job, tmp_path, since)
    # ... until this one's simulation writes it again.
    (chip / "sim.log").write_text("  9.00ns INFO  cocotb  run 2/8 tree: done\n")
    assert runs_logged(job, tmp_path, since) == 5


def test_a_one_entry_fifo_passes_verilator_s_lint(tmp_path):
    """A buffer depth of 1 is allowed (link_buffer_flits=1, request_queue_flits=1):
    its FIFO's zero-width pointers are written as ``wire [-1:0] x;``, which
    Verilator refuses unless ASCRANGE is waived."""
    from amaranth.back import verilog

    from hdl.common.queue import sync_fifo
    from sim.runner import VERILATOR_SPEED, VERILATOR_WAIVERS
    fifo = sync_fifo(width=8, depth=1)
    source = tmp_path / "fifo1.v"
    source.write_text(verilog.convert(fifo, name="fifo1", ports=[
        fifo.w_data, fifo.w_en, fifo.w_rdy, fifo.r_data, fifo.r_en, fifo.r_rdy, fifo.level]))
    assert "[-1:0]" in source.read_text()
    done = subprocess.run(["verilator", "--lint-only", *VERILATOR_WAIVERS, *VERILATOR_SPEED,
                           str(source)], env={**os.environ, **verilator_env()},
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_run_logs_each_waveform_with_its_size(tmp_path):
    """``fabricsim run --waves`` logs the file each experiment wrote and its
    size, one per part, and says when a file named is missing."""
    from sim.cli import _waveforms

    wave = tmp_path / "dsm_gpc.vcd"
    wave.write_bytes(b"x" * 2_500_000)
    assert _waveforms({"rows": []}) == []
    assert _waveforms({"waves": str(wave)}) == [f"{wave} (2.5 MB)"]
    assert _waveforms({"waves": [str(wave), str(tmp_path / "gone.fst")]}) == [
        f"{wave} (2.5 MB)", f"{tmp_path / 'gone.fst'} (not found)"]
