"""``make synth``: a block through Yosys and nextpnr, the figures in the report,
a synthesis sweep, and bad input refused."""

import csv
import json

import pytest

from hdl.hopper.config import DsmConfig
from hdl.pcie.config import PcieConfig
from sim import synth
from sim.cli import UsageError, main
from sim.config_file import load_config_file
from sim.report import _synth_section


@pytest.fixture(scope="module")
def shaper_row(tmp_path_factory):
    """The injection shaper synthesised for the ECP5 (one run, shared)."""
    build = tmp_path_factory.mktemp("build")
    return synth.synthesise("shaper", "ecp5", build_root=build)


def test_the_shaper_synthesises_with_figures_from_the_tools(shaper_row):
    row = shaper_row
    assert row["status"] in ("ok", "fails timing"), row["message"]
    # Two 4-bit ratio registers, a 5-bit token count, credit counters and the
    # registered output flit of about 300 bits: hundreds of LUTs and flip-flops.
    assert 100 < row["luts"] < 5000 and 300 < row["ffs"] < 5000
    assert row["brams"] == 0
    assert set(row["fmax_by_clock"]) == {"clk"} and 10 < row["fmax_mhz"] < 1000
    assert row["fmax_mhz"] == row["fmax_by_clock"]["clk"]
    assert (row["status"] == "ok") == (row["fmax_mhz"] >= row["target_mhz"])
    assert row["tool_versions"]["yosys"].startswith("Yosys 0.70")
    assert "nextpnr" in row["tool_versions"]["nextpnr"]
    assert row["device"].startswith("LFE5U-85F")
    assert row["nextpnr_options"] == []     # a small block: nextpnr's defaults


def test_the_figures_follow_the_design(tmp_path, shaper_row):
    """16 B flits instead of 32: the registered output flit loses 128 data bits."""
    narrow = synth.synthesise("shaper", "ecp5", ["flit_bytes=16"], build_root=tmp_path)
    assert shaper_row["ffs"] - narrow["ffs"] >= 128
    assert narrow["config"].startswith("16 B flits")
    small = synth.synthesise("round_robin", "ice40", build_root=tmp_path)
    assert small["status"] in ("ok", "fails timing") and small["luts"] > 0 and small["ffs"] > 0
    assert small["device"].startswith("iCE40")


def test_a_block_past_its_time_is_reported_as_timed_out(tmp_path):
    row = synth.synthesise("round_robin", "ecp5", build_root=tmp_path, timeout=0.01)
    assert row["status"] == "timed out" and "--timeout" in row["message"]
    assert row["fmax_mhz"] is None


def test_memories_that_overflow_the_part_stop_yosys_before_a_tops_logic(tmp_path, monkeypatch):
    """The minion engine's register file maps to several DP16KD (8 with the
    default 16 B flits); on a part with one, built as a top (at the mesh's
    small-top configuration), the row says so, counts the block RAMs and maps
    no logic."""
    import dataclasses
    small = dataclasses.replace(synth.DEVICES["ecp5"],
                                capacity=dict(synth.DEVICES["ecp5"].capacity, brams=1))
    monkeypatch.setitem(synth.DEVICES, "ecp5", small)
    monkeypatch.setitem(synth.BLOCKS, "minion_engine",
                        dataclasses.replace(synth.BLOCKS["minion_engine"], top=True))
    row = synth.synthesise("minion_engine", "ecp5", build_root=tmp_path)
    assert row["status"] == "does not fit" and row["brams"] > 1, row
    assert f"{row['brams']} block RAMs (the part has 1)" in row["message"]
    assert "logic was not mapped" in row["message"]
    assert row["luts"] is None and row["ffs"] is None and row["fmax_mhz"] is None
    assert not list(tmp_path.glob("synth/*/stat.json"))
    # As a block it is mapped to the end, for its LUT count.
    monkeypatch.undo()
    monkeypatch.setitem(synth.DEVICES, "ecp5", small)
    row = synth.synthesise("minion_engine", "ecp5", build_root=tmp_path)
    assert row["status"] == "does not fit" and row["brams"] == 8 and row["luts"] > 0, row


def test_a_block_with_more_port_bits_than_pins_does_not_fit_the_ice40(tmp_path):
    row = synth.synthesise("shaper", "ice40", build_root=tmp_path)
    assert row["status"] == "does not fit"
    assert "I/O pins" in row["message"] and row["fmax_mhz"] is None and row["luts"] > 0


def test_the_report_shows_the_synthesis_table_and_sweep_plot(tmp_path, shaper_row):
    failed = dict(shaper_row, block="dsm_top", status="does not fit", luts=None, ffs=None,
                  brams=None, fmax_mhz=None, message="nextpnr exited 1: too many cells")
    large = dict(shaper_row, block="gx_plane", nextpnr_options=list(synth.LARGE_DESIGN_OPTIONS))
    (tmp_path / "synth.json").write_text(json.dumps({"rows": [shaper_row, failed, large]}))
    (tmp_path / "sweep").mkdir()
    rows = [{"point": {"flit_bytes": str(b)}, "quantity": q, "model": v * b, "unit": u,
             "met": None} for b in (16, 32, 64)
            for q, v, u in (("LUTs", 10, "LUTs"), ("flip-flops", 9, "FFs"), ("Fmax", 3, "MHz"))]
    sweep = {"fabric": "synth", "experiment": "gx_plane", "simulator": "ecp5",
             "grid": {"flit_bytes": ["16", "32", "64"]}, "rows": rows}
    (tmp_path / "sweep" / "synth.gx_plane.json").write_text(json.dumps(sweep))
    # a second sweep of the block under --tag is shown too, in a plot of its own
    (tmp_path / "sweep" / "synth.gx_plane.deep.json").write_text(json.dumps(
        dict(sweep, tag="deep")))
    lines, plots = _synth_section(tmp_path)
    text = "\n".join(lines)
    assert "## FPGA synthesis" in text
    assert f"| shaper | {shaper_row['device']} |" in text
    assert f"{shaper_row['fmax_mhz']:.1f}" in text
    assert "| dsm_top |" in text and "**does not fit**: nextpnr exited 1: too many cells" in text
    options = " ".join(synth.LARGE_DESIGN_OPTIONS)
    listed = [line for line in lines if f"nextpnr ran with `{options}`" in line]
    assert len(listed) == 1 and listed[0].endswith(" on gx_plane.")    # not the shaper
    # a grid typed in another base, or of a string field, still draws
    hexed = dict(sweep, grid={"flit_bytes": ["0x10", "32", "6.4e1"]}, tag="hex",
                 rows=[dict(r, point={"flit_bytes": {"16": "0x10", "32": "32", "64": "6.4e1"}[
                     r["point"]["flit_bytes"]]}) for r in rows])
    (tmp_path / "sweep" / "synth.gx_plane.hex.json").write_text(json.dumps(hexed))
    named = dict(sweep, grid={"gx_planes": ["gx0,gx1", "gx0"]}, tag="planes",
                 rows=[dict(r, point={"gx_planes": "gx0,gx1" if i < 3 else "gx0"})
                       for i, r in enumerate(rows[:6])])
    (tmp_path / "sweep" / "synth.gx_plane.planes.json").write_text(json.dumps(named))
    lines, plots = _synth_section(tmp_path)
    assert [p.name for p in plots] == ["synth_sweep_gx_plane.png",
                                       "synth_sweep_gx_plane.deep.png",
                                       "synth_sweep_gx_plane.hex.png",
                                       "synth_sweep_gx_plane.planes.png"]
    (tmp_path / "sweep" / "synth.gx_plane.hex.json").unlink()
    (tmp_path / "sweep" / "synth.gx_plane.planes.json").unlink()
    lines, plots = _synth_section(tmp_path)
    text = "\n".join(lines)
    # each block's untagged sweep first, whatever its tags spell
    assert [p.name for p in plots] == ["synth_sweep_gx_plane.png",
                                       "synth_sweep_gx_plane.deep.png"]
    assert "(`fabricsim sweep synth.gx_plane --tag deep`, ecp5)" in text
    (tmp_path / "sweep" / "synth.gx_plane.deep.json").write_text(json.dumps(
        dict(sweep, tag="../x")))
    with pytest.raises(ValueError, match="key 'tag' must be letters"):
        _synth_section(tmp_path)
    (tmp_path / "sweep" / "synth.gx_plane.deep.json").unlink()
    assert next(iter(plots.values())).startswith(b"\x89PNG")
    (tmp_path / "synth.json").write_text(json.dumps({"rows": [{"block": "x"}]}))
    with pytest.raises(ValueError, match="not a synthesis file"):
        _synth_section(tmp_path)
    assert _synth_section(tmp_path / "nothing") == ([], {})


def test_bad_synthesis_input_is_refused(tmp_path, capsys):
    base = ["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "synth"]
    assert main(base + ["noc_router"]) == 2
    assert "BLOCK must be one of shaper," in capsys.readouterr().err
    assert main(base + ["shaper", "--device", "virtex"]) == 2
    assert "--device must be one of ecp5, ice40, not 'virtex'" in capsys.readouterr().err
    assert main(base + ["gx_plane", "--device", "ice40"]) == 2
    assert "is not a target of gx_plane" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[dsm]\nflit_bytes = 48\n")
    assert main(base + ["shaper", "--config", str(bad)]) == 2
    # a value is checked as the block is built; the refusal names the file
    assert (f"--config {bad}: [dsm] flit_bytes must be one of 16, 32, 64, not 48 (as shaper "
            "is built)" in capsys.readouterr().err)
    bad.write_text("[nvlink]\nx = 1\n")
    assert main(base + ["shaper", "--config", str(bad)]) == 2
    assert f"--config {bad}: tables must be among dsm, mesh, pcie, not 'nvlink'" in capsys.readouterr().err
    bad.write_text("[dsm]\nlink_bufer_flits = 4\n")
    assert main(base + ["shaper", "--config", str(bad)]) == 2
    assert (f"--config {bad}: [dsm] field must be one of " in (err := capsys.readouterr().err)
            and "not 'link_bufer_flits' (did you mean link_buffer_flits?)" in err), err
    bad.write_bytes("[dsm]\nflit_bytes = 16\n".encode("utf-16"))
    assert main(base + ["shaper", "--config", str(bad)]) == 2
    assert (f"--config must be a TOML file in UTF-8, not {str(bad)!r} (byte 0: invalid start "
            "byte)" in capsys.readouterr().err)
    bad.write_text("[dsm\n")
    assert main(base + ["shaper", "--config", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    # The file's types are kept: a string is no number, a flag no number.
    for table, text, message in (
            ("dsm", 'flit_bytes = "16"', 'flit_bytes must be an integer, not "16"'),
            ("dsm", "flit_bytes = true", "flit_bytes must be an integer, not true"),
            ("mesh", "placement = 3", "placement must be an array of numbers or of [x, y] pairs, not 3"),
            ("mesh", "placement = [true, false]",
             "placement must be an array of numbers or of [x, y] pairs, not [true, false]")):
        bad.write_text(f"[{table}]\n{text}\n")
        assert main(base + ["shaper", "--config", str(bad)]) == 2
        assert f"--config {bad}: [{table}] {message}" in capsys.readouterr().err
    # A run-time field changes no hardware; a table is checked for the blocks
    # it applies to (below: dsm's, not mesh's); one table per fabric.
    for text, message in (
            ("[dsm]\nshared_vc = true\n", f"--config {bad}: [dsm] fields must be among its "
                                           "structural ones, cpcs,"),
            ("[mesh]\nflit_bytes = 24\n[dsm]\nflit_bytes = 24\n",
             f"--config {bad}: [dsm] flit_bytes must be one of 16, 32, 64, not 24"),
            ("[[dsm]]\nflit_bytes = 16\n", f"--config {bad}: dsm must be one table, [dsm], "
                                            "not list")):
        bad.write_text(text)
        assert main(base + ["shaper", "--config", str(bad)]) == 2
        (err,) = capsys.readouterr().err.strip().splitlines()
        assert err.startswith(f"fabricsim: error: {message}"), err
    assert main(base + ["shaper", "--timeout", "0"]) == 2
    assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    assert main(base + ["shaper", "--freq", "0"]) == 2
    assert "--freq must be a clock in MHz from 1 to 1000" in capsys.readouterr().err
    assert not (tmp_path / "r" / "synth.json").exists()
    with pytest.raises(UsageError, match="BLOCK must be one of"):
        synth.synthesise("nothing", "ecp5", build_root=tmp_path)


def test_a_config_table_is_checked_as_its_blocks_are_built():
    """A value that suits the small mesh top (two rows of its two shires) is
    taken for it; a table no planned block uses is left unchecked."""
    assert synth.plan(["mesh_top"], [], {"mesh": ["mesh_rows=2"]}) == [
        ("mesh_top", "ecp5", ("mesh_rows=2",))]
    assert synth.plan(["shaper"], ["ecp5"], {"mesh": ["flit_bytes=24"]}) == [
        ("shaper", "ecp5", ())]
    with pytest.raises(UsageError, match="^flit_bytes must be one of 8, 16, 32, not 24$"):
        synth.plan(["mesh_router"], [], {"mesh": ["flit_bytes=24"]})
    with pytest.raises(UsageError, match=r"^--config c\.toml: \[mesh\] flit_bytes must be one "
                                         r"of 8, 16, 32, not 24 \(as mesh_router is built\)$"):
        synth.plan(["mesh_router"], [], {"mesh": ["flit_bytes=24"]}, "c.toml")


def test_a_config_file_may_start_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf[dsm]\nflit_bytes = 16\n")
    assert load_config_file(path) == {"dsm": ["flit_bytes=16"]}


def test_a_config_file_gives_a_placement_as_cells_or_flat(tmp_path):
    """A TOML array of [x, y] cells and a flat array both set the placement."""
    top = synth.block_named("mesh_top")
    for text in ("placement = [[1, 0], [0, 0]]", "placement = [1, 0, 0, 0]"):
        path = tmp_path / "c.toml"
        path.write_text(f"[mesh]\nmesh_cols = 2\nmesh_rows = 1\n{text}\n")
        cfg = synth.block_config(top, load_config_file(path)["mesh"])
        assert (cfg.mesh_cols, cfg.mesh_rows, cfg.placement) == (2, 1, ((1, 0), (0, 0)))


def test_the_small_blocks_are_synthesised_small_unless_the_config_file_says_otherwise(tmp_path):
    """The shire network and the SM endpoint are built at
    :data:`sim.synth.SMALL_BLOCKS`, and a ``--config`` field replaces the
    small value it names; other blocks keep their fabric's default."""
    shape = lambda c: (c.neighbourhoods, c.minions_per_neighbourhood, c.flit_bytes)  # noqa: E731
    shire = synth.block_named("shire_network")
    cfg = synth.block_config(shire)
    assert shape(cfg) == (2, 2, 8)
    assert shire.describe(cfg).startswith("2 neighbourhoods of 2, 8 B flits")
    path = tmp_path / "c.toml"
    path.write_text("[mesh]\nflit_bytes = 16\n")
    items = load_config_file(path)["mesh"]
    assert shape(synth.block_config(shire, items)) == (2, 2, 16)
    assert shape(synth.block_config(synth.block_named("mesh_router"))) == (4, 8, 16)
    assert shape(synth.block_config(synth.block_named("mesh_top"))) == (1, 2, 8)
    endpoint = synth.block_named("sm_endpoint")
    assert synth.block_config(endpoint).smem_bytes == 96 * 1024
    assert "smem_bytes=98304" in endpoint.describe(synth.block_config(endpoint))
    path.write_text("[dsm]\nsmem_bytes = 65536\n")
    dsm_items = load_config_file(path)["dsm"]
    assert synth.block_config(endpoint, dsm_items).smem_bytes == 65536
    assert synth.block_config(endpoint, ["flit_bytes=16"]).smem_bytes == 96 * 1024
    assert synth.block_config(synth.block_named("ack_coalescer")).smem_bytes == \
        DsmConfig().smem_bytes
    switch = synth.block_named("pcie_switch")
    beats = PcieConfig().switch_buffer_beats
    assert f"switch_buffer_beats={beats}" in switch.describe(synth.block_config(switch))


def test_a_block_named_twice_is_synthesised_once():
    assert synth.plan(["shaper", "shaper"]) == synth.plan(["shaper"])


def test_units_start_longest_first_by_their_last_time(tmp_path):
    """Never-timed units first, the likely long ones (tops, the blocks kept
    hierarchical) before the small ones; then the timed ones, longest first.
    ``fabricsim synth`` records each unit's time in the build folder."""
    tasks = synth.plan(["shaper", "gx_plane", "dsm_top", "round_robin"])
    names = lambda order: [synth.unit_name(tasks[i]) for i in order]   # noqa: E731
    assert names(synth.start_order(tasks, {})) == [
        "dsm_top/ecp5", "gx_plane/ecp5", "round_robin/ecp5", "round_robin/ice40",
        "shaper/ecp5", "shaper/ice40"]
    timed = {"gx_plane/ecp5": 900.0, "round_robin/ice40": 2.0, "shaper/ecp5": 5.0,
             "dsm_top/ecp5": 34.0}
    assert names(synth.start_order(tasks, timed)) == [
        "round_robin/ecp5", "shaper/ice40",
        "gx_plane/ecp5", "dsm_top/ecp5", "shaper/ecp5", "round_robin/ice40"]
    assert main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "synth",
                 "round_robin", "--device", "ice40", "--jobs", "1"]) == 0
    seconds = json.loads((tmp_path / "b" / "synth" / "seconds.json").read_text())
    assert list(seconds) == ["round_robin/ice40"] and seconds["round_robin/ice40"] > 0


def test_a_synthesis_sweep_writes_one_row_per_point_and_quantity(tmp_path):
    assert main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "sweep",
                 "synth.round_robin", "--grid", "cpcs=3", "--jobs", "1"]) == 0
    data = json.loads((tmp_path / "r" / "sweep" / "synth.round_robin.json").read_text())
    assert [r["quantity"] for r in data["rows"]] == ["LUTs", "flip-flops", "block RAMs", "Fmax"]
    assert all(r["model"] is not None for r in data["rows"])
    with open(tmp_path / "r" / "sweep" / "synth.round_robin.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    assert [(r["quantity"], r["status"]) for r in lines] == [
        (q, "ok") for q in ("LUTs", "flip-flops", "block RAMs", "Fmax")]


def test_a_synthesis_sweep_of_a_field_the_block_does_not_use_is_refused(tmp_path, capsys):
    """Points whose Verilog of the block is the same would each synthesise
    the same logic, minutes apiece: refused before any synthesis, and the
    build folder keeps only the Verilog made to compare them."""
    assert main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "sweep",
                 "synth.round_robin", "--grid", "data_seed=1,2,3"]) == 2
    assert capsys.readouterr().err == (
        "fabricsim: error: sweep points data_seed=1 and data_seed=2 give round_robin the same "
        "logic: data_seed changes nothing in it; sweep a field it uses\n")
    assert not (tmp_path / "r").exists() and not (tmp_path / "b" / "synth").exists()


def test_a_bad_synthesis_sweep_point_is_named(tmp_path, capsys):
    assert main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "sweep",
                 "synth.gx_plane", "--grid", "flit_bytes=16,48"]) == 2
    assert "sweep point flit_bytes=48: flit_bytes must be one of 16, 32, 64" \
        in capsys.readouterr().err
    assert main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"), "sweep",
                 "synth.noc", "--grid", "flit_bytes=16"]) == 2
    assert "NAME must be synth.BLOCK with BLOCK one of" in capsys.readouterr().err


def test_a_block_builds_into_a_board_bitstream(tmp_path, capsys):
    """The README's board example, with the small arbiter: a bitstream for the
    ULX3S's ECP5-85F and nextpnr's timing of the harness."""
    from sim import board

    assert board.main(["round_robin", "--build", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "board" / "ulx3s-85f-round_robin"
    assert (folder / "top.bit").stat().st_size > 100_000
    assert "Max frequency for clock" in out
    assert board.main(["round_robin", "--board", "de10", "--build", str(tmp_path)]) == 2
    assert "--board must be one of ulx3s-85f, icebreaker, not 'de10'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[dsm]\ncpcs = 0\n")
    assert board.main(["round_robin", "--build", str(tmp_path / "b"), "--config", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"sim.board: error: --config {bad}: [dsm] cpcs must be a positive integer, not 0 (as "
        "round_robin is built)")
    assert not (tmp_path / "b").exists()


def test_make_synth_shows_the_units_running(tmp_path, capsys, monkeypatch, progress_lines):
    """A unit can take 15 minutes: while they run, piped output gets a line
    naming the ones running and how many are done (every
    PIPED_PROGRESS_SECONDS)."""
    import concurrent.futures

    import sim.cli

    def synthesise_or_error(block, device, *args):
        progress_lines(progress_lines(0) + 2)   # a line made while this unit runs
        return {"block": block, "device": device, "config": "", "luts": 1, "ffs": 1,
                "brams": 0, "fmax_mhz": 200.0, "status": "ok", "message": "", "seconds": 1.0}

    monkeypatch.setattr(sim.cli, "pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    monkeypatch.setattr(synth, "synthesise_or_error", synthesise_or_error)
    assert main(["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "synth",
                 "round_robin", "--jobs", "1"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "0/2 block/device pairs done after T s; running: round_robin/" in err
    assert "1/2 block/device pairs done after T s; running: round_robin/" in err
