"""Bad input stops with one clear line naming the field, before any build."""

import pytest

from hdl.etsoc.config import MeshConfig
from hdl.hopper.config import DsmConfig
from sim.cli import UsageError, main, parse_overrides, resolve_names
from sim.config_file import check_structural, load_config_file, with_config_items
from sim.experiments import dsm


@pytest.mark.parametrize("changes,field", [
    ({"cluster_size": 0}, "cluster_size"),
    ({"cluster_size": 17}, "cluster_size"),
    ({"cluster_size": 2, "placement": (3, 3)}, "placement"),
    ({"cluster_size": 2, "placement": (0, 18)}, "placement"),
    ({"payload_kib": (16, 24.01)}, "payload_kib"),
    ({"payload_kib": (0.015625, 0.03125)}, "payload_kib"),     # 16 B and 32 B: one flit each
    ({"gx_planes": ""}, "gx_planes"),
    ({"gx_planes": "none"}, "gx_planes"),
    ({"flit_bytes": 24}, "flit_bytes"),
    ({"shaper_flits": 4, "shaper_cycles": 3}, "shaper_flits"),
])
def test_invalid_configuration_names_the_field(changes, field):
    with pytest.raises(ValueError) as info:
        DsmConfig(**changes)
    message = str(info.value)
    assert message.startswith(field) and "\n" not in message


def test_unknown_traffic_kind_is_rejected():
    with pytest.raises(ValueError, match="^kind must be one of load, store, tma, not 'atomic'"):
        dsm.build_run(DsmConfig(), [dsm.Stream("atomic", 0, 1, 1024)], "x")


def test_payload_must_be_a_multiple_of_16_bytes():
    with pytest.raises(ValueError, match="multiple of 16 B"):
        dsm.build_run(DsmConfig(), [dsm.Stream("tma", 0, 1, 1000)], "x")


def test_regions_that_overflow_shared_memory_are_rejected():
    streams = [dsm.Stream("load", 0, 1, 96 * 1024), dsm.Stream("store", 1, 0, 96 * 1024),
               dsm.Stream("tma", 0, 1, 16 * 1024)]
    with pytest.raises(ValueError, match=r"^payload_kib must be sizes whose regions fit "
                                         r"smem_bytes \(204800 B\): run x puts"):
        dsm.build_run(DsmConfig(), streams, "x")


def test_sizes_over_shared_memory_are_refused_by_the_experiment_that_uses_them():
    # 256 KiB is a valid size; one-way runs cannot fit it in 200 KiB of shared
    # memory, and an experiment of fixed sizes blames smem_bytes instead.
    cfg = DsmConfig(payload_kib=(16, 256))
    with pytest.raises(ValueError, match="^payload_kib must be sizes whose regions fit"):
        dsm.build_runs(cfg, dsm.EXPERIMENTS["one_way"])
    assert dsm.build_runs(cfg, dsm.EXPERIMENTS["topology"])
    with pytest.raises(ValueError, match="^smem_bytes must hold the 131072 B"):
        dsm.build_runs(DsmConfig(smem_bytes=65536), dsm.EXPERIMENTS["topology"])


def test_runs_that_never_came_back_are_an_error_not_a_shorter_fit():
    cfg = DsmConfig()
    experiment = dsm.EXPERIMENTS["one_way"]
    runs = dsm.build_runs(cfg, experiment)
    with pytest.raises(dsm.ExperimentError, match=f"^one_way: 0 of {len(runs)} runs came back"):
        dsm.analyse(cfg, experiment, runs, [], "verilator")


def test_a_smaller_shared_memory_has_a_hardware_configuration():
    # The default tile sizes (up to 96 KiB) do not fit 32 KiB; the build key
    # keeps the structural field and the run-time defaults without refusing.
    cfg = DsmConfig(smem_bytes=32 * 1024, payload_kib=(16, 32))
    hardware = cfg.hardware()
    assert hardware.smem_bytes == 32 * 1024
    assert hardware.payload_kib == DsmConfig().payload_kib
    assert hardware == DsmConfig(smem_bytes=32 * 1024, payload_kib=(8, 16)).hardware()
    assert hardware != DsmConfig().hardware()


def test_set_parses_by_field_type():
    cfg = parse_overrides(DsmConfig, ["cluster_size=4", "payload_kib=16,32", "gx_planes=gx0",
                                      "sm_clock_ghz=1.5", "ack_threshold_flits=0x10"])
    assert (cfg.cluster_size, cfg.payload_kib, cfg.plane_enable, cfg.sm_clock_ghz,
            cfg.ack_threshold_flits) == (4, (16, 32), 1, 1.5, 16)
    # a decimal with a leading zero, as int(x, 0) alone would refuse
    cfg = parse_overrides(DsmConfig, ["shaper_cycles=03", "payload_kib=016,032"])
    assert (cfg.shaper_cycles, cfg.payload_kib) == (3, (16, 32))
    with pytest.raises(UsageError, match="shaper_cycles must be a positive integer, not '0 3'"):
        parse_overrides(DsmConfig, ["shaper_cycles=0 3"])
    # a list as fabricsim list shows it, or as TOML writes it
    for text in ("(16, 32)", "[16,32]"):
        assert parse_overrides(DsmConfig, [f"payload_kib={text}"]).payload_kib == (16, 32)
    with pytest.raises(UsageError, match="payload_kib must be comma-separated numbers"):
        parse_overrides(DsmConfig, ["payload_kib=[16,32)"])
    # [x, y] pairs, as a TOML file may give a mesh placement, are flattened
    two = ["mesh_cols=2", "mesh_rows=1", "compute_shires=2"]
    flat = parse_overrides(MeshConfig, [*two, "placement=0,0,1,0"]).placement
    for text in ("[[0,0],[1,0]]", "[0, 0], [1, 0]", "(0,0),(1,0)", "[(0, 0), (1, 0)]"):
        assert parse_overrides(MeshConfig, [*two, f"placement={text}"]).placement == flat
    for text in ("[[0,0],[1]]", "[[0,0],[1,0)]", "[[0,0,1],[1,0]]"):
        with pytest.raises(UsageError, match="placement must be comma-separated numbers"):
            parse_overrides(MeshConfig, [*two, f"placement={text}"])


def test_a_config_file_gives_set_items_and_the_command_line_wins(tmp_path):
    """Any field (structural or run-time) in a TOML file, as --set items in
    the file's order; a --set or a sweep's --grid of the same field wins."""
    path = tmp_path / "whatif.toml"
    path.write_text("[dsm]\nshaper_flits = 3\nshaper_cycles = 4\nshared_vc = true\n"
                    "payload_kib = [16, 32]\n\n[mesh]\nplacement = [[0, 0], [1, 0]]\n"
                    "mesh_cols = 2\nmesh_rows = 1\ncompute_shires = 2\n")
    items = load_config_file(path)
    assert items == {"dsm": ["shaper_flits=3", "shaper_cycles=4", "shared_vc=true",
                             "payload_kib=16,32"],
                     "mesh": ["placement=0,0,1,0", "mesh_cols=2", "mesh_rows=1",
                              "compute_shires=2"]}
    cfg = parse_overrides(DsmConfig, items["dsm"])
    assert (cfg.shaper_flits, cfg.shaper_cycles, cfg.shared_vc, cfg.payload_kib) == (
        3, 4, True, (16, 32))
    assert with_config_items(items["dsm"], ["shaper_cycles=5"], held=["shared_vc"]) == [
        "shaper_flits=3", "payload_kib=16,32", "shaper_cycles=5"]
    with pytest.raises(UsageError, match=r"\[dsm\] fields must be among its structural ones"):
        check_structural(items, ["mesh", "dsm"], path)
    check_structural(items, ["mesh"], path)
    # the log names what the file gave and what the command line replaced
    import io

    from rich.console import Console

    from sim.cli import log_config_tables
    console = Console(file=io.StringIO(), width=400, log_time=False, log_path=False)
    taken = with_config_items(items["dsm"], ["shaper_cycles=5"], held=["shared_vc"])
    log_config_tables(console, path, {"dsm": items["dsm"]}, {"dsm": taken}, "run")
    assert console.file.getvalue().rstrip() == (
        f"--config {path}: [dsm] shaper_flits=3, payload_kib=16,32; shaper_cycles, shared_vc "
        f"given on the command line instead")


@pytest.mark.parametrize("items,text", [
    (["nosuch=1"], "--set field must be one of"),
    (["cluster_size"], "--set takes FIELD=VALUE"),
    (["=3"], "--set takes FIELD=VALUE, a field's name before the '=', not '=3'"),
    (["cluster_size=two"], "cluster_size must be an integer"),
    (["cluster_size=99"], "cluster_size must be an integer from 1 to 16"),
])
def test_bad_set_items(items, text):
    with pytest.raises(UsageError, match=text):
        parse_overrides(DsmConfig, items)


def test_an_unknown_field_is_pointed_to_its_fabric_or_the_closest_field():
    """A field of another fabric says which; a misspelt one names the closest
    field; either way the message lists the fabric's fields first."""
    from hdl.pcie.config import PcieConfig
    from sim.cli import _split_sets
    from sim.sweep import parse_grid

    for items, hint in ((["lanes=8"], " (lanes is a field of pcie)"),
                        (["shaper_flit=3"], " (did you mean shaper_flits?)"),
                        (["nosuch=1"], "")):
        with pytest.raises(UsageError) as info:
            parse_overrides(DsmConfig, items)
        name = items[0].partition("=")[0]
        assert str(info.value).startswith("--set field must be one of cpcs, ")
        assert str(info.value).endswith(f", not {name!r}{hint}")
    with pytest.raises(UsageError, match=r", not 'lane' \(did you mean lanes\?\)$"):
        parse_grid(PcieConfig, ["lane=8,16"])
    # misspelt, and of another fabric; and with several fabrics
    with pytest.raises(UsageError, match=r"\(did you mean shaper_flits, a field of dsm\?\)$"):
        parse_overrides(PcieConfig, ["shaper_flit=3"])
    with pytest.raises(UsageError, match=r"^--set field must be a field of dsm, mesh, not "
                                         r"'lanes' \(lanes is a field of pcie\)$"):
        _split_sets(["dsm", "mesh"], ["lanes=8"])


def test_names_resolve_and_unknown_names_fail():
    assert ("dsm", "one_way") in resolve_names(["dsm"])
    assert resolve_names(["dsm.mixed"]) == [("dsm", "mixed")]
    with pytest.raises(UsageError, match="experiment must be one of"):
        resolve_names(["dsm.nope"])
    assert ("mesh", "round_trip") in resolve_names(["mesh"])
    assert ("pcie", "peer_copy") in resolve_names(["pcie"])
    with pytest.raises(UsageError, match="NAME must start with one of dsm, mesh, pcie"):
        resolve_names(["nvlink"])


def test_cli_exits_2_before_building_on_bad_input(tmp_path, capsys):
    status = main(["--build", str(tmp_path / "b"), "--results", str(tmp_path / "r"),
                   "run", "dsm.one_way", "--set", "cluster_size=0"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fabricsim: error: cluster_size must be") and "\n" not in err
    assert not (tmp_path / "b").exists() and not (tmp_path / "r").exists()


def test_cli_rejects_unknown_simulator(tmp_path, capsys, monkeypatch):
    status = main(["--build", str(tmp_path / "b"), "run", "dsm.one_way", "--sim", "xsim"])
    assert status == 2
    assert "fabricsim: error: --sim must be one of" in capsys.readouterr().err
    # the error names where the name came from: --sim, else the environment
    monkeypatch.setenv("FABRICSIM_SIM", "xsim")
    for argv in (["run", "dsm.one_way"], ["sweep", "pcie.peer_copy", "--grid", "lanes=8,16"]):
        assert main(["--build", str(tmp_path / "b"), *argv]) == 2
        assert ("fabricsim: error: $FABRICSIM_SIM must be one of verilator, icarus, not 'xsim'"
                in capsys.readouterr().err)
    assert main(["--build", str(tmp_path / "b"), "run", "dsm.one_way", "--sim", "verilator",
                 "--set", "cluster_size=0"]) == 2      # --sim over the environment
    assert "cluster_size must be" in capsys.readouterr().err


def test_list_shows_only_the_fabrics_named(capsys):
    assert main(["list", "pcie", "pcie"]) == 0
    out = capsys.readouterr().out
    assert "pcie configuration" in out and "pcie.peer_copy" in out
    assert "dsm" not in out and "mesh" not in out
