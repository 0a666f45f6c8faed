"""Verilator for a hierarchical block, whose library then evaluates the block
only when something it sees has changed.

    python sim/hier_verilator.py VERILATOR -f ARGS_FILE

A ``--hierarchical`` Verilator build (the 1,024-minion ET-SoC-1 mesh, see
:func:`sim.runner.hierarchical`) compiles each hierarchical block (shire,
mesh router, shire port) into a library of its own behind a DPI wrapper,
``<block>.cpp`` in the block's ``-Mdir``, written for ``--lib-create``.
Its parent calls the wrapper's ``*_protectlib_combo_update`` whenever any of
the block's non-clock inputs *may* have changed and ``*_seq_update`` on
both edges of its clocks, and each call evaluates the whole block.  On the
1,024-minion mesh that was 8.7 evaluations of each shire per minion-clock
cycle (callgrind over 300 cycles of register writes: 65,024 calls of the
32 shires' ``combo_update`` and 19,488 of ``seq_update``), where one rising
edge and one change of inputs happen.

This script is what the build runs in place of Verilator for each block
(make's ``VM_HIER_VERILATOR``, set by
:func:`sim.runner._verilator_make_overrides`).  It runs Verilator
(``VERILATOR``, the bundled one) with the same arguments and then edits the
library's wrapper (:func:`edit_wrapper`):

- ``combo_update`` evaluates the block only when an input differs from its
  value at the block's last evaluation, or on the first call.  A skipped
  evaluation would change nothing: between clock edges the block's outputs
  are a function of its state and its inputs, settled by its last
  evaluation (nothing here uses ``$random``, ``$display`` or ``--timing``
  delays in its logic).
- A block with one clock sees that clock fall in the first evaluation after
  the rise (a ``combo_update`` with a changed input, else the next rise's
  ``seq_update``), instead of in one of its own: the falling edge's
  ``seq_update`` then evaluates nothing, nor does a ``seq_update`` that
  repeats the clock's level (the parent's ``always @(clk)`` never does).
  Every register here takes the rising edge (the design's Verilog is
  checked for ``negedge``; with one, or Verilog the edit cannot read, the
  clock's evaluations are left as Verilator wrote them) and no logic reads
  a clock as data (``ClockSignal`` appears only as a shared module's clock
  port, :mod:`hdl.common.shared`), so when the fall is seen changes
  nothing.

Measured on the 1,024-minion mesh, same Verilog: over those 300 cycles the
shires are evaluated 29,152 times instead of 84,512 (3.5 against 7.2
billion instructions); one 33,680-cycle run of ``make bench``'s mesh
workload on the bare C++ harness takes 95.5 to 109.0 s in four runs
(median 106) instead of 180.8, with the same waits and cycles;
``fabricsim run mesh`` from an empty build folder gives the same 62 rows.

Exits with Verilator's status, or with 1 and a one-line message when the
library's wrapper does not have the shape this edit expects (a Verilator
other than the bundled 5.048).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["edit_wrapper", "main"]

_MARK = "// evaluated only on a change (sim/hier_verilator.py)"

_CONTAINER = re.compile(r"(?P<indent>[ \t]*)long long m_seqnum;\n")
# An update's head up to its handle cast, then what it does before its
# evaluation.  Verilator 5.048 writes each input as one statement naming
# ``handlep__V-><port>`` (a plain assignment or a VL_SET_*_SVLV macro).
_UPDATE = (r"(?P<head>long long \w+_protectlib_{kind}_update\(.*?\)\s*\{{\n"
           r"\s*\w+\* const handlep__V = [^\n]*\n)"
           r"(?P<sets>.*?)(?P<indent>[ \t]*)handlep__V->eval\(\);")
_COMBO_UPDATE = re.compile(_UPDATE.format(kind="combo"), re.S)
_SEQ_UPDATE = re.compile(_UPDATE.format(kind="seq"), re.S)
# The two statements that set an input in combo_update.
_SET_INPUT = re.compile(r"[ \t]*(?:handlep__V->(\w+) = \(\w+\);"
                        r"|VL_SET_\w+\(\d+,\s+handlep__V->(\w+), \w+ \+ 0\);)\n")
_ONE_CLOCK = re.compile(r"[ \t]*handlep__V->(\w+) = \(\1\);\n")


def edit_wrapper(source: str, fold_falls: bool = True) -> str:
    """``source`` (a ``--lib-create`` wrapper's C++) with ``combo_update``
    evaluating the block only on a change and, if ``fold_falls`` and the
    block has one clock, its falling edge seen in the next evaluation after
    the rise (see the module docstring).  A wrapper edited before is
    returned as it is.

    Raises
    ------
    ValueError
        If ``source`` has no container class, ``combo_update`` or
        ``seq_update`` of the expected shape, or one of them does anything
        but set inputs (clocks) before its evaluation.
    """
    if _MARK in source:
        return source
    container, combo, seq = (p.search(source) for p in (_CONTAINER, _COMBO_UPDATE, _SEQ_UPDATE))
    for found, what in ((container, "container class with m_seqnum"),
                        (combo, "*_protectlib_combo_update ending in handlep__V->eval()"),
                        (seq, "*_protectlib_seq_update ending in handlep__V->eval()")):
        if found is None:
            raise ValueError(f"no {what} found")
    lines = combo["sets"].splitlines(keepends=True)
    sets = [_SET_INPUT.fullmatch(line) for line in lines]
    if not all(sets):
        strange = next(line for line, s in zip(lines, sets) if not s).strip()
        raise ValueError(f"combo_update does more than set inputs before its evaluation: "
                         f"{strange}")
    ports = [s[1] or s[2] for s in sets]
    clocks = seq["sets"].splitlines(keepends=True)
    if not clocks or not all(_ONE_CLOCK.fullmatch(line) for line in clocks):
        raise ValueError("seq_update does more than set its clocks before its evaluation")
    pad = container["indent"]
    members = (f"{pad}{_MARK}\n"
               f"{pad}bool m_evaluated__V = false;    // evaluated at least once\n"
               f"{pad}bool m_fall_pending__V = false; // its clock fell, not yet evaluated\n"
               f"{pad}bool m_clock_high__V = false;   // its clock's level at the last seq_update\n")
    edits = [(container.end(), container.end(), members)]

    i = combo["indent"]
    # Each input's value before this call's assignments: the one the block
    # was last evaluated with (the inputs combo_update sets are set nowhere
    # else).  A pending fall alone is left to the next rise (below).
    before = "".join(f"{i}const auto prev_{p}__V = handlep__V->{p};\n" for p in ports)
    changed = "".join(f" || handlep__V->{p} != prev_{p}__V" for p in ports)
    edits += [(combo.start("sets"), combo.start("sets"), before),
              (combo.start("indent"), combo.end(),
               f"{i}if (!handlep__V->m_evaluated__V{changed}) {{\n"
               f"{i}    handlep__V->eval();\n"
               f"{i}    handlep__V->m_evaluated__V = true;\n"
               f"{i}    handlep__V->m_fall_pending__V = false;\n"
               f"{i}}}")]

    i = seq["indent"]
    one = _ONE_CLOCK.fullmatch(seq["sets"])     # one clock
    if fold_falls and one is not None:
        clk = f"handlep__V->{one[1]}"
        edits.append((seq.start("sets"), seq.end(),
                      f"{i}if ({one[1]}) {{\n"
                      f"{i}    if (!handlep__V->m_clock_high__V) {{  // a rise\n"
                      f"{i}        if (handlep__V->m_fall_pending__V) handlep__V->eval();\n"
                      f"{i}        {clk} = 1;\n"
                      f"{i}        handlep__V->eval();\n"
                      f"{i}        {clk} = 0;  // this edge's fall, seen by the next evaluation\n"
                      f"{i}        handlep__V->m_fall_pending__V = true;\n"
                      f"{i}    }}\n"
                      f"{i}}} else if (!handlep__V->m_evaluated__V || {clk}) {{\n"
                      f"{i}    {clk} = 0;\n"
                      f"{i}    handlep__V->eval();\n"
                      f"{i}}}\n"
                      f"{i}handlep__V->m_clock_high__V = {one[1]};\n"
                      f"{i}handlep__V->m_evaluated__V = true;"))
    else:
        edits.append((seq.end(), seq.end(), f"\n{i}handlep__V->m_evaluated__V = true;"))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _option(args: list[str], name: str) -> str | None:
    args = [a.strip('"') for a in args]
    return args[args.index(name) + 1] if name in args[:-1] else None


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[0]`` (Verilator) with ``argv[1:]``; when that was a
    ``--lib-create`` run (a hierarchical block), edit its wrapper with
    :func:`edit_wrapper`, folding falling edges unless a Verilog file among
    the arguments has a ``negedge`` or cannot be read, or the arguments name
    Verilog libraries (``-v``, ``-y``).  Returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: hier_verilator.py VERILATOR ARGS...", file=sys.stderr)
        return 2
    status = subprocess.run(argv, check=False).returncode
    if status != 0:
        return status
    args = list(argv[1:])
    if "-f" in args[:-1]:
        args += Path(args[args.index("-f") + 1]).read_text().split()
    library, mdir = _option(args, "--lib-create"), _option(args, "-Mdir")
    if library is None or mdir is None:
        return 0    # the top's own verilation
    wrapper = Path(mdir) / f"{library}.cpp"
    try:
        # Verilog the edit cannot read (missing, or found by other options)
        # leaves the clock's evaluations as they are.
        verilog = [Path(a.strip('"')) for a in args if a.strip('"').endswith((".v", ".sv"))]
        fold = (bool(verilog) and all(v.is_file() for v in verilog)
                and not any(o in args for o in ("-v", "-y"))
                and not any("negedge" in v.read_text() for v in verilog))
        wrapper.write_text(edit_wrapper(wrapper.read_text(), fold_falls=fold))
    except (OSError, ValueError) as error:
        print(f"hier_verilator: {wrapper}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
