"""``fabricsim sweep``: grid parsing, bad input, and the same table from the
local process pool and a local Dask cluster."""

import csv
import json
import os
from pathlib import Path

import pytest

from hdl.pcie.config import PcieConfig
from sim import sweep
from sim.cli import UsageError, main

BUILD = Path(__file__).resolve().parent.parent / "build"


@pytest.mark.parametrize("items,message", [
    (["no_such_field=1,2"], "--grid field must be one of"),
    (["lanes"], "must list values as lanes=V1,V2"),
    (["lanes="], "must list values as lanes=V1,V2"),
    (["lanes=4,8", "lanes=16"], "given twice"),
    (["lanes=4,,8"], "empty value"),
    (["lanes=4,8,4"], "--grid lanes gives '4' twice; give each value once"),
    ([], "--grid must be given at least once"),
])
def test_bad_grid_is_refused(items, message):
    with pytest.raises(UsageError, match=message):
        sweep.parse_grid(PcieConfig, items)


def test_a_string_field_takes_semicolons_since_its_values_hold_commas():
    from hdl.hopper.config import DsmConfig
    assert sweep.parse_grid(DsmConfig, ["gx_planes=gx0,gx1;gx0"]) == \
        [("gx_planes", ["gx0,gx1", "gx0"])]


def test_a_field_both_set_and_swept_is_refused():
    grid = sweep.parse_grid(PcieConfig, ["lanes=8,16"])
    with pytest.raises(UsageError, match="--set lanes is also a --grid field"):
        sweep.plan_sweep("pcie", "peer_copy", grid, ["lanes=4"])


def test_two_spellings_of_one_value_are_refused():
    grid = sweep.parse_grid(PcieConfig, ["lanes=8,0x8"])
    with pytest.raises(UsageError, match="sweep points lanes=8 and lanes=0x8 are the same"):
        sweep.plan_sweep("pcie", "peer_copy", grid)


def test_two_orders_of_the_same_planes_are_refused():
    from hdl.hopper.config import DsmConfig
    grid = sweep.parse_grid(DsmConfig, ["gx_planes=gx0,gx1;gx1,gx0"])
    with pytest.raises(UsageError, match="sweep points gx_planes=gx0,gx1 and gx_planes=gx1,gx0 "
                                         "are the same"):
        sweep.plan_sweep("dsm", "one_way", grid)


def test_grid_values_parse_in_order():
    # a value given twice is refused (test_bad_grid_is_refused)
    assert sweep.parse_grid(PcieConfig, ["lanes=16,8", "generation=4,3"]) == \
        [("lanes", ["16", "8"]), ("generation", ["4", "3"])]


def test_a_bad_point_names_the_point():
    grid = sweep.parse_grid(PcieConfig, ["lanes=16,7"])
    with pytest.raises(UsageError, match=r"sweep point lanes=7: lanes must be"):
        sweep.plan_sweep("pcie", "peer_copy", grid)


@pytest.mark.parametrize("argv,message", [
    (["sweep", "pcie", "--grid", "lanes=8,16"], "NAME must be one experiment"),
    (["sweep", "pcie.peer_copy", "--grid", "lanes=8,16", "--scheduler", "tcp://x:1"],
     "--scheduler needs --engine dask"),
    (["sweep", "pcie.peer_copy", "--grid", "lanes=8,99"], "sweep point lanes=99"),
    (["sweep", "pcie.peer_copy"], "--grid must be given at least once"),
    (["sweep", "pcie.peer_copy", "--grid", "lanes=8,16", "--tag", "../x"],
     "--tag must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit "
     "(it names the sweep's files), not '../x'"),
    (["sweep", "synth.shaper", "--grid", "flit_bytes=16,32", "--tag", ""], "--tag must be"),
    (["sweep", "pcie.peer_copy", "--grid", "lanes=8,16", "--tag=-x"],
     "starting with a letter or digit (it names the sweep's files), not '-x'"),
    (["sweep", "pcie.nothing", "--grid", "lanes=8"], "experiment must be one of"),
    (["sweep", "pcie.peer_copy", "--grid", "lanes=8,16", "--sim", "xsim"],
     "--sim must be one of verilator, icarus, not 'xsim'"),
    # synthesis sweeps: structural fields only, each configuration once, no simulator
    (["sweep", "synth.shaper", "--grid", "shaper_flits=1,2"],
     "synth.shaper takes only structural fields of dsm (the others change no hardware): "
     "one of cpcs,"),
    (["sweep", "synth.pcie_link", "--grid", "datapath_bytes=32", "--set", "lanes=4"],
     "synth.pcie_link takes only structural fields of pcie"),
    # more points than a sweep may have, refused before any is planned
    (["sweep", "pcie.peer_copy",
      "--grid", "switch_latency_cycles=" + ",".join(map(str, range(101))),
      "--grid", "socket_latency_cycles=" + ",".join(map(str, range(100)))],
     "--grid must give at most 10,000 points, not 10,100 (101 x 100); split the sweep\n"),
    # a misspelt field: the closest structural field, never a run-time one
    (["sweep", "synth.shaper", "--grid", "link_bufer_flits=4,8"],
     "not 'link_bufer_flits' (did you mean link_buffer_flits?)\n"),
    (["sweep", "synth.shaper", "--grid", "shaper_flit=1,2"], "not 'shaper_flit'\n"),
    (["sweep", "synth.shaper", "--grid", "flit_bytes=16,0x10"],
     "sweep points flit_bytes=16 and flit_bytes=0x10 are the same configuration"),
    (["sweep", "synth.shaper", "--grid", "flit_bytes=16,32", "--sim", "icarus"],
     "--sim does not apply to synth.shaper"),
    (["sweep", "synth.shaper", "--grid", "flit_bytes=16,32", "--metric", "area"],
     "--metric must start one of LUTs, flip-flops, block RAMs, Fmax for synth.shaper, "
     "not 'area'"),
])
def test_bad_sweep_requests_exit_2_with_one_line(tmp_path, capsys, argv, message):
    status = main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "r" / "sweep").exists() or not any((tmp_path / "r" / "sweep").iterdir())


@pytest.mark.parametrize("existed", [False, True])
def test_a_sweep_that_fails_to_run_leaves_no_empty_folder(tmp_path, monkeypatch, capsys,
                                                        existed):
    """A sweep stopped before its table (here by an OSError, as a full disk
    would) removes the results folders it made, parents included; a folder
    that was there before stays.  The error is one line, exit status 1."""
    def unreachable(*args, **kwargs):
        raise OSError("no scheduler at tcp://x:1")

    monkeypatch.setattr(sweep, "run_sweep", unreachable)
    results = tmp_path / "out" / "r"
    if existed:
        results.mkdir(parents=True)
    argv = ["--results", str(results), "--build", str(tmp_path / "b"), "sweep",
            "pcie.peer_copy", "--grid", "lanes=8,16"]
    assert main(argv) == 1
    assert capsys.readouterr().err == "fabricsim: error: no scheduler at tcp://x:1\n"
    assert not (results / "sweep").exists()
    assert results.exists() == (tmp_path / "out").exists() == existed
    assert not (tmp_path / "b").exists()


def test_a_sweep_refused_by_its_scheduler_leaves_no_run_folder(tmp_path, monkeypatch):
    from sim.cli import UsageError

    def refused(*args, **kwargs):
        raise UsageError("--scheduler must be the address of a running Dask scheduler")

    monkeypatch.setattr(sweep, "map_tasks", refused)
    build = tmp_path / "b"
    (build / "verilog").mkdir(parents=True)     # a build folder in use stays
    assert main(["--results", str(tmp_path / "r"), "--build", str(build), "sweep",
                 "pcie.peer_copy", "--grid", "lanes=8,16", "--engine", "dask",
                 "--scheduler", "tcp://x:1"]) == 2
    assert [p.name for p in build.iterdir()] == ["verilog"]
    assert not (tmp_path / "r").exists()


def test_a_failed_point_is_listed_with_its_error(tmp_path, monkeypatch):
    """The table keeps every point in order; a failed one carries its error and
    no model value, and the plot holds the points that ran and names the
    failed one."""
    from matplotlib.figure import Figure

    rows = [{"quantity": "pair_same: [0,1]", "model": 25.1, "reference": 25.2,
             "unit": "GB/s", "tolerance_pct": 5}]
    points = [({"lanes": "8"}, None), ({"lanes": "16"}, None)]
    outcomes = [(None, "run 3 ended stuck"), ({"rows": rows}, None)]
    table = sweep.sweep_table(points, outcomes)
    assert table[0] == {"point": {"lanes": "8"}, "error": "run 3 ended stuck"}
    assert table[1]["model"] == 25.1 and table[1]["met"]
    texts, savefig = [], Figure.savefig

    def saved(fig, *args, **kwargs):
        texts.extend(t.get_text() for ax in fig.axes for t in ax.texts)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", saved)
    path = sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["8", "16"])], [],
                             "verilator", "local", table, "pair_same")
    assert texts == ["failed, not drawn (see the table): lanes=8"]
    data = json.loads(path.read_text())
    assert data["rows"] == table and data["plot"] == "pcie.peer_copy.png"
    with open(tmp_path / "sweep" / "pcie.peer_copy.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    assert lines[0]["failure"] == "run 3 ended stuck" and lines[0]["model"] == ""
    assert lines[1]["model"] == "25.1" and lines[1]["status"] == ""
    # the seed stands next to the model, as in the report
    assert (lines[1]["seed"], lines[1]["unit"], lines[1]["met"]) == ("25.2", "GB/s", "True")
    assert sweep.metric_rows(table, "no such row") == ("no such row", [])
    # a later table with nothing to plot takes the old plot away
    sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["8"])], [], "verilator",
                      "local", table[:1], "pair_same")
    assert not (tmp_path / "sweep" / "pcie.peer_copy.png").exists()


def test_a_table_that_cannot_be_drawn_leaves_the_earlier_files(tmp_path, monkeypatch):
    """The three files are made before any is written: a plot that fails to
    draw leaves the earlier sweep's CSV, plot and JSON as they were."""
    from matplotlib.figure import Figure

    rows = [{"quantity": "pair_same: [0,1]", "model": 25.1, "reference": 25.2,
             "unit": "GB/s", "tolerance_pct": 5}]
    table = sweep.sweep_table([({"lanes": "8"}, None)], [({"rows": rows}, None)])
    sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["8"])], [], "verilator",
                      "local", table)
    folder = tmp_path / "sweep"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def broken(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(Figure, "savefig", broken)
    later = sweep.sweep_table([({"lanes": "16"}, None)], [({"rows": rows}, None)])
    with pytest.raises(OSError, match="no space"):
        sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["16"])], [],
                          "verilator", "local", later)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_interrupted_pool_stops_its_workers_without_waiting():
    """Ctrl-C inside a pool's block (here raised by hand) stops the workers at
    once, rather than waiting for the running task and then the queued one."""
    import multiprocessing
    import time

    from sim.cli import pool

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with pool(1) as workers:
            running = workers.submit(time.sleep, 60)
            workers.submit(time.sleep, 60)
            while not running.running():
                time.sleep(0.05)
            children = multiprocessing.active_children()
            raise KeyboardInterrupt
    # the pool's own thread may reap a worker first, so poll rather than join
    while any(c.is_alive() for c in children) and time.monotonic() - started < 20:
        time.sleep(0.05)
    assert children and not any(c.is_alive() for c in children)
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("address", ["ucx://127.0.0.1:1", "tls://127.0.0.1:1", "", "host:99999",
                                     "a b:1"])
def test_a_scheduler_address_dask_cannot_use_here_is_refused(tmp_path, capsys, address):
    """Only TCP addresses: Dask's other transports need set-up the sweep does
    not make (a tls:// scheduler failed with a traceback)."""
    with pytest.raises(SystemExit) as info:
        main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "sweep",
              "pcie.peer_copy", "--grid", "lanes=8,16", "--engine", "dask",
              "--scheduler", address])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        f"fabricsim: error: --scheduler must be a Dask scheduler's address, tcp://HOST:PORT "
        f"(or HOST:PORT), not {address!r} (see fabricsim --help)\n")
    assert not (tmp_path / "r").exists() and not (tmp_path / "b").exists()


def _listener(greeting):
    """A TCP server on a free local port that takes connections, sends
    ``greeting`` and then says nothing (not a Dask scheduler); returns
    ``(address, close)``."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    taken = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            taken.append(conn)
            conn.sendall(greeting)

    threading.Thread(target=serve, daemon=True).start()

    def close():
        server.close()
        for conn in taken:
            conn.close()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}", close


@pytest.mark.parametrize("greeting, why", [
    (b"", "no answer in 2 s"),
    (b"SSH-2.0-OpenSSH_9.6\r\n" + b"x" * 64, "what answered does not speak Dask's protocol"),
])
def test_a_scheduler_address_that_is_no_dask_scheduler_is_refused_in_time(greeting, why):
    """A service that takes the connection and waits (a web server) is
    refused once the time is up, one that sends something else first (an SSH
    banner) at once: one line each, no client left to fail at exit."""
    import time

    address, close = _listener(greeting)
    started = time.monotonic()
    try:
        with pytest.raises(UsageError) as info:
            sweep.connect_scheduler(address, timeout_s=2)
    finally:
        close()
    assert str(info.value).startswith(f"--scheduler must be the address of a running Dask "
                                      f"scheduler, not {address!r} ({why}")
    assert "\n" not in str(info.value)
    assert time.monotonic() - started < 10


def test_sigterm_stops_a_pool_as_ctrl_c_does():
    """kill or timeout (SIGTERM) inside a pool's block raises
    KeyboardInterrupt, so its workers are stopped rather than left running;
    the handler is put back after the block."""
    import multiprocessing
    import signal
    import time

    from sim.cli import pool

    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with pool(1) as workers:
            running = workers.submit(time.sleep, 60)
            while not running.running():
                time.sleep(0.05)
            children = multiprocessing.active_children()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)                      # the signal arrives first
    while any(c.is_alive() for c in children) and time.monotonic() - started < 20:
        time.sleep(0.05)
    assert children and not any(c.is_alive() for c in children)
    assert time.monotonic() - started < 20
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_module_command_stopped_says_so_in_one_line(capsys, stop):
    """python -m sim.random_traffic (and sim.prove, sim.bench) run through
    exit_status: kill or a closed terminal ends them with one line and 130,
    as Ctrl-C does, not a traceback; the handlers are put back after."""
    import signal
    import time

    from sim.cli import exit_status

    before = signal.getsignal(signal.SIGTERM)

    def command(argv):
        os.kill(os.getpid(), getattr(signal, stop))
        time.sleep(30)                      # the signal arrives first
        return 0
    assert exit_status(command, "python -m sim.random_traffic") == 130
    assert capsys.readouterr().err == "python -m sim.random_traffic: interrupted\n"
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_module_command_that_cannot_write_says_which_file(capsys, tmp_path):
    from sim.cli import exit_status

    def command(argv):
        (tmp_path / "missing" / "random.json").write_text("{}")
    assert exit_status(command, "python -m sim.random_traffic") == 1
    assert capsys.readouterr().err == (f"python -m sim.random_traffic: error: "
                                       f"{tmp_path / 'missing' / 'random.json'}: "
                                       f"No such file or directory\n")


def test_a_tagged_sweep_keeps_the_earlier_table(tmp_path):
    """--tag names the files, so a second sweep of an experiment leaves the
    first one's table; a sweep that will replace a table says so first."""
    rows = [{"quantity": "pair_same: [0,1]", "model": 25.1, "reference": 25.2,
             "unit": "GB/s", "tolerance_pct": 5}]
    table = sweep.sweep_table([({"lanes": "8"}, None)], [({"rows": rows}, None)])
    assert sweep.replaced_note(tmp_path, "pcie.peer_copy") is None
    first = sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["8"])], [],
                              "verilator", "local", table)
    second = sweep.write_sweep(tmp_path, "pcie", "peer_copy", [("lanes", ["8"])], [],
                               "verilator", "local", table, tag="x16-gen5")
    assert second.name == "pcie.peer_copy.x16-gen5.json" and first.exists()
    assert json.loads(second.read_text())["tag"] == "x16-gen5"
    assert "tag" not in json.loads(first.read_text())
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == [
        "pcie.peer_copy.csv", "pcie.peer_copy.json", "pcie.peer_copy.png",
        "pcie.peer_copy.x16-gen5.csv", "pcie.peer_copy.x16-gen5.json",
        "pcie.peer_copy.x16-gen5.png"]
    assert "this sweep replaces it when it ends (--tag TAG writes pcie.peer_copy.TAG.json " \
        "to keep both)" in sweep.replaced_note(tmp_path, "pcie.peer_copy")
    assert sweep.replaced_note(tmp_path, "pcie.peer_copy", "x16-gen5").endswith(
        "pcie.peer_copy.x16-gen5.json holds an earlier sweep's table: this sweep replaces it "
        "when it ends (another --tag to keep both)")
    assert sweep.replaced_note(tmp_path, "pcie.peer_copy", "other") is None


def test_a_seed_range_is_a_range_in_the_table_and_a_band_in_the_plot(tmp_path, monkeypatch):
    """A row whose seed gives a range: the CSV's seed is low-high with no error
    %, and the plot shades the range rather than drawing its midpoint."""
    import matplotlib.axes

    rows = [{"quantity": "to shire s + 1", "model": m, "reference": 3.9, "error_pct": e,
             "reference_range": [2.8, 5.0], "unit": "GB/s", "minimum": 2.8, "maximum": 5.0}
            for m, e in ((2.4, -38.0), (3.1, -20.5))]
    points = [({"mesh_window_flits": "51"}, None), ({"mesh_window_flits": "64"}, None)]
    table = sweep.sweep_table(points, [({"rows": [r]}, None) for r in rows])
    assert [r["error_pct"] for r in table] == [None, None]
    assert [r["met"] for r in table] == [False, True]
    spans, lines = [], []
    monkeypatch.setattr(matplotlib.axes.Axes, "axhspan",
                        lambda self, lo, hi, **kw: spans.append((lo, hi)))
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda self, y, **kw: lines.append(y))
    sweep.write_sweep(tmp_path, "mesh", "ring_bandwidth", [("mesh_window_flits", ["51", "64"])],
                      [], "verilator", "local", table)
    assert spans == [(2.8, 5.0)] and lines == []
    with open(tmp_path / "sweep" / "mesh.ring_bandwidth.csv", newline="") as f:
        got = [(r["seed"], r["error_pct"]) for r in csv.DictReader(f)]
    assert got == [("2.8-5.0", ""), ("2.8-5.0", "")]
    below_zero = sweep.sweep_table(points[:1], [({"rows": [dict(rows[0], reference=0.0,
                                                               reference_range=[-1.0, 1.0])]},
                                                 None)])
    sweep.write_sweep(tmp_path, "mesh", "credit", [("mesh_window_flits", ["51"])], [],
                      "verilator", "local", below_zero)
    with open(tmp_path / "sweep" / "mesh.credit.csv", newline="") as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["-1.0 to 1.0"]


def _sweep(tmp_path, engine, grid=("lanes=8,16",), scheduler=None):
    results = tmp_path / engine
    argv = ["--results", str(results), "--build", str(BUILD), "sweep", "pcie.peer_copy",
            *(a for g in grid for a in ("--grid", g)), "--engine", engine, "--jobs", "2",
            "--metric", "pair_same", *(["--scheduler", scheduler] if scheduler else [])]
    assert main(argv) == 0
    return results / "sweep"


def test_local_pool_and_dask_cluster_give_the_same_table(tmp_path):
    """Two points of the PCIe peer-copy table, on the local process pool and on
    a Dask cluster reached by its address, whose one worker runs two threads
    (so both points run in one process): the same rows, and the narrower link
    is slower."""
    from dask.distributed import LocalCluster

    local = _sweep(tmp_path, "local")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                      dashboard_address=None) as cluster:
        dask = _sweep(tmp_path, "dask", scheduler=cluster.scheduler_address)
    a = json.loads((local / "pcie.peer_copy.json").read_text())
    b = json.loads((dask / "pcie.peer_copy.json").read_text())
    assert (a["engine"], b["engine"]) == ("local", "dask")
    assert a["rows"] == b["rows"] and a["rows"]
    assert not any("error" in r for r in a["rows"])
    single = {r["point"]["lanes"]: r["model"] for r in a["rows"]
              if r["quantity"].startswith("pair_same")}
    assert single["8"] < 0.6 * single["16"]
    with open(local / "pcie.peer_copy.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(a["rows"]) and {r["lanes"] for r in table} == {"8", "16"}
    assert (local / "pcie.peer_copy.png").stat().st_size > 1000
    assert not list(local.glob(".*.tmp"))


@pytest.mark.slow
def test_a_twenty_point_sweep_is_the_same_on_both_engines(tmp_path):
    """Link width by Ack cadence, 5 x 4 points (under ``make soak``)."""
    grid = ("lanes=1,2,4,8,16", "ack_every_tlps=1,2,4,8")
    a = json.loads((_sweep(tmp_path, "local", grid) / "pcie.peer_copy.json").read_text())
    b = json.loads((_sweep(tmp_path, "dask", grid) / "pcie.peer_copy.json").read_text())
    assert len({tuple(r["point"].items()) for r in a["rows"]}) == 20
    assert a["rows"] == b["rows"] and not any("error" in r for r in a["rows"])


def test_a_check_that_refuses_the_first_result_cancels_the_points_not_started():
    """A --metric no row has is found on the grid's first point; the points
    not yet started never run."""
    import time

    seen = []

    def check(result):
        seen.append(result)
        raise UsageError("--metric must start a row's quantity")

    started = time.monotonic()
    with pytest.raises(UsageError, match="--metric"):
        sweep.map_tasks(time.sleep, [(0.5,)] * 20, jobs=1, check=check)
    assert seen == [None]
    assert time.monotonic() - started < 8     # not 20 x 0.5 s on top of the pool's start


def test_a_check_waits_for_the_first_point_that_does_not_fail():
    """When the grid's first point fails, a --metric is checked on the next
    one that succeeds, not only once every point has run."""
    seen = []

    def check(result):
        seen.append(result)
        raise UsageError("--metric must start a row's quantity")

    with pytest.raises(UsageError, match="--metric"):
        sweep.map_tasks(int, [("x",), ("7",), *[("1",)] * 20], jobs=1, check=check)
    assert seen == [7]


def test_a_sweep_shows_its_points_while_they_run(tmp_path, capsys, monkeypatch,
                                                  progress_lines):
    """A point that builds a new configuration is silent for minutes; while
    the points run, piped output gets a line with how many are done (every
    PIPED_PROGRESS_SECONDS), and each point's own line as it ends."""
    def run_sweep(points, *args, progress=None, **kwargs):
        # the status, then a line (after those of the planning, if any)
        progress_lines(progress_lines(0) + 2)
        progress(1, len(points), points[0][0], "run 1 ended stuck")
        progress_lines(progress_lines(0) + 2)   # a line made after the first point
        progress(2, len(points), points[1][0], "run 1 ended stuck")
        return [(None, "run 1 ended stuck")] * len(points)

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    assert main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "sweep",
                 "pcie.peer_copy", "--grid", "lanes=8,16"]) == 1
    err = capsys.readouterr().err
    assert "pcie.peer_copy: 0/2 points done after T s" in err
    assert "pcie.peer_copy: 1/2 points done after T s" in err
    assert "[1/2] pcie.peer_copy lanes=8: failed: run 1 ended stuck" in err


def test_waited_text_gives_minutes_and_seconds(monkeypatch):
    import sim.cli

    monkeypatch.setattr(sim.cli.time, "monotonic", lambda: 1000.0)
    assert sim.cli.waited_text(1000.0) == "0 s"
    assert sim.cli.waited_text(955.4) == "45 s"
    assert sim.cli.waited_text(875.0) == "2 min 5 s"


def test_a_sweep_table_names_its_row_and_shows_the_seed(tmp_path, capsys, monkeypatch):
    """The table printed at the end is titled with the sweep and the row it
    followed, in full, and has the seed's value next to the model's, both as
    the report shows them (a range as low–high)."""
    rows = [{"quantity": "pair_cross: [0,4] (cross socket)", "model": 18.29,
             "reference": 18.5, "reference_range": [17.0, 20.0], "unit": "GB/s",
             "minimum": 17.0, "maximum": 20.0}]

    def run_sweep(points, *args, **kwargs):
        return [({"rows": rows}, None)] * len(points)

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    assert main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "sweep",
                 "pcie.peer_copy", "--grid", "lanes=8,16", "--metric", "pair_cross"]) == 0
    out = capsys.readouterr().out
    assert "pcie.peer_copy: pair_cross: [0,4] (cross socket)" in " ".join(out.split())
    assert "seed" in out and out.count("17–20") == 2 and out.count("yes") == 2
    assert out.count("18.29") == 2


def test_a_sweep_table_gives_cycle_counts_as_the_report_does(tmp_path, capsys, monkeypatch):
    """Tens of thousands of cycles read 20,080 in the console table, as in the
    report, not 2.008e+04; a run that measured nothing reads as a dash; a
    yes/no row reads yes or no."""
    rows = [{"quantity": "elapsed", "model": 20080.0, "reference": 233.0, "unit": "cycles"},
            {"quantity": "elapsed converges", "model": 0.0, "reference": 1.0,
             "unit": "1 = yes"}]
    outcomes = iter([({"rows": rows}, None), ({"rows": [dict(rows[0], model=None)] + rows[1:]},
                                              None)])

    def run_sweep(points, *args, **kwargs):
        return [next(outcomes) for _ in points]

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    assert main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "sweep",
                 "pcie.peer_copy", "--grid", "lanes=8,16", "--metric", "elapsed"]) == 0
    # the table's rows only: the paths printed after it hold pytest's numbered folder
    table = "\n".join(line for line in capsys.readouterr().out.splitlines() if "│" in line)
    assert "20,080" in table and "e+04" not in table and table.count("233") == 2
    assert "—" in table
    outcomes = iter([({"rows": rows}, None)])
    assert main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "sweep",
                 "pcie.peer_copy", "--grid", "lanes=8", "--metric", "elapsed converges",
                 "--tag", "flag"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("8 "))
    assert [cell.strip() for cell in row.split("│")[2:4]] == ["no", "yes"], row


def test_a_sweep_announces_its_points_the_same_way_for_simulation_and_synthesis():
    started_line = sweep.started_line
    assert started_line("dsm.one_way", 3, "local", 2, None) == (
        "dsm.one_way: 3 points on local, 2 at a time")
    assert started_line("synth.shaper", 1, "local", 2, None, "ecp5") == (
        "synth.shaper: 1 point on ecp5, local, 1 at a time")
    assert started_line("pcie.peer_copy", 20, "dask", 2, "tcp://127.0.0.1:8786") == (
        "pcie.peer_copy: 20 points on dask (tcp://127.0.0.1:8786)")
