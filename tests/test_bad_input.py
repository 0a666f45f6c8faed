"""Bad input across the three fabrics and the command line.

Every case runs ``fabricsim`` as a user would (in-process, through
:func:`sim.cli.main`) and expects exit status 2, one line on stderr that
names the field and what is allowed, and nothing built or written: a bad
request never leaves a result behind that could pass for a good one.
"""

import json
import os
from pathlib import Path

import pytest

from sim.cli import main

#: (id, argv after the global options, the start of the message after "fabricsim: error: ").
CASES = [
    # --- the command line ----------------------------------------------------------
    ("no-command", [], "the following arguments are required: command"),
    ("unknown-command", ["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    ("run-without-name", ["run"], "the following arguments are required: NAME"),
    ("unknown-fabric", ["run", "nvlink"], "NAME must start with one of dsm, mesh, pcie"),
    ("unknown-experiment", ["run", "dsm.nope"], "experiment must be one of one_way,"),
    ("empty-experiment", ["run", "dsm."], "experiment must be one of one_way,"),
    ("unknown-field", ["run", "pcie", "--set", "cluster_size=2"],
     "--set field must be one of sockets,"),
    ("misspelt-field", ["run", "dsm.one_way", "--set", "shaper_flit=3"],
     "--set field must be one of cpcs,"),
    ("unknown-field-all", ["run", "all", "--set", "nosuch=2"],
     "--set field must be a field of dsm, mesh, pcie, not 'nosuch'"),
    ("set-without-value", ["run", "dsm.one_way", "--set", "cluster_size"],
     "--set takes FIELD=VALUE, a field's name before the '=', not 'cluster_size'"),
    ("set-without-field", ["run", "dsm.one_way", "--set", "=3"],
     "--set takes FIELD=VALUE, a field's name before the '=', not '=3'"),
    ("unknown-simulator", ["run", "pcie.peer_copy", "--sim", "xsim"],
     "--sim must be one of verilator, icarus, not 'xsim'"),
    ("unknown-flag", ["run", "dsm.one_way", "--fast"], "unrecognized arguments: --fast (see"),
    ("global-option-after-command", ["run", "dsm.one_way", "--results", "elsewhere"],
     "unrecognized arguments: --results elsewhere; --results goes before the command "
     "(fabricsim --results ... run ...)"),
    ("global-options-after-command", ["list", "--build=b", "--results=r"],
     "unrecognized arguments: --build=b --results=r; --results and --build go before the "
     "command (fabricsim --results ... run ...)"),
    ("zero-jobs", ["run", "dsm.one_way", "--jobs", "0"], "--jobs must be "
                                                         "an integer from 1 to 1024, not '0'"),
    ("list-unknown-fabric", ["list", "nvlink"], "FABRIC must be one of dsm, mesh, pcie or all, "
                                                "not 'nvlink'"),
    ("sweep-bad-grid-field", ["sweep", "dsm.one_way", "--grid", "nosuch=1,2"],
     "--grid field must be one of"),
    ("sweep-bad-point", ["sweep", "dsm.one_way", "--grid", "ack_threshold_flits=40,0"],
     "sweep point ack_threshold_flits=0: ack_threshold_flits must be"),
    ("sweep-field-the-experiment-sets", ["sweep", "dsm.ring", "--grid", "cluster_size=2,4"],
     "sweep point cluster_size=2: cluster_size must be given with a placement of 2 slots for "
     "dsm.ring, whose series place their 2, 4, 8, 16 ranks themselves, or left unset, "
     "not 2 alone"),
    ("sweep-bad-engine", ["sweep", "dsm.one_way", "--grid", "ack_threshold_flits=40",
                          "--engine", "slurm"], "argument --engine: invalid choice: 'slurm'"),
    # --- Hopper DSM (seed 000) -----------------------------------------------------
    # fields an experiment sets itself: a --set of them would have no effect
    ("dsm-cluster-size-set-by-series", ["run", "dsm.one_way", "--set", "cluster_size=1"],
     "cluster_size must be one of dsm.one_way's cluster sizes (2), given with a placement "
     "of that many slots, or left unset, not 1"),
    ("dsm-cluster-size-without-placement", ["run", "dsm.one_way", "--set", "cluster_size=2"],
     "cluster_size must be given with a placement of 2 slots for dsm.one_way, whose series "
     "place their 2 ranks themselves, or left unset, not 2 alone"),
    ("dsm-placement-fits-no-series", ["run", "dsm.one_way", "--set", "cluster_size=3",
                                      "--set", "placement=5,7,9"],
     "placement must name as many slots as one of dsm.one_way's cluster sizes (2), not 3 "
     "(5,7,9)"),
    ("dsm-placement-of-isolated-pairs", ["run", "dsm.isolated_pairs", "--set", "cluster_size=2",
                                         "--set", "placement=0,5"],
     "placement must be left unset for dsm.isolated_pairs, which places each source/target "
     "pair itself, not 0,5"),
    ("dsm-cluster-size-of-isolated-pairs", ["run", "dsm.isolated_pairs", "--set", "cluster_size=2"],
     "cluster_size must be left unset for dsm.isolated_pairs, which places each source/target "
     "pair itself, not 2"),
    ("dsm-payload-fixed", ["run", "dsm.topology", "--set", "payload_kib=16,32"],
     "payload_kib must be left unset for dsm.topology, which moves 64 KiB per active SM, "
     "not 16,32"),
    ("dsm-planes-set-by-series", ["run", "dsm.plane_off", "--set", "gx_planes=gx0"],
     "gx_planes must be left unset for dsm.plane_off, whose series switch the planes "
     "themselves, not 'gx0'"),
    ("dsm-watchdog-range", ["run", "dsm.one_way", "--set", "watchdog_cycles=99999999999999999999"],
     "watchdog_cycles must be an integer from 1 to 1073741824"),
    ("dsm-watchdog-just-over", ["run", "dsm.one_way", "--set", "watchdog_cycles=1073741825"],
     "watchdog_cycles must be an integer from 1 to 1073741824, not 1073741825"),
    ("pcie-chunk-of-the-pageable-copy", ["run", "pcie.pageable_copy", "--set",
                                         "staging_chunk_bytes=4096"],
     "staging_chunk_bytes must be left unset for pcie.pageable_copy, which stages through "
     "pageable_chunk_bytes (set that instead), not 4096"),
    ("pcie-link-faults-retrain-themselves", ["run", "pcie.link_faults", "--set",
                                             "retrained_lanes=4"],
     "retrained_lanes must be left unset for pcie.link_faults, whose scenarios set it "
     "themselves, not 4"),
    ("pcie-no-experiment-takes-both-chunks", ["run", "pcie", "--set", "staging_chunk_bytes=4096",
                                              "--set", "pageable_chunk_bytes=4096"],
     "the fields set must leave at least one experiment to run, not none: pcie.peer_copy, "
     "pcie.kernel_push, pcie.kernel_pull, pcie.pageable_copy and pcie.link_faults refuse "
     "staging_chunk_bytes, pcie.host_staged refuses pageable_chunk_bytes (run one alone to "
     "see why)"),
    ("pcie-size-the-experiment-does-not-use", ["run", "pcie.host_staged", "--set",
                                               "pageable_chunk_bytes=4096"],
     "pageable_chunk_bytes must be left unset for pcie.host_staged, which does not use it "
     "(it uses max_read_request_bytes, staging_chunk_bytes), not 4096"),
    ("pcie-kernel-size-for-the-copy-engine", ["run", "pcie.peer_copy", "--set",
                                              "kernel_write_bytes=128"],
     "kernel_write_bytes must be left unset for pcie.peer_copy, which does not use it "
     "(it uses max_payload_bytes), not 128"),
    ("pcie-read-field-of-a-push", ["run", "pcie.kernel_push", "--set", "read_tags=8"],
     "read_tags must be left unset for pcie.kernel_push, whose copies only write, reading "
     "nothing (it has no effect there), not 8"),
    ("pcie-host-field-of-a-pull", ["run", "pcie.kernel_pull", "--set",
                                   "root_host_bytes_per_cycle=20"],
     "root_host_bytes_per_cycle must be left unset for pcie.kernel_pull, whose copies read "
     "peer memory, not host memory (it has no effect there), not 20"),
    ("pcie-retrained-width-of-no-gpu", ["run", "pcie.peer_copy", "--set", "retrained_lanes=4"],
     "retrained_lanes needs retrained_gpu set to a GPU from 0 to 7 (it is -1: no link "
     "retrained), else it has no effect; not 4 alone"),
    ("pcie-store-and-forward-buffer-short-of-a-tlp",
     ["run", "pcie.peer_copy", "--set", "retrained_gpu=0", "--set", "retrained_lanes=4",
      "--set", "max_payload_bytes=4096", "--set", "switch_buffer_beats=128",
      "--set", "switch_latency_cycles=0", "--set", "socket_latency_cycles=0"],
     "switch_buffer_beats must be at least a whole TLP (129 beats of max_payload_bytes and "
     "its header) while retrained_gpu's link is slower than the others: its switch port "
     "stores and forwards, not 128"),
    ("pcie-retrained-wider-than-the-others", ["run", "pcie.peer_copy", "--set", "lanes=4",
                                              "--set", "retrained_gpu=0", "--set",
                                              "retrained_lanes=16"],
     "retrained_lanes must be at most lanes (4) while retrained_gpu names a GPU (its link "
     "trains narrower than the others, not wider; retrained_lanes defaults to 8), not 16"),
    ("pcie-retrained-default-above-the-others", ["run", "pcie.peer_copy", "--set",
                                                 "generation=3", "--set", "retrained_gpu=0"],
     "retrained_generation must be at most generation (3) while retrained_gpu names a GPU "
     "(its link trains at a lower generation than the others, not a higher one; "
     "retrained_generation defaults to 4), not 4"),
    # a value no experiment of the fabric takes is named once, not by experiment
    ("pcie-retrained-rate-of-no-gpu", ["run", "pcie", "--set", "retrained_generation=3"],
     "retrained_generation needs retrained_gpu set"),
    ("pcie-retrained-rate-of-no-gpu-in-all", ["run", "all", "--set", "retrained_generation=3"],
     "pcie: retrained_generation needs retrained_gpu set"),
    # in a whole fabric's run, the experiment that refused the value is named
    ("mesh-no-far-shire", ["run", "mesh.message_size", "--set", "compute_shires=3"],
     "compute_shires (3) and placement must put a shire 8 hops from shire 0 for the "
     "message-size paths, not at most 3"),
    ("mesh-too-few-shires-for-a-fit", ["run", "mesh", "--set", "compute_shires=2"],
     "mesh.round_trip: compute_shires (2) and placement must give at least 2 different mesh "
     "hop counts"),
    ("dsm-wrong-type", ["run", "dsm.one_way", "--set", "cluster_size=two"],
     "cluster_size must be an integer"),
    ("dsm-cluster-range", ["run", "dsm.one_way", "--set", "cluster_size=0"],
     "cluster_size must be an integer from 1 to 16, not 0"),
    ("dsm-placement-shared-slot", ["run", "dsm.one_way", "--set", "cluster_size=2",
                                   "--set", "placement=0,0"],
     "placement must be distinct slots"),
    ("dsm-placement-no-slot", ["run", "dsm.one_way", "--set", "cluster_size=2",
                               "--set", "placement=0,18"],
     "placement must be slots from 0 to 17, not (0, 18)"),
    ("dsm-not-a-boolean", ["run", "dsm.one_way", "--set", "shared_vc=maybe"],
     "shared_vc must be true or false (or 1/0, yes/no, on/off), not 'maybe'"),
    ("dsm-request-queue", ["run", "dsm.mixed", "--set", "request_queue_flits=0"],
     "request_queue_flits must be a positive integer, not 0"),
    ("dsm-request-queue-deep", ["run", "dsm.mixed", "--set", "request_queue_flits=1000"],
     "request_queue_flits must be an integer from 1 to 256, not 1000"),
    ("dsm-link-buffer-deep", ["run", "dsm.one_way", "--set", "link_buffer_flits=1000000"],
     "link_buffer_flits must be an integer from 1 to 256, not 1000000"),
    ("dsm-responder-queue-deep", ["run", "dsm.one_way", "--set", "responder_queue=257"],
     "responder_queue must be an integer from 1 to 256, not 257"),
    ("dsm-flit-width", ["run", "dsm.one_way", "--set", "flit_bytes=24"],
     "flit_bytes must be one of 16, 32, 64, not 24"),
    ("dsm-no-plane", ["run", "dsm.one_way", "--set", "gx_planes=gx7"],
     "gx_planes must be one of 'gx0,gx1', 'gx0', 'gx1'"),
    ("dsm-sizes-not-numbers", ["run", "dsm.one_way", "--set", "payload_kib=abc"],
     "payload_kib must be comma-separated numbers, not 'abc'"),
    ("non-ascii-digits", ["run", "pcie.peer_copy", "--set", "lanes=\u0661\u0666"],
     "lanes must be one of 1, 2, 4, 8, 16, not '\u0661\u0666'"),
    ("non-ascii-sizes", ["run", "dsm.one_way", "--set", "payload_kib=16,\uff13\uff12"],
     "payload_kib must be comma-separated numbers, not '16,\uff13\uff12'"),
    ("dsm-one-size", ["run", "dsm.one_way", "--set", "payload_kib=0"],
     "payload_kib must be at least two sizes, each given once"),
    ("dsm-negative-size", ["run", "dsm.one_way", "--set", "payload_kib=-16,32"],
     "payload_kib must be positive sizes in KiB, each a multiple of 16 B, not (-16, 32)"),
    ("dsm-placement-as-cells", ["run", "dsm.one_way", "--set", "placement=[0, 0], [1, 0]"],
     "placement must be 2 slots (one per rank of cluster_size; set cluster_size=4 with it "
     "to place a cluster of 4), not (0, 0, 1, 0) (the [x, y] pairs given are read as this "
     "flat list)"),
    ("dsm-too-many-sizes", ["run", "dsm.one_way", "--set",
                            "payload_kib=" + ",".join(str(16 * k) for k in range(1, 66))],
     "payload_kib must be at most 64 sizes, not 65"),
    ("dsm-shaper-ratio", ["run", "dsm.one_way", "--set", "shaper_flits=4",
                          "--set", "shaper_cycles=3"],
     "shaper_flits must be at most shaper_cycles (3), not 4"),
    ("dsm-clock-text", ["run", "dsm.one_way", "--set", "sm_clock_ghz=fast"],
     "sm_clock_ghz must be a clock in GHz from 0.1 to 10, as a decimal number, not 'fast'"),
    ("dsm-clock-hex", ["run", "dsm.one_way", "--set", "sm_clock_ghz=0x1"],
     "sm_clock_ghz must be a clock in GHz from 0.1 to 10, as a decimal number, not '0x1'"),
    ("dsm-clock-range", ["run", "dsm.one_way", "--set", "sm_clock_ghz=-1"],
     "sm_clock_ghz must be a clock in GHz from 0.1 to 10"),
    ("dsm-clock-tiny", ["run", "dsm.one_way", "--set", "sm_clock_ghz=5e-324"],
     "sm_clock_ghz must be a clock in GHz from 0.1 to 10, not 5e-324"),
    # --- ET-SoC-1 mesh (seed 002) --------------------------------------------------
    ("mesh-size", ["run", "mesh.round_trip", "--set", "mesh_cols=0"],
     "mesh_cols must be an integer from 1 to 16, not 0"),
    ("mesh-placement-shape", ["run", "mesh.round_trip", "--set", "placement=1,2,3"],
     "placement must be pairs of x, y coordinates"),
    ("mesh-placement-not-numbers", ["run", "mesh.round_trip", "--set", "placement=abc"],
     "placement must be comma-separated numbers, not 'abc'"),
    ("mesh-clock", ["run", "mesh.round_trip", "--set", "minion_mhz=0"],
     "minion_mhz must be a clock in MHz from 10 to 5000"),
    ("mesh-flit-width", ["run", "mesh.round_trip", "--set", "flit_bytes=33"],
     "flit_bytes must be one of 8, 16, 32, not 33"),
    ("mesh-zero-credits", ["run", "mesh.round_trip", "--set", "link_buffer_flits=0"],
     "link_buffer_flits must be an integer from 1 to 64, not 0"),
    ("mesh-one-hop-count", ["run", "mesh.three_speeds", "--set", "mesh_cols=2", "--set",
                            "mesh_rows=1", "--set", "compute_shires=2", "--set", "placement=0,0,1,0"],
     "compute_shires (2) and placement must give at least 2 different mesh hop counts from "
     "shire 0 for a fit per hop, not [1]"),
    ("mesh-no-far-pairs", ["run", "mesh.one_kb", "--set", "mesh_cols=2", "--set", "mesh_rows=2",
                           "--set", "compute_shires=4", "--set", "placement=0,0,1,0,0,1,1,1"],
     "compute_shires (4) and placement must give at least 2 different mesh hop counts from 5 "
     "hops on for a fit per hop, not none"),
    ("dsm-sizes-in-one-flit", ["run", "dsm.one_way", "--set", "payload_kib=0.015625,0.03125"],
     "payload_kib must be at least two sizes that differ in flits of flit_bytes (32 B)"),
    ("dsm-payload-over-smem", ["run", "dsm.one_way", "--set", "smem_bytes=65536"],
     "payload_kib must be sizes whose regions fit smem_bytes (65536 B): run load@72KiB"),
    ("dsm-fixed-payload-over-smem", ["run", "dsm.topology", "--set", "smem_bytes=65536"],
     "smem_bytes must hold the 131072 B run stride1@64KiB puts on SM slot 1"),
    ("dsm-placement-with-a-space", ["run", "dsm.one_way", "--set", "cluster_size=2",
                                    "--set", "placement=[1 2, 5]"],
     "placement must be comma-separated numbers, not '[1 2, 5]'"),
    ("mesh-shires-on-a-one-shire-build", ["run", "mesh.barrier", "--set", "compute_shires=4"],
     "compute_shires=4 does not fit mesh.barrier's build (mesh_cols=1, mesh_rows=1,"),
    ("mesh-barrier-of-one-minion", ["run", "mesh.barrier", "--set", "neighbourhoods=1",
                                    "--set", "minions_per_neighbourhood=1"],
     "minions_per_neighbourhood must make neighbourhoods x minions_per_neighbourhood at least "
     "2 for a barrier inside a shire, not 1 (neighbourhoods 1)"),
    ("mesh-no-route-through-a-non-compute-cell", ["run", "mesh.non_compute", "--set",
                                                  "compute_shires=2"],
     "compute_shires and placement must route some pair of compute shires through a "
     "non-compute cell"),
    ("mesh-too-many-shires", ["run", "mesh.round_trip", "--set", "compute_shires=40"],
     "compute_shires must be an integer from 1 to 32, not 40"),
    ("mesh-neighbourhoods", ["run", "mesh.round_trip", "--set", "neighbourhoods=3"],
     "neighbourhoods must be one of 1, 2, 4, not 3"),
    # --- PCIe machine (seed 001) ---------------------------------------------------
    ("pcie-mps-not-power-of-two", ["run", "pcie.peer_copy", "--set", "max_payload_bytes=200"],
     "max_payload_bytes must be one of 128, 256, 512, 1024, 2048, 4096, not 200"),
    ("pcie-mps-too-large", ["run", "pcie.peer_copy", "--set", "max_payload_bytes=8192"],
     "max_payload_bytes must be one of 128, 256, 512, 1024, 2048, 4096, not 8192"),
    ("pcie-width", ["run", "pcie.peer_copy", "--set", "lanes=3"],
     "lanes must be one of 1, 2, 4, 8, 16, not 3"),
    ("pcie-width-type", ["run", "pcie.peer_copy", "--set", "lanes=16.5"],
     "lanes must be one of 1, 2, 4, 8, 16, not '16.5'"),
    ("pcie-read-trackers-type", ["run", "pcie.kernel_pull", "--set", "socket_read_bytes=1e4"],
     "socket_read_bytes must be an integer from 32 to 65535, not '1e4'"),
    ("pcie-read-trackers", ["run", "pcie.kernel_pull", "--set", "socket_read_bytes=64"],
     "socket_read_bytes must be at least kernel_read_bytes (128)"),
    ("pcie-generation", ["run", "pcie.peer_copy", "--set", "generation=2"],
     "generation must be one of 3, 4, 5, not 2"),
    ("pcie-zero-data-credits", ["run", "pcie.peer_copy", "--set", "rx_data_credits=0"],
     "rx_data_credits must be an integer from 2"),
    ("pcie-zero-header-credits", ["run", "pcie.peer_copy", "--set", "rx_header_credits=0"],
     "rx_header_credits must be an integer from 1"),
    ("pcie-gpu-missing", ["run", "pcie.peer_copy", "--set", "gpus_per_switch=1"],
     "sockets x switches_per_socket x gpus_per_switch must give at least 5 GPUs"),
    ("pcie-chunk", ["run", "pcie.host_staged", "--set", "staging_chunk_bytes=3000"],
     "staging_chunk_bytes must be a power of two from 4096"),
    ("pcie-socket-bandwidth", ["run", "pcie.peer_copy", "--set", "socket_bytes_per_cycle=0"],
     "socket_bytes_per_cycle must be an integer from 1 to 255, not 0"),
    ("pcie-skp-interval", ["run", "pcie.peer_copy", "--set", "skp_interval_blocks=1"],
     "skp_interval_blocks must be an integer from 16 to 4095, not 1"),
    # --- repeated, empty and oversized values --------------------------------------
    ("set-twice", ["run", "dsm.one_way", "--set", "shared_vc=true", "--set", "shared_vc=false"],
     "--set gives shared_vc more than once; give it once"),
    ("tuple-empty-item", ["run", "dsm.one_way", "--set", "payload_kib=16,,32"],
     "payload_kib must be comma-separated numbers with none left empty, not '16,,32'"),
    ("tuple-trailing-comma", ["run", "dsm.one_way", "--set", "payload_kib=16,32,"],
     "payload_kib must be comma-separated numbers with none left empty"),
    ("payload-size-twice", ["run", "dsm.one_way", "--set", "payload_kib=16,32,16"],
     "payload_kib must be at least two sizes, each given once, not (16, 32, 16)"),
    ("all-names-the-fabric", ["run", "all", "--set", "flit_bytes=64"],
     "mesh: flit_bytes must be one of 8, 16, 32, not 64"),
    ("synth-freq-not-a-number", ["synth", "shaper", "--freq", "abc"],
     "--freq must be a number, not 'abc' (see fabricsim --help)"),
    ("jobs-not-a-number", ["run", "dsm.one_way", "-j", "two"],
     "--jobs must be an integer from 1 to 1024, not 'two'"),
    ("jobs-too-many", ["run", "dsm.one_way", "--jobs", "99999999999"],
     "--jobs must be an integer from 1 to 1024"),
    ("sweep-jobs-too-many", ["sweep", "dsm.one_way", "--grid", "shaper_flits=1,2",
                             "--jobs", "5000"],
     "--jobs must be an integer from 1 to 1024"),
    # Python 3.11's argparse would give the option an empty list
    ("option-given-the-end-of-options", ["sweep", "pcie.peer_copy", "--grid", "lanes=8",
                                         "--metric=--"],
     "--metric takes a value other than '--', not '--metric=--'"),
]


def _run(tmp_path, capsys, argv, results=None):
    """Run ``fabricsim`` with its folders in ``tmp_path``; return (status, stderr)."""
    results = results or tmp_path / "results"
    full = ["--build", str(tmp_path / "build"), "--results", str(results), *argv]
    try:
        status = main(full)
    except SystemExit as stop:      # argparse's own errors
        status = stop.code
    return status, capsys.readouterr().err


def _assert_refused(status, err, message):
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fabricsim: error: {message}"), lines[0]


@pytest.mark.parametrize("argv,message", [pytest.param(a, m, id=i) for i, a, m in CASES])
def test_bad_input_is_refused_before_anything_is_built(tmp_path, capsys, argv, message):
    status, err = _run(tmp_path, capsys, argv)
    _assert_refused(status, err, message)
    assert not (tmp_path / "build").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", [["run", "dsm.one_way"],
                                     ["sweep", "dsm.one_way", "--grid", "ack_threshold_flits=40,20"]],
                         ids=["run", "sweep"])
@pytest.mark.parametrize(("text", "message"), [
    pytest.param("[dsm]\nshaper_flit = 3\n",
                 "{path}: [dsm] field must be one of cpcs,", id="unknown-field"),
    pytest.param('[dsm]\nshaper_flits = "3"\n',
                 "{path}: [dsm] shaper_flits must be an integer, not \"3\"", id="wrong-type"),
    pytest.param("[dsm]\nshaper_flits = 0\n",
                 "{path}: [dsm] {point}shaper_flits must be a positive integer, not 0",
                 id="refused"),
    pytest.param("[nvlink]\nlanes = 4\n",
                 "{path}: tables must be among dsm, mesh, pcie, not 'nvlink'", id="not-a-fabric"),
    pytest.param("[dsm\n", "{path}: not valid TOML", id="not-toml"),
    pytest.param("[dsm]\nshaper_flits = 1" + "0" * 5000 + "\n",
                 "{path}: not valid TOML (Exceeds the limit", id="huge-integer"),
    pytest.param("[dsm]\nplacement = " + "[" * 1000 + "]" * 1000 + "\n",
                 "{path}: not valid TOML (maximum recursion depth", id="nested-deep"),
    pytest.param("[dsm]\npayload_kib = [[16], [32, [48]]]\n",
                 "{path}: [dsm] payload_kib must be an array of numbers or of [x, y] pairs, "
                 "not [[16], [32, [48]]]", id="nested-arrays"),
    pytest.param("[dsm]\nshared_vc = 1979-05-27\n",
                 "{path}: [dsm] shared_vc must be true or false, not 1979-05-27", id="a-date"),
])
def test_a_bad_config_file_is_refused_before_anything_is_built(tmp_path, capsys, command, text,
                                                               message):
    path = tmp_path / "whatif.toml"
    path.write_text(text + "[mesh]\nrouter_hop_mesh_cycles = 5\n" * text.startswith("[dsm]\n"))
    status, err = _run(tmp_path, capsys, [*command, "--config", str(path)])
    point = "sweep point ack_threshold_flits=40: " if command[0] == "sweep" else ""
    _assert_refused(status, err, "--config " + message.format(path=path, point=point))
    assert not (tmp_path / "build").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(("argv", "text", "message"), [
    # a bad value in the one table of several that a run uses
    pytest.param(["run", "all"], "[dsm]\nshaper_flits = 3\n[mesh]\nflit_bytes = 24\n",
                 "{path}: [mesh] flit_bytes must be one of", id="run-all"),
    # refused by an experiment, not the fabric: still the file's value
    pytest.param(["run", "dsm.topology"], "[dsm]\npayload_kib = [16, 32]\n",
                 "{path}: [dsm] payload_kib must be left unset for dsm.topology",
                 id="set-by-the-experiment"),
    # only the value the --set did not override is the file's fault, and the
    # message is the configuration's, with the other fields given
    pytest.param(["run", "dsm.one_way", "--set", "shaper_cycles=6"],
                 "[dsm]\nshaper_flits = 7\n",
                 "{path}: [dsm] shaper_flits must be at most shaper_cycles (6), not 7",
                 id="with-a-set"),
    pytest.param(["run", "dsm.one_way", "--set", "shaper_cycles=6", "--set",
                  "ack_threshold_flits=-1"], "[dsm]\nshaper_flits = 5\n",
                 "ack_threshold_flits must be", id="the-set-is-wrong"),
    # both wrong: the file's field is checked first, so its refusal is the file's
    pytest.param(["run", "dsm.one_way", "--set", "shaper_cycles=0"],
                 "[dsm]\nshaper_flits = 0\n",
                 "{path}: [dsm] shaper_flits must be a positive integer, not 0",
                 id="both-wrong"),
    # every experiment of a fabric refuses one of the file's fields
    pytest.param(["run", "pcie"], "[pcie]\nstaging_chunk_bytes = 4096\n"
                 "pageable_chunk_bytes = 4096\n",
                 "{path}: [pcie] the fields set must leave at least one experiment to run, not "
                 "none: pcie.peer_copy, pcie.kernel_push, pcie.kernel_pull, pcie.pageable_copy "
                 "and pcie.link_faults refuse staging_chunk_bytes, pcie.host_staged refuses "
                 "pageable_chunk_bytes (run one alone to see why)", id="no-experiment-left"),
    pytest.param(["sweep", "synth.shaper", "--grid", "flit_bytes=16,32"],
                 "[dsm]\ncluster_size = 4\n",
                 "{path}: [dsm] synth.shaper takes only structural fields of dsm",
                 id="synth-sweep-run-time-field"),
    pytest.param(["sweep", "synth.shaper", "--grid", "request_queue_flits=8,16"],
                 "[dsm]\nflit_bytes = 7\n",
                 "{path}: [dsm] sweep point request_queue_flits=8: flit_bytes must be one of",
                 id="synth-sweep-bad-value"),
    pytest.param(["synth", "mesh_router"], "[mesh]\nminion_mhz = 500.0\n",
                 "{path}: [mesh] fields must be among its structural ones",
                 id="synth-run-time-field"),
])
def test_a_refusal_names_the_config_file_where_its_values_are_why(tmp_path, capsys, argv, text,
                                                                  message):
    path = tmp_path / "whatif.toml"
    path.write_text(text)
    status, err = _run(tmp_path, capsys, [*argv, "--config", str(path)])
    _assert_refused(status, err, message.format(path=f"--config {path}")
                    if message.startswith("{path}") else message)
    assert not (tmp_path / "build").exists() and not (tmp_path / "results").exists()


#: A table a command does not use holds a value no fabric takes (mesh's
#: flit_bytes 24) or, for synthesis, a run-time field (dsm's cluster_size).
_UNUSED_TABLES = {"run": "[mesh]\nflit_bytes = 24\n", "synth": "[dsm]\ncluster_size = 4\n"}


@pytest.mark.parametrize(("argv", "text"), [
    (["run", "dsm.one_way", "--set", "shaper_flits=2"], "[dsm]\nshaper_flits = 0\n"),
    (["sweep", "dsm.one_way", "--grid", "shaper_flits=1,2"], "[dsm]\nshaper_flits = 0\n"),
    (["sweep", "synth.mesh_router", "--grid", "flit_bytes=16,32"], "[mesh]\nflit_bytes = 7\n"),
    (["synth", "mesh_router"], "[mesh]\nflit_bytes = 16\n"),
], ids=["run", "sweep", "synth-sweep", "synth"])
def test_a_config_file_is_taken_as_far_as_a_later_refusal_without_a_line_more(tmp_path, capsys,
                                                                               argv, text):
    """The file's bad value is overridden (by --set or --grid), its table of
    a fabric the command does not use is not checked, and its 'not used'
    line would come only once the request is accepted: the results folder,
    a file here, is the one refusal."""
    path = tmp_path / "whatif.toml"
    path.write_text(text + _UNUSED_TABLES["synth" if "synth" in " ".join(argv) else "run"])
    results = tmp_path / "a-file"
    results.write_text("not a folder\n")
    status, err = _run(tmp_path, capsys, [*argv, "--config", str(path)], results=results)
    _assert_refused(status, err, "--results must ")


@pytest.mark.parametrize(("given", "message"), [
    (["no.toml"], "--config must be a readable TOML file, not '{tmp}/no.toml' (No such file "
                  "or directory)"),
    ([""], "--config must name a TOML file, not ''"),
    (["."], "--config must be a readable TOML file, not '{tmp}' (not a regular file)"),
    (["a.toml", "b.toml"], "--config may be given once, not again as '{tmp}/b.toml'"),
], ids=["missing", "empty", "a-folder", "twice"])
def test_a_config_file_that_cannot_be_read_is_refused(tmp_path, capsys, given, message):
    argv = ["run", "dsm"]
    for name in given:
        argv += ["--config", str(tmp_path / name) if name else ""]
    status, err = _run(tmp_path, capsys, argv)
    _assert_refused(status, err, message.format(tmp=tmp_path))
    assert not (tmp_path / "build").exists() and not (tmp_path / "results").exists()


def test_fabricsim_alone_prints_its_help(capsys):
    """No command at all: the commands, on stdout, rather than an error that
    one is missing (exit status 2: nothing was done)."""
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("usage: fabricsim") and "synth" in out and not err


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


def test_results_folder_that_cannot_be_written(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"], results=blocker / "results")
    _assert_refused(status, err, "--results must be a folder fabricsim can write")
    assert not (tmp_path / "build").exists()


def test_a_sweep_given_a_file_for_results_names_that_file(tmp_path, capsys):
    """The refusal names the file given, not the "sweep" folder under it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    status, err = _run(tmp_path, capsys, ["sweep", "pcie.peer_copy", "--grid", "lanes=8"],
                       results=blocker)
    _assert_refused(status, err, f"--results must be a folder fabricsim can write, not "
                                 f"'{blocker}' (")
    assert not (tmp_path / "build").exists()


def _blocked_results(tmp_path, blocked):
    """``tmp_path/results`` with ``blocked`` in it taken: by a folder where a
    result file (a name with a suffix) goes, else by a file where a folder goes."""
    results = tmp_path / "results"
    (results / blocked).parent.mkdir(parents=True, exist_ok=True)
    if (results / blocked).suffix:
        (results / blocked).mkdir()
    else:
        (results / blocked).write_text("not a folder\n")
    return results


@pytest.mark.parametrize("blocked", ["dsm", "dsm/one_way.json"])
def test_results_fabric_folder_that_cannot_be_written(tmp_path, capsys, blocked):
    """A fabric's results folder that is a file, or a results file that is a
    folder, is refused before anything is built, not after the simulation."""
    results = _blocked_results(tmp_path, blocked)
    status, err = _run(tmp_path, capsys, ["run", "pcie.peer_copy", "dsm.one_way"],
                       results=results)
    _assert_refused(status, err, "--results must ")
    assert "dsm" in err and not (tmp_path / "build").exists()
    assert not (results / "pcie").exists()      # no empty folder left for the other fabric


@pytest.mark.parametrize("blocked", ["sweep", "sweep/dsm.one_way.csv"])
def test_sweep_results_that_cannot_be_written(tmp_path, capsys, blocked):
    """A sweep whose table cannot be written (``results/sweep`` a file, or one
    of its output files a folder) is refused before any point is simulated."""
    results = _blocked_results(tmp_path, blocked)
    status, err = _run(tmp_path, capsys, ["sweep", "dsm.one_way", "--grid",
                                          "ack_threshold_flits=40,20"], results=results)
    _assert_refused(status, err, "--results must ")
    assert str(results / blocked) in err and not (tmp_path / "build").exists()


def test_a_refused_build_folder_leaves_no_results_folder(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    full = ["--build", str(blocker / "build"), "--results", str(tmp_path / "results"),
            "run", "dsm.one_way"]
    _assert_refused(main(full), capsys.readouterr().err, "--build must be a folder")
    assert not (tmp_path / "results").exists()


def test_missing_simulator(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way", "--sim", "icarus"])
    _assert_refused(status, err, "--sim 'icarus' needs Icarus Verilog")
    assert not (tmp_path / "build").exists()


def test_report_on_a_file(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("not results\n")
    status, err = _run(tmp_path, capsys, ["report"], results=tmp_path / "notes.md")
    _assert_refused(status, err, f"results directory {tmp_path / 'notes.md'} is a file")


def test_report_without_results(tmp_path, capsys):
    status, err = _run(tmp_path, capsys, ["report"])
    _assert_refused(status, err, "results directory")
    assert not (tmp_path / "results").exists()


def test_malformed_result_leaves_the_old_report(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "pcie").mkdir(parents=True)
    (results / "report.md").write_text("previous report\n")
    (results / "pcie" / "peer_copy.json").write_text(json.dumps({"rows": 5}))
    status, err = _run(tmp_path, capsys, ["report"])
    _assert_refused(status, err, "")
    assert "peer_copy.json" in err
    assert (results / "report.md").read_text() == "previous report\n"


def test_a_run_that_fails_leaves_no_empty_results_folder(tmp_path, capsys, monkeypatch):
    import concurrent.futures

    import sim.cli

    def generate(fabric, hardware, build_root):
        raise IndexError("generation broke")

    monkeypatch.setattr(sim.cli, "pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    monkeypatch.setattr(sim.cli, "generate", generate)
    monkeypatch.setattr(sim.cli, "execute_or_error",
                        lambda job, *args: (None, 0, 0, 0, "simulator build failed"))
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"])
    assert status == 1 and "failed" in err
    assert not (tmp_path / "results").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    status, _ = _run(tmp_path, capsys, ["run", "dsm.one_way"], results=kept)
    assert status == 1 and kept.is_dir()    # a folder the user made stays


def test_a_failure_message_that_looks_like_markup_is_printed_as_it_is(tmp_path, capsys,
                                                                     monkeypatch):
    # make's error lines read "*** [file:line: target] Error 2"; rich took the
    # bracket for a closing tag and raised instead of printing the failure.
    import concurrent.futures

    import sim.cli
    message = "make: *** [/tmp/b/Vtop_hier.mk:32: hier_launch_verilator] Error 2"
    monkeypatch.setattr(sim.cli, "pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    monkeypatch.setattr(sim.cli, "generate", lambda *a: (tmp_path / "v.v", 0.0))
    monkeypatch.setattr(sim.cli, "execute_or_error", lambda job, *args: (None, 0, 0, 0, message))
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"])
    assert status == 1
    assert "[/tmp/b/Vtop_hier.mk:32: hier_launch_verilator]" in " ".join(err.split()), err


def test_a_failed_run_says_an_earlier_result_is_left_in_place(tmp_path, capsys, monkeypatch):
    """A run that fails writes nothing; where the results folder holds the
    experiment's result from an earlier run, the log says the report will
    show that one."""
    import concurrent.futures

    import sim.cli
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr(sim.cli, "pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    monkeypatch.setattr(sim.cli, "generate", lambda *a: (tmp_path / "v.v", 0.0))
    monkeypatch.setattr(sim.cli, "execute_or_error",
                        lambda job, *args: (None, 0, 0, 0, "run 1 ended stuck"))
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"])
    assert status == 1 and "earlier run's result" not in err
    earlier = tmp_path / "results" / "dsm" / "one_way.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"])
    assert status == 1 and earlier.read_text() == "{}"
    assert (f"dsm.one_way: {earlier} is an earlier run's result, left as it was; the report "
            "shows that one") in " ".join(err.split())


def test_piped_run_logs_its_progress(tmp_path, capsys, monkeypatch):
    """Output that is not a terminal gets no live status line: ``run`` logs
    its progress as lines instead (every PIPED_PROGRESS_SECONDS)."""
    import concurrent.futures
    import time

    import sim.cli

    def execute(job, *args):
        time.sleep(2)      # status redraws every 0.05 s, each a line
        return None, 0, 0, 0, "simulator build failed"

    monkeypatch.setattr(sim.cli, "PIPED_PROGRESS_SECONDS", 0)
    monkeypatch.setattr(sim.cli, "STATUS_SECONDS", 0.05)
    monkeypatch.setattr(sim.cli, "pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    monkeypatch.setattr(sim.cli, "generate", lambda *args: (tmp_path / "top.v", 0))
    monkeypatch.setattr(sim.cli, "execute_or_error", execute)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):     # else rich draws its status line
        monkeypatch.delenv(name, raising=False)
    status, err = _run(tmp_path, capsys, ["run", "dsm.one_way"])
    assert status == 1
    assert "0/1 experiments done (verilator, " in err


def test_a_progress_line_that_fails_is_logged_once_and_the_work_goes_on(capsys, monkeypatch):
    import time

    from rich.console import Console

    import sim.cli

    made = []

    def describe():
        made.append(1)
        if len(made) > 1:
            raise ValueError("no such counter")
        return "0/1 done"

    monkeypatch.setattr(sim.cli, "STATUS_SECONDS", 0.01)
    with sim.cli.progress_shown(Console(stderr=True, log_path=False), describe) as redraw:
        time.sleep(0.2)
        assert redraw() is None
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("progress line stopped: ValueError: no such counter") == 1


@pytest.mark.parametrize("name,items,ranks", [
    ("one_way", ["cluster_size=2", "placement=0,5"], {"load": [0, 5]}),
    ("ring", ["cluster_size=4", "placement=0,6,12,1"],
     {"ring2": [0, 1], "ring4": [0, 6, 12, 1], "ring8": list(range(8))}),
])
def test_a_placement_for_one_of_an_experiment_s_cluster_sizes_is_used(name, items, ranks):
    """``cluster_size`` with a ``placement`` of as many slots places the series
    of that size; the others keep the default placement."""
    from sim.cli import plan_job

    (_, _, runs), = plan_job("dsm", name, items).parts
    got = {r["series"]: r["ranks"] for r in runs}
    assert {k: got[k] for k in ranks} == ranks


def test_an_experiment_left_nothing_to_run_is_refused(tmp_path, capsys, monkeypatch):
    """A configuration under which an experiment plans no run at all is
    refused before anything is built, not run into an empty result."""
    import dataclasses

    from sim.experiments import mesh

    exp = mesh.EXPERIMENTS["three_speeds"]
    monkeypatch.setitem(mesh.EXPERIMENTS, "three_speeds",
                        dataclasses.replace(exp, runs=lambda cfg: iter(())))
    status, err = _run(tmp_path, capsys, ["run", "mesh.three_speeds", "--set", "ack_flits=1"])
    _assert_refused(status, err, "the fields set (ack_flits) must leave mesh.three_speeds at "
                                 "least one run, not none")
    assert not (tmp_path / "build").exists() and not (tmp_path / "results").exists()


def test_an_interrupted_run_leaves_no_empty_results_folder(tmp_path, capsys, monkeypatch):
    """Ctrl-C before any result is written leaves no results folder it made."""
    import sim.cli

    def interrupt(jobs):
        raise KeyboardInterrupt
    monkeypatch.setattr(sim.cli, "pool", interrupt)
    assert main(["--build", str(tmp_path / "build"), "--results", str(tmp_path / "results"),
                 "run", "dsm.one_way"]) == 130
    assert "fabricsim: interrupted" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_whole_fabric_run_skips_an_experiment_that_sets_the_field_itself(tmp_path, capsys,
                                                                           monkeypatch):
    """``run dsm --set gx_planes=gx0`` runs the what-if on every DSM experiment
    but plane_off, which switches its planes itself and is skipped with a line
    saying so (the run is stopped here before anything is built)."""
    import sim.cli

    def stop(jobs):
        raise KeyboardInterrupt
    monkeypatch.setattr(sim.cli, "pool", stop)
    status = main(["--build", str(tmp_path / "build"), "--results", str(tmp_path / "results"),
                   "run", "dsm", "--set", "gx_planes=gx0"])
    err = capsys.readouterr().err
    assert status == 130, err
    assert "skipped: gx_planes must be left unset for dsm.plane_off" in " ".join(err.split())
    status, err = _run(tmp_path, capsys, ["run", "dsm.plane_off", "dsm.one_way",
                                          "--set", "gx_planes=gx0"])
    _assert_refused(status, err, "gx_planes must be left unset for dsm.plane_off")
    # a value that does not fit an experiment's own build skips it the same way
    status = main(["--build", str(tmp_path / "build"), "--results", str(tmp_path / "results"),
                   "run", "mesh", "--set", "compute_shires=32"])
    err = " ".join(capsys.readouterr().err.split())
    assert status == 130, err
    assert "skipped: compute_shires=32 does not fit mesh.barrier's build" in err


def test_a_sweep_refused_for_its_build_folder_leaves_no_sweep_folder(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    full = ["--build", str(blocker / "build"), "--results", str(tmp_path / "results"),
            "sweep", "dsm.one_way", "--grid", "ack_threshold_flits=40,20"]
    _assert_refused(main(full), capsys.readouterr().err, "--build must be a folder")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("option", ["--results", "--build"])
def test_an_empty_folder_name_is_refused(tmp_path, capsys, monkeypatch, option):
    # An empty path would mean the current folder.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main([option, "", "run", "dsm.one_way"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1
    assert f"argument {option}: a folder must be named, not ''" in err[0]
    assert not list(tmp_path.iterdir())


def test_python_m_sim_cli_gives_one_line_for_errors_raised_outside_it(tmp_path):
    # Run as a module, sim.cli is __main__, a second copy of sim.cli: an error
    # class raised by sim.sweep is the imported copy's.
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "sim.cli", "--build", str(tmp_path / "b"),
                           "--results", str(tmp_path / "r"), "sweep", "dsm.one_way"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "fabricsim: error: --grid must be given at least once (FIELD=V1,V2,...)"]


@pytest.mark.parametrize("argv", [
    ["--results", "r1/r2", "--build", "afile", "run", "dsm.one_way"],
    ["--results", "r1/r2", "--build", "afile", "synth", "shaper"],
    ["--results", "afile", "--build", "b1/b2", "sweep", "synth.shaper",
     "--grid", "flit_bytes=16,32"],
    ["--results", "afile", "--build", "b1/b2", "sweep", "pcie.peer_copy",
     "--grid", "lanes=8,16"],
    # the results folder checked first and made, then the build folder refused
    ["--results", "r1/r2", "--build", "afile", "sweep", "synth.shaper",
     "--grid", "flit_bytes=16,32"],
    ["--results", "r1/r2", "--build", "afile", "sweep", "pcie.peer_copy",
     "--grid", "lanes=8,16"],
], ids=["run", "synth", "synth-sweep", "sweep", "synth-sweep-build", "sweep-build"])
def test_a_command_refused_for_one_folder_leaves_the_other_uncreated(argv, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(argv) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "must be a folder fabricsim can write" in err and "afile" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("tool, argv", [
    ("prove", []), ("random_traffic", ["dsm"]), ("bench", ["dsm"]), ("board", ["shaper"])])
def test_the_other_tools_refuse_a_folder_before_making_the_other(tool, argv, tmp_path, capsys,
                                                                 monkeypatch):
    import importlib
    module = importlib.import_module(f"sim.{tool}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    folders = ["--build", "afile"] if tool == "board" else ["--build", "b1/b2",
                                                            "--results", "afile"]
    assert module.main([*argv, *folders]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"sim.{tool}: error: --") and "afile" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("tool", ["bench", "board", "prove", "random_traffic",
                                  "etsoc_placement"])
def test_the_other_tools_give_one_line_for_an_unknown_option(tool, tmp_path):
    # As the user runs them (python -m sim.TOOL), before any build or search.
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", f"sim.{tool}", "--no-such-option"],
                          capture_output=True, text=True, check=False, timeout=120,
                          cwd=tmp_path, env={**os.environ,
                                             "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"sim.{tool}: error: ")
    assert line.endswith(f" (see python -m sim.{tool} --help)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad, message", [
    (["--megacycles", "0"], "--megacycles must be above 0 and at most 100, not 0.0"),
    (["--pysim-cycles", "0"], "--pysim-cycles must be at least 1, not 0"),
    (["--pysim-timeout", "-1"], "--pysim-timeout must be a positive number of seconds, not -1.0"),
    (["--pysim-cycles", "1.5"], "--pysim-cycles must be an integer, not '1.5' "
                                "(see python -m sim.bench --help)"),
])
def test_the_bench_names_the_option_it_refuses(bad, message, capsys):
    from sim import bench
    try:
        status = bench.main(bad)
    except SystemExit as stop:      # argparse's own errors
        status = stop.code
    assert status == 2
    assert capsys.readouterr().err == f"sim.bench: error: {message}\n"


def test_prove_names_its_jobs_option(capsys):
    from sim import prove
    with pytest.raises(SystemExit) as exit_:
        prove.main(["--jobs", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "sim.prove: error: --jobs must be an integer from 1 to 1024, "
        "not '0' (see python -m sim.prove --help)\n")


@pytest.mark.parametrize("tool", ["random_traffic", "prove"])
def test_other_tools_check_their_results_folder_before_working(tmp_path, capsys, monkeypatch,
                                                                tool):
    import importlib
    module = importlib.import_module(f"sim.{tool}")
    # Nothing may be simulated or proved before the folder is checked.
    monkeypatch.setattr(module, "run_seeds" if tool == "random_traffic" else "prove",
                        lambda *a, **k: pytest.fail("worked before checking --results"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    status = module.main(["--results", str(blocker), "--build", str(tmp_path / "build")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0] == (f"sim.{tool}: error: --results must be a folder fabricsim can write, "
                      f"not {str(blocker)!r} (a file)")


def test_a_run_still_moving_at_its_limit_is_not_called_stuck():
    # A slow but live configuration (say, 32 B read responses, one read in
    # flight and a 255-cycle turnaround) can outlast the run's cycle limit; the
    # error says so and names the field the limit grows with.
    from sim.experiments import unfinished
    assert unfinished("run load@40KiB", "timeout", 336001) == (
        "run load@40KiB: still moving when its limit of 336001 cycles ran out (no stall; the "
        "limit grows with watchdog_cycles: raise it for a slower configuration); ")
    assert unfinished("run load@16KiB", "stuck", 21) == "run load@16KiB: stuck after 21 cycles; "
    # a watchdog set below the fabric's round trips shows in the message
    assert unfinished("run load@16KiB", "stuck", 2, watchdog=1) == (
        "run load@16KiB: stuck after 2 cycles (no progress for watchdog_cycles = 1); ")


@pytest.mark.parametrize("where", ["--results", "--build", "--config"])
def test_a_path_too_long_for_the_file_system_is_refused_in_one_line(tmp_path, capsys, where):
    """A name over the file system's 255 bytes gives one line naming the
    option, not a traceback, and nothing is made."""
    long = str(tmp_path / ("a" * 300))
    argv = ["--results", str(tmp_path / "r"), "--build", str(tmp_path / "b"), "run",
            "pcie.peer_copy"]
    if where == "--config":
        argv += ["--config", long + ".toml"]
    else:
        argv[argv.index(where) + 1] = long
    try:
        status = main(argv)
    except SystemExit as stop:          # an option's type refused by the parser
        status = stop.code
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert where in err and "bytes, over 255" in err
    assert not list(tmp_path.iterdir())
