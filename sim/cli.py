"""``fabricsim``: list, run and report the fabrics' experiments.

    fabricsim list [FABRIC...]
    fabricsim run NAME... [--config FILE] [--set FIELD=VALUE]... [--sim verilator|icarus]
                  [--waves] [--fresh]
    fabricsim report
    fabricsim sweep NAME --grid FIELD=V1,V2,... [--config FILE] [--set FIELD=VALUE]...
                    [--engine local|dask] [--tag TAG]
    fabricsim synth [BLOCK...] [--config FILE] [--device ecp5|ice40] [--freq MHZ]

NAME is a fabric (``dsm``, ``mesh``, ``pcie``), one experiment (``dsm.one_way``) or ``all``.
``--set`` overrides any field of the fabric's configuration for a what-if, and
``--config FILE`` the fields of a TOML file (see :mod:`sim.config_file`);
structural fields rebuild the RTL (cached by configuration), run-time fields
only change the registers written per run.  ``run`` simulates up to
``--jobs`` experiments at once (default: one per CPU) and reuses the simulation
result of a run whose Verilog, testbench, plan and simulator are unchanged
(``--fresh`` simulates everything); ``sweep`` runs one
experiment over a grid of values (see :mod:`sim.sweep`); ``synth``
synthesises blocks and small fabric tops for an FPGA (see :mod:`sim.synth`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from sim.config_file import load_config_file, refused_with_file, with_config_items
from sim.experiments import SetByExperiment

__all__ = ["FieldSetByExperiment", "GivenOnce", "Job", "OneLineParser", "UsageError",
           "execute_job", "execute_or_error", "exit_status", "folder_option", "generate",
           "job_run_folders", "job_verilog", "jobs_option", "log_config_tables", "longest_first",
           "main", "os_error_text", "parse_overrides", "plan_job", "pool", "progress_shown",
           "resolve_names", "runs_logged", "simulation_started", "stops_as_interrupts",
           "unknown_field", "waited_text", "wide_console", "write_json_atomically"]

FABRICS = ("dsm", "mesh", "pcie")


class UsageError(ValueError):
    """Bad command-line input; the message names the field and what is allowed."""


class FieldSetByExperiment(UsageError):
    """A ``--set`` of a field the experiment sets itself
    (:class:`sim.experiments.SetByExperiment`): refused for an experiment
    named on its own, skipped in a run of a whole fabric or of ``all``."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, exit status 2, rather
    than the usage text and the error: ``fabricsim: error: MESSAGE (see
    fabricsim --help)``, for a subcommand's parser too; for
    ``prog="python -m sim.prove"`` the line starts ``sim.prove: error:``, as
    that tool's other errors do.  An option whose text is no number is
    refused as ``--freq must be a number, not 'abc'``, in the words of the
    range checks made after parsing, not argparse's."""

    def _command(self):
        """``(name, command)``: ``("sim.prove", "python -m sim.prove")``, or
        ``("fabricsim", "fabricsim")`` for fabricsim and its subcommands."""
        words = self.prog.split()
        if words[:2] == ["python", "-m"]:
            return words[2], f"python -m {words[2]}"
        return words[0], words[0]

    def parse_known_args(self, args=None, namespace=None):
        # Python 3.11's argparse takes the value of '--opt=--' for the '--'
        # that ends the options and gives the option an empty list
        for arg in sys.argv[1:] if args is None else args:
            if isinstance(arg, str) and arg.startswith("--") and arg.endswith("=--"):
                self.error(f"{arg.partition('=')[0]} takes a value other than '--', not {arg!r}")
        return super().parse_known_args(args, namespace)

    #: Options of this parser that go before a subcommand; one given after
    #: it is unrecognised, and the error says where it goes.
    global_options = ()

    def error(self, message):
        name, command = self._command()
        # argparse's "argument --freq: invalid float value: 'abc'" in the
        # words of the checks made after parsing ("--freq must be ..."), and
        # without its prefix where the option's own type already names it
        typed = re.fullmatch(r"argument (?:-\w/)?(--[\w-]+)(?:/-\w)?: invalid (int|float) "
                             r"value: (.*)", message)
        if typed:
            message = (f"{typed[1]} must be {'an integer' if typed[2] == 'int' else 'a number'}, "
                       f"not {typed[3]}")
        named = re.fullmatch(r"argument (?:-\w/)?(--[\w-]+)(?:/-\w)?: (\1 must be .*)", message)
        if named:
            message = named[2]
        if message.startswith("unrecognized arguments:"):
            late = [o for o in self.global_options
                    if any(w.partition("=")[0] == o for w in message.split()[2:])]
            if late:
                message += (f"; {' and '.join(late)} go{'es' * (len(late) == 1)} before the "
                            f"command ({command} {late[0]} ... run ...)")
        self.exit(2, f"{name}: error: {message} (see {command} --help)\n")

    def refuse(self, message):
        """Print ``message`` as this tool's one-line error on stderr (``NAME:
        error: message``, as argument errors start) and return 2, the exit
        status of bad input, for a check made after parsing."""
        print(f"{self._command()[0]}: error: {message}", file=sys.stderr)
        return 2


class GivenOnce(argparse.Action):
    """An option that takes one value and may be given once (``--config
    FILE``): a second one is refused (exit 2) rather than silently
    replacing the first, as ``--set`` refuses a field given twice."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} may be given once, not again as {values!r}")
        setattr(namespace, self.dest, values)


def _writable_folder(path, what):
    """Create folder ``path`` if needed and check that files can be written in
    it; returns True when it created the folder.

    Raises
    ------
    UsageError
        If it cannot be created or written; the message names ``what`` (the
        option) and the folder.
    """
    created = not path.exists()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} must be a folder fabricsim can write, not {str(path)!r} "
                         f"(a file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UsageError(f"{what} must be a folder fabricsim can write, not {str(path)!r} "
                         f"({error.strerror or error})") from None
    return created


def _missing_folders(path):
    """``path`` and those of its parents that do not exist yet, innermost
    first: the folders that making ``path`` would create."""
    path = Path(path)
    return [f for f in (path, *path.parents) if not f.exists()]


def _writable_folders(*folders):
    """Check each ``(path, what)`` of ``folders`` in order as
    :func:`_writable_folder` does.  Returns the folders it created, missing
    parents included (for :func:`_remove_if_empty`).

    Raises
    ------
    UsageError
        As :func:`_writable_folder`, for the first folder refused; the
        folders created for the others are removed again first, so a refused
        command leaves none behind.
    """
    made = []
    try:
        for path, what in folders:
            made += _missing_folders(path)
            _writable_folder(Path(path), what)
    except UsageError:
        _remove_if_empty(made)
        raise
    return made


def _resolve_simulator(args):
    """Set ``args.sim`` to the simulator to use, ``--sim`` or else
    ``$FABRICSIM_SIM`` or else verilator, and check it is there.

    Raises
    ------
    UsageError
        If it is unknown or not installed; the message names ``--sim`` or
        ``$FABRICSIM_SIM``, whichever gave it.
    """
    from sim.toolchain import check_simulator

    given = args.sim is not None
    if not given:
        args.sim = os.environ.get("FABRICSIM_SIM", "verilator")
    try:
        check_simulator(args.sim)
    except (ValueError, RuntimeError) as error:
        text = str(error)
        where = "--sim" if given else "$FABRICSIM_SIM"
        raise UsageError(f"{where} {text[4:]}" if text.startswith("sim ") else text) from None


def _remove_if_empty(folders):
    """Remove each folder of ``folders`` that exists and is empty, the
    deepest first, so that a parent emptied by its child's removal goes too."""
    for folder in sorted(folders, key=lambda f: -len(Path(f).absolute().parts)):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


@dataclasses.dataclass(frozen=True)
class Fabric:
    """How to build and run one fabric: its configuration class, top-level
    component, Verilog module name, cocotb testbench module and experiments
    module (``EXPERIMENTS``, ``build_runs``, ``plan``, ``analyse``,
    ``ExperimentError``, optionally ``build_parts``)."""

    config: type
    top: object
    top_name: str
    testbench: str
    module: object


def _fabric(name):
    if name == "dsm":
        from hdl.hopper.config import DsmConfig
        from hdl.hopper.gpc import Gpc
        from sim.experiments import dsm
        return Fabric(DsmConfig, Gpc, "dsm_gpc", "testbenches.dsm", dsm)
    if name == "pcie":
        from hdl.pcie.config import PcieConfig
        from hdl.pcie.system import PcieSystem
        from sim.experiments import pcie
        return Fabric(PcieConfig, PcieSystem, "pcie_system", "testbenches.pcie", pcie)
    from hdl.etsoc.config import MeshConfig
    from hdl.etsoc.mesh import EtSocMesh
    from sim.experiments import mesh
    return Fabric(MeshConfig, EtSocMesh, "etsoc_mesh", "testbenches.mesh", mesh)


def _experiments(fabric):
    return _fabric(fabric).module.EXPERIMENTS


def resolve_names(names):
    """Expand ``all``, fabric names and ``fabric.experiment`` into (fabric, experiment) pairs.

    Raises
    ------
    UsageError
        On an unknown fabric or experiment, naming the allowed values.
    """
    out = []
    for name in names:
        if name == "all":
            out += [(f, e) for f in FABRICS for e in _experiments(f)]
            continue
        fabric, dot, experiment = name.partition(".")
        if fabric not in FABRICS:
            raise UsageError(f"NAME must start with one of {', '.join(FABRICS)} or be 'all', "
                             f"not {name!r}")
        known = _experiments(fabric)
        if not dot:
            out += [(fabric, e) for e in known]
        elif experiment in known:
            out.append((fabric, experiment))
        else:
            raise UsageError(f"experiment must be one of {', '.join(known)}, not {experiment!r}")
    return list(dict.fromkeys(out))


def _field_hint(name, own, among=None):
    """`` (...)`` after an unknown field ``name``: the other fabrics that have
    it, else the closest field of any fabric (with its fabric when ``own``,
    the fabrics the field was meant for, lack it), else nothing.  ``among``
    (``{fabric: [field, ...]}``) limits the fields named to those (synthesis
    takes the structural ones only); by default every field of every
    fabric."""
    import difflib

    names = among or {f: [x.name for x in dataclasses.fields(_fabric(f).config)]
                      for f in FABRICS}
    elsewhere = [f for f in FABRICS if f not in own and name in names[f]]
    if elsewhere:
        return f" ({name} is a field of {' and '.join(elsewhere)})"
    every = list(dict.fromkeys(n for f in FABRICS for n in names[f]))
    close = difflib.get_close_matches(name, every, n=1)
    if not close:
        return ""
    if any(close[0] in names[f] for f in own):
        return f" (did you mean {close[0]}?)"
    return f" (did you mean {close[0]}, a field of " \
           f"{' and '.join(f for f in FABRICS if close[0] in names[f])}?)"


def unknown_field(option, config_cls, name):
    """The error for ``option`` (``--set``, ``--grid``) naming ``name``, which
    is not a field of ``config_cls``: the fields it has, then the fabrics
    ``name`` is a field of, or else the closest field (:func:`_field_hint`)."""
    fields = [f.name for f in dataclasses.fields(config_cls)]
    own = [f for f in FABRICS if _fabric(f).config is config_cls]
    return UsageError(f"{option} field must be one of {', '.join(fields)}, not {name!r}"
                      + _field_hint(name, own))


def parse_overrides(config_cls, items):
    """Apply ``FIELD=VALUE`` strings to a default ``config_cls`` and validate it.

    Values are parsed by the field's default's type: integers (decimal, with
    leading zeros or not, or ``0x``), floats, booleans (``true``/``false``,
    ``1``/``0``, ``yes``/``no``, ``on``/``off``), strings, and comma-separated
    tuples of numbers, bracketed or not, or of ``[x, y]`` pairs, which are
    flattened (a refusal of the flat list then says so).

    Raises
    ------
    UsageError
        On a malformed item, an unknown field, a field given twice, an
        unparsable value (a tuple with an empty item among them), or a value
        the configuration rejects.
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    defaults = config_cls()
    changes = {}
    paired = set()      # fields given as [x, y] pairs
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--set takes FIELD=VALUE, a field's name before the '=', "
                             f"not {item!r}")
        if name not in fields:
            raise unknown_field("--set", config_cls, name)
        if name in changes:
            raise UsageError(f"--set gives {name} more than once; give it once")
        default = getattr(defaults, name)
        try:
            if (isinstance(default, (int, float, tuple)) and not isinstance(default, bool)
                    and not text.isascii()):
                # Python reads other scripts' digits ('١٦') as numbers; a
                # number here is written in ASCII, as in TOML
                raise ValueError(text)
            if isinstance(default, tuple):
                # [16,32] and (16,32), as fabricsim list and TOML write them, too
                inner = text if _PAIRS.fullmatch(text) else re.sub(
                    r"^\s*([\[(])(.*)([\])])\s*$",
                    lambda m: m[2] if m[1] + m[3] in ("[]", "()") else m[0], text)
                if _PAIRS.fullmatch(inner):
                    # [x, y] pairs, as a TOML file may give them, flattened
                    inner = ",".join(_PAIR.findall(inner))
                    paired.add(name)
                parts = [p.strip() for p in inner.split(",")] if inner.strip() else []
                if "" in parts:
                    raise UsageError(f"{name} must be comma-separated numbers with none "
                                     f"left empty, not {text!r}")
                if any(re.search(r"\s", p) for p in parts):
                    # "1 2" is no number: not read as 12
                    raise UsageError(f"{name} must be comma-separated numbers, not {text!r}")
                value = tuple(_number(p) for p in parts)
            elif isinstance(default, bool):
                if text.lower() not in _BOOLEAN:
                    raise UsageError(f"{name} must be true or false (or 1/0, yes/no, on/off), "
                                     f"not {text!r}")
                value = _BOOLEAN[text.lower()]
            elif isinstance(default, int):
                value = _integer(text)
            elif isinstance(default, float):
                value = float(text)
            else:
                value = text
        except UsageError:
            raise
        except ValueError:
            raise UsageError(_unparsable(defaults, name, text)) from None
        changes[name] = value
    try:
        return defaults.replace(**changes)
    except ValueError as error:
        name = str(error).partition(" ")[0]
        raise UsageError(f"{error} (the [x, y] pairs given are read as this flat list)"
                         if name in paired else str(error)) from None


def _unparsable(defaults, name, text):
    """The message for ``--set name=text`` whose text does not parse as the
    field's type: the configuration's own, which names the allowed values,
    when it has one for the text as given; otherwise the type it takes (a
    tuple field always: the configuration would check the text's characters)."""
    default = getattr(defaults, name)
    if not isinstance(default, tuple):
        try:
            dataclasses.replace(defaults, **{name: text})
        except ValueError as error:
            if str(error).startswith(f"{name} must be "):
                if isinstance(default, float):
                    # '0x1' is in range as a number, but no decimal one
                    allowed = str(error).removeprefix(f"{name} must be ").rsplit(", not ", 1)[0]
                    return f"{name} must be {allowed}, as a decimal number, not {text!r}"
                return str(error)
        except TypeError:
            pass
    kind = {int: "an integer (0x... allowed)", float: "a number"}.get(
        type(default), "comma-separated numbers" if isinstance(default, tuple)
        else type(default).__name__)
    return f"{name} must be {kind}, not {text!r}"


#: One ``[x, y]`` (or ``(x, y)``) pair of a ``--set`` list value, and a
#: list of them, as a TOML file's ``placement = [[0, 0], [1, 0]]``.
_PAIR_BODY = r"[^\[\]()\s,]+\s*,\s*[^\[\]()\s,]+"
_ONE_PAIR = rf"(?:\[\s*{_PAIR_BODY}\s*\]|\(\s*{_PAIR_BODY}\s*\))"
_PAIR = re.compile(_PAIR_BODY)
_PAIRS = re.compile(rf"\s*{_ONE_PAIR}(?:\s*,\s*{_ONE_PAIR})*\s*")

_BOOLEAN = {"1": True, "true": True, "yes": True, "on": True,
            "0": False, "false": False, "no": False, "off": False}


def os_error_text(error):
    """One line for an ``OSError``: ``"<file>: <reason>"`` (``"results/report.md:
    No space left on device"``), or its own text when it names no file."""
    if error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return str(error).replace("\n", " ")


def folder_option(text):
    """``--results`` or ``--build`` value: a folder path, not empty (an empty
    path would mean the current folder), that the file system can name
    (:func:`path_too_long`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"a folder must be named, not {text!r}")
    too_long = path_too_long(text)
    if too_long:
        raise argparse.ArgumentTypeError(f"a folder the file system can name, not one {too_long}")
    return text


def path_too_long(path):
    """Why the file system cannot name ``path`` (``"whose name 'aaa...' is
    300 bytes, over 255"``), or ``""``: a name in it longer than the file
    system allows, or the whole path longer than the system allows, either
    of which makes every use of the path fail (``File name too long``)."""
    path = os.fsencode(os.path.abspath(path))
    try:
        most_name = os.pathconf("/", "PC_NAME_MAX")
        most_path = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):   # not POSIX: the usual limits
        most_name, most_path = 255, 4096
    for name in path.split(b"/"):
        if len(name) > most_name:
            shown = os.fsdecode(name)
            shown = shown[:20] + "..." if len(shown) > 23 else shown
            return f"whose name {shown!r} is {len(name)} bytes, over {most_name}"
    if len(path) >= most_path:
        return f"of {len(path)} bytes, over {most_path - 1}"
    return ""


#: Most simulations or syntheses ``--jobs`` may run at once.
MAX_JOBS = 1024


def _scheduler_option(text):
    from sim.sweep import scheduler_option
    return scheduler_option(text)


def jobs_option(text):
    """``--jobs`` value: an integer from 1 to :data:`MAX_JOBS`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(
            f"--jobs must be an integer from 1 to {MAX_JOBS}, not {text!r}")
    return value


def _integer(text):
    """``text`` as an integer: decimal, leading zeros allowed (``03``), or
    with a ``0x``, ``0o`` or ``0b`` prefix.

    Raises
    ------
    ValueError
        If it is neither.
    """
    try:
        return int(text, 0)
    except ValueError:
        if re.fullmatch(r"\s*[+-]?[0-9]+(?:_[0-9]+)*\s*", text):
            return int(text, 10)     # int(x, 0) refuses '03', a decimal 3
        raise


def _number(text):
    try:
        return _integer(text)
    except ValueError:
        return float(text)


def _cmd_list(args):
    from rich.table import Table

    for fabric in args.fabrics:
        if fabric not in (*FABRICS, "all"):
            raise UsageError(f"FABRIC must be one of {', '.join(FABRICS)} or all, not {fabric!r}")
    fabrics = ([f for f in FABRICS if f in args.fabrics or "all" in args.fabrics]
               or list(FABRICS))
    console = wide_console()
    table = Table(title="experiments")
    # names are never split, even in a narrow terminal: they are copied
    # into commands
    table.add_column("name", no_wrap=True)
    table.add_column("what")
    for fabric in fabrics:
        for name, exp in _experiments(fabric).items():
            table.add_row(f"{fabric}.{name}", exp.title)
    console.print(table)
    for fabric in fabrics:
        table = Table(title=f"{fabric} configuration (--set FIELD=VALUE)")
        table.add_column("field", no_wrap=True)
        for col in ("default", "rebuilds", "source"):
            table.add_column(col, overflow="fold")
        for f in dataclasses.fields(_fabric(fabric).config):
            # the column folds a long value (payload_kib's eleven sizes)
            default = repr(f.default) if len(repr(f.default)) < 200 else "(see source)"
            table.add_row(f.name, default,
                          "yes" if f.metadata.get("structural") else "no",
                          f.metadata.get("source", ""))
        console.print(table)
    from sim.synth import BLOCKS

    table = Table(title="FPGA blocks (fabricsim synth BLOCK)")
    table.add_column("block", no_wrap=True)
    for col in ("fabric", "devices", "source"):
        table.add_column(col, overflow="fold")
    for block in BLOCKS.values():
        if block.fabric in fabrics:
            table.add_row(block.name, block.fabric + " (top)" * block.top,
                          ", ".join(block.devices), block.source)
    console.print(table)
    return 0


@dataclasses.dataclass(frozen=True)
class Job:
    """One planned experiment: ``parts`` is ``[(part name or None, configuration,
    runs)]``, every run's register writes already built and checked."""

    fabric: str
    name: str
    parts: tuple


def _split_sets(fabrics, items):
    """``{fabric: [FIELD=VALUE, ...]}``: with several fabrics a ``--set`` goes to
    every fabric that has the field.

    Raises
    ------
    UsageError
        If a field is in none of ``fabrics``.
    """
    if len(fabrics) == 1:
        return {fabrics[0]: list(items)}
    fields = {f: {x.name for x in dataclasses.fields(_fabric(f).config)} for f in fabrics}
    for item in items:
        name = item.partition("=")[0]
        if not any(name in names for names in fields.values()):
            raise UsageError(f"--set field must be a field of {', '.join(fabrics)}, "
                             f"not {name!r}" + _field_hint(name, fabrics))
    return {f: [item for item in items if item.partition("=")[0] in fields[f]]
            for f in fabrics}


def none_left(skipped):
    """The refusal of a run whose every experiment was skipped: ``skipped``
    holds ``(experiment, FieldSetByExperiment, items)`` for each.  One
    experiment's is its own; several name which field each refused, grouped
    (``pcie.peer_copy and pcie.kernel_push refuse staging_chunk_bytes,
    pcie.host_staged refuses pageable_chunk_bytes``), rather than the first
    one's reason alone, and the ``--config`` file and table when every
    refusal names them (:func:`sim.config_file.refused_with_file`)."""
    if len(skipped) == 1:
        return skipped[0][1]
    refused, files = {}, set()
    for experiment, error, items in skipped:
        text = str(error)
        file = re.match(r"--config .*?: \[\w+\] ", text)
        files.add(file.group(0) if file else "")
        # the field the message names first
        found = [(m.start(), f) for f in (i.partition("=")[0] for i in items)
                 if (m := re.search(rf"(?<!\w){re.escape(f)}(?!\w)", text))]
        refused.setdefault(min(found)[1] if found else "a field set", []).append(experiment)
    said = ", ".join(
        f"{', '.join(names[:-1]) + ' and ' if names[:-1] else ''}{names[-1]} "
        f"refuse{'s' * (len(names) == 1)} {field}" for field, names in refused.items())
    return FieldSetByExperiment(f"{files.pop() if len(files) == 1 else ''}the fields set must "
                                f"leave at least one experiment to run, not none: {said} (run "
                                f"one alone to see why)")


def plan_job(fabric, name, items=()):
    """Plan experiment ``fabric.name`` under the ``FIELD=VALUE`` strings ``items``:
    parse the configuration, build every run's register writes.  Nothing is
    generated or simulated.

    Raises
    ------
    FieldSetByExperiment
        If a field in ``items`` is one the experiment sets itself.
    UsageError
        On a bad field, value or experiment request (the message names the field
        and the allowed values), or a configuration under which the experiment,
        or one of its builds, has no run.
    """
    fab = _fabric(fabric)
    cfg = parse_overrides(fab.config, items)
    exp = fab.module.EXPERIMENTS[name]
    explicit = {item.partition("=")[0] for item in items}
    try:
        if hasattr(fab.module, "check_overrides"):
            fab.module.check_overrides(cfg, exp, explicit)
        parts = (fab.module.build_parts(cfg, exp, explicit)
                 if hasattr(fab.module, "build_parts") else [(None, cfg)])
    except SetByExperiment as error:
        raise FieldSetByExperiment(str(error)) from None
    except ValueError as error:
        raise UsageError(str(error)) from None
    built = []
    for part, pcfg in parts:
        try:
            built.append((part, pcfg, fab.module.build_runs(pcfg, exp, part)
                          if part is not None else fab.module.build_runs(pcfg, exp)))
        except ValueError as error:
            raise UsageError(f"{fabric}.{name} ({part} build): {error}" if part
                             else str(error)) from None
    for part, _, runs in built:
        if not runs:
            where = f"'s {part} build" if part else ""
            raise UsageError(f"the fields set ({', '.join(sorted(explicit)) or 'none'}) must "
                             f"leave {fabric}.{name}{where} at least one run, not none")
    return Job(fabric, name, tuple(built))


def job_run_folders(job):
    """``[(folder, runs)]``: the run folder of each part of ``job`` (under the
    run root, ``<fabric>.<name>[.<part>]``) and how many runs it simulates."""
    return [(f"{job.fabric}.{job.name}" + (f".{part}" if part else ""), len(runs))
            for part, _, runs in job.parts]


#: A testbench's line for each finished run (``testbenches/*.py``).
_RUN_DONE = re.compile(rb"\brun (\d+)/(\d+) ")


def runs_logged(job, run_root, since):
    """Runs of ``job`` that its simulation logs (``sim.log`` in each part's run
    folder) say have finished, counting only logs written since ``since``
    (seconds since the epoch), so an earlier invocation's log counts nothing.
    A part whose result is reused from the cache logs nothing."""
    done = 0
    for log in _logs_since(job, run_root, since):
        try:
            with open(log, "rb") as handle:
                handle.seek(max(0, log.stat().st_size - 16384))
                found = _RUN_DONE.findall(handle.read())
        except OSError:
            continue
        if found:
            done += int(found[-1][0])
    return done


def simulation_started(job, run_root, since):
    """Whether a simulation of ``job`` has started since ``since`` (seconds
    since the epoch): a part's ``sim.log`` written since then.  Before that
    the experiment builds its simulator (or starts, or reuses every result)."""
    return any(_logs_since(job, run_root, since))


def _logs_since(job, run_root, since):
    """The ``sim.log`` of each part of ``job`` under ``run_root`` written at or
    after ``since`` (seconds since the epoch)."""
    for folder, _ in job_run_folders(job):
        log = Path(run_root) / folder / "sim.log"
        try:
            if log.stat().st_mtime >= since:
                yield log
        except OSError:
            continue


def job_verilog(job):
    """``[(fabric, configuration)]`` Verilog builds ``job`` needs, each once."""
    return list(dict.fromkeys((job.fabric, cfg.hardware()) for _, cfg, _ in job.parts))


def generate(fabric, hardware, build_root):
    """Generate (or find in the cache under ``build_root``) the Verilog of
    ``fabric``'s top for the structural configuration ``hardware``; returns
    ``(path, seconds)``.

    Raises
    ------
    Whatever :func:`sim.build.generate_verilog` raises (``ValueError``,
    ``TypeError``, Amaranth's ``YosysError``).
    """
    from sim.build import generate_verilog

    fab = _fabric(fabric)
    t0 = time.monotonic()
    path = generate_verilog(fab.top, hardware, fab.top_name, build_root=Path(build_root))
    return path, time.monotonic() - t0


def execute_job(job, sim, build_root, run_root, waves=False, cache=False, fresh=False):
    """Simulate every run of ``job`` and analyse it; returns ``(result dict, number
    of runs, seconds, parts reused)``.  Verilog comes from the cache under
    ``build_root`` (made if missing); each part's cocotb run works in
    ``run_root/<fabric>.<name>[.part]``.  With ``cache`` (and no ``waves``), a
    part whose Verilog, testbench, plan and simulator are unchanged since an
    earlier run reuses that run's simulation result from
    ``build_root/simulations`` (:func:`sim.runner.run_cocotb_cached`) unless
    ``fresh``, and a part simulated stores its result there; the analysis
    always runs.

    Raises
    ------
    ExperimentError
        (the fabric module's) If a run lost, duplicated or corrupted data, or stalled.
    ValueError
        If a result cannot be analysed.
    """
    from sim.runner import run_cocotb_cached

    fab = _fabric(job.fabric)
    exp = fab.module.EXPERIMENTS[job.name]
    t1 = time.monotonic()
    got = {}
    reused = 0
    for (part, cfg, runs), (run_dir, _) in zip(job.parts, job_run_folders(job)):
        verilog, _ = generate(job.fabric, cfg.hardware(), build_root)
        got[part], hit = run_cocotb_cached(
            verilog, fab.top_name, fab.testbench, sim=sim, plan=fab.module.plan(cfg, runs),
            test_dir=Path(run_root) / run_dir, waves=waves, reuse=not fresh,
            cache_dir=Path(build_root) / "simulations" if cache else None)
        reused += hit
    parts = job.parts
    if parts[0][0] is None:
        _, cfg, runs = parts[0]
        data = fab.module.analyse(cfg, exp, runs, got[None]["runs"], sim)
    else:
        data = fab.module.analyse({p: c for p, c, _ in parts}, exp,
                                  {p: r for p, _, r in parts},
                                  {p: got[p]["runs"] for p, _, _ in parts}, sim)
    waves_out = [str(g["waves"]) for g in got.values() if "waves" in g]
    if waves_out:
        data["waves"] = waves_out[0] if len(waves_out) == 1 else waves_out
    return data, sum(len(runs) for _, _, runs in parts), time.monotonic() - t1, reused


def execute_or_error(job, sim, build_root, run_root, waves=False, cache=False, fresh=False):
    """:func:`execute_job` for a worker process: ``(data, runs, seconds, parts
    reused, None)``, or ``(None, 0, 0, 0, message)`` when the experiment failed
    in any way (a run that lost data or stalled, a failed build, a simulator
    that crashed), so one failure never takes the others' results with it."""
    fab = _fabric(job.fabric)
    try:
        return (*execute_job(job, sim, build_root, run_root, waves, cache, fresh), None)
    except (fab.module.ExperimentError, ValueError) as error:
        return None, 0, 0.0, 0, str(error)
    except Exception as error:   # noqa: BLE001 - reported per experiment, not raised
        return None, 0, 0.0, 0, f"{type(error).__name__}: {error}"


def write_json_atomically(path, data):
    """Write ``data`` as JSON to ``path`` through a temporary file renamed into
    place, so an interrupted write never leaves a partial file."""
    from sim.build import write_atomically

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def _interrupted(signum, frame):
    import signal
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def stops_as_interrupts():
    """A ``with`` block in which SIGTERM and SIGHUP raise ``KeyboardInterrupt``
    as Ctrl-C does (in the main thread; elsewhere it changes nothing), so
    ``kill``, ``timeout`` or a closed terminal end a command with its one
    interrupt line rather than silently; the handlers before it are put
    back after it."""
    import signal

    stops = (signal.SIGTERM, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.signal(s, _interrupted) for s in stops} if main else {}
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)


def exit_status(main, prog, argv=None, interrupted=""):
    """``main(argv)``, a command (``fabricsim``'s, or a module's run as
    ``python -m``): its exit status, or, with one line on stderr and no
    traceback, 130 for an interrupt (Ctrl-C, SIGTERM, SIGHUP;
    :func:`stops_as_interrupts`), the line ending with what ``interrupted``
    says of the results, and 1 for an ``OSError`` (a full disk, a file where
    a folder should be: not the input's fault; :func:`os_error_text`)."""
    with stops_as_interrupts():
        try:
            return main(argv)
        except KeyboardInterrupt:
            print(f"{prog}: interrupted" + (f"; {interrupted}" if interrupted else ""),
                  file=sys.stderr)
            return 130
        except OSError as error:
            print(f"{prog}: error: {os_error_text(error)}", file=sys.stderr)
            return 1


@contextlib.contextmanager
def pool(jobs):
    """A process pool of ``jobs`` workers for a ``with`` block, started fresh
    (``spawn``) so none inherits the parent's threads or locks.  Each worker
    leads a process group of its own, so a Ctrl-C reaches this process alone;
    if the block ends by an exception (``KeyboardInterrupt`` included), every
    worker's group, its simulator included, is sent SIGTERM rather than
    waited for, and the tasks not yet started fail with the broken pool.
    Inside the block (in the main thread) SIGTERM and SIGHUP raise
    ``KeyboardInterrupt`` as Ctrl-C does, so ``kill``, ``timeout`` or a
    closed terminal stop the workers too.  A normal end waits for the
    workers."""
    import concurrent.futures
    import multiprocessing
    import signal

    context = multiprocessing.get_context("spawn")
    before = set(multiprocessing.active_children())
    workers = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                                                     initializer=os.setpgrp)
    stops = (signal.SIGTERM, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    with stops_as_interrupts():
        try:
            yield workers
            workers.shutdown(wait=True)
        except BaseException:
            # a second Ctrl-C (or the copy `timeout` sends its process group)
            # must not cut this short and leave workers running
            previous = ({s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *stops)}
                        if main else {})
            try:
                # not cancel_futures: the pool's thread then fails the queued
                # tasks as broken, where it would trip over cancelled ones
                workers.shutdown(wait=False)
                for child in set(multiprocessing.active_children()) - before:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        # a worker still starting has no group (nor simulator) yet
                        if os.getpgid(child.pid) == child.pid:
                            os.killpg(child.pid, signal.SIGTERM)
                    child.terminate()
            finally:
                if main:
                    signal.signal(signal.SIGINT, previous[signal.SIGINT])
            raise


#: Seconds between the progress lines of a long command (``run``, ``sweep``,
#: ``synth``, ``sim.prove``, ``sim.random_traffic``) when its output is not a
#: terminal (a terminal gets a live status line instead).
PIPED_PROGRESS_SECONDS = 60

#: Seconds between updates of the live status line.
STATUS_SECONDS = 2


def waited_text(since):
    """How long ago the ``time.monotonic()`` value ``since`` was, to the
    second: ``"45 s"``, ``"2 min 5 s"``."""
    minutes, seconds = divmod(round(time.monotonic() - since), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


#: Width, in characters, of the tables and log lines written to a file or a
#: pipe: rich's default there is 80, which cuts a wide table's cells short
#: ("pcie_s…") and breaks a log line in three.  ``COLUMNS`` in the
#: environment still wins.
PIPED_COLUMNS = 160


def wide_console(**options):
    """A ``rich.console.Console`` (``options`` as rich's) for tables and log
    lines: :data:`PIPED_COLUMNS` wide when its output is not a terminal and
    ``COLUMNS`` is unset, the terminal's width otherwise."""
    from rich.console import Console

    console = Console(**options)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPED_COLUMNS
    return console


@contextlib.contextmanager
def progress_shown(console, describe):
    """Show the text ``describe()`` returns while the ``with`` block runs: as a
    live status line on a terminal, redrawn every :data:`STATUS_SECONDS`, and,
    when ``console`` writes to a pipe (a CI log, ``make report > log``), which
    shows no status line unless ``FORCE_COLOR`` makes rich draw it there, as a
    log line every :data:`PIPED_PROGRESS_SECONDS` as well.  ``describe`` is
    called from a thread of its own, so it may only read what the block
    changes (counters, sets it rebinds).  Yields a function that redraws the
    status line at once (after a unit of work ends).

    Raises
    ------
    Exception
        Whatever the first ``describe()`` raises, before the block runs.  A
        later failure of ``describe`` is logged once and leaves the line as it
        was: the work goes on without it.
    """
    tty = getattr(console.file, "isatty", lambda: False)()
    stop = threading.Event()
    drawing = threading.Lock()
    failed = []
    with console.status(describe()) as status:
        def redraw():
            with drawing:
                if failed:
                    return None
                try:
                    text = describe()
                except Exception as error:   # noqa: BLE001 - the display only
                    failed.append(error)
                    console.log(f"progress line stopped: {type(error).__name__}: {error}",
                                markup=False)
                    return None
                status.update(text)
                return text

        def keep_showing():
            last_logged = time.monotonic()
            while not stop.wait(STATUS_SECONDS):
                text = redraw()
                if text and not tty and time.monotonic() - last_logged >= PIPED_PROGRESS_SECONDS:
                    console.log(text)
                    last_logged = time.monotonic()

        shower = threading.Thread(target=keep_showing, daemon=True)
        shower.start()
        try:
            yield redraw
        finally:
            stop.set()
            shower.join()


#: Seconds each experiment last took to simulate, under ``<build>/runs/<sim>/``.
DURATIONS_NAME = "seconds.json"

#: Seconds each experiment took in a cold ``make report`` on a 2-core machine
#: under Verilator (build included), used only to order a build folder's
#: first run, longest first; a recorded time replaces its entry.  Without
#: them the longest started last and ran alone for its last minutes.
TYPICAL_SECONDS = {
    "mesh.allreduce": 290, "mesh.credit": 140, "pcie.host_staged": 135, "mesh.one_kb": 65,
    "mesh.ring_bandwidth": 60, "mesh.round_trip": 45, "dsm.plane_off": 35, "dsm.mixed": 27,
    "dsm.bidirectional": 26, "mesh.non_compute": 22, "dsm.ring": 22, "mesh.layouts": 22,
    "mesh.message_size": 19, "dsm.isolated_pairs": 18, "dsm.one_way": 14,
    "mesh.three_speeds": 12, "dsm.topology": 10, "pcie.kernel_pull": 4, "pcie.kernel_push": 4,
    "pcie.peer_copy": 4, "pcie.link_faults": 4, "pcie.pageable_copy": 3, "mesh.barrier": 2,
}


def _read_durations(path):
    try:
        data = json.loads(Path(path).read_text())
        return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def longest_first(jobs, durations, key=lambda job: f"{job.fabric}.{job.name}"):
    """``jobs`` in the order to start them: those never timed first (in their
    order), then the others by ``durations`` (``{key(job): seconds}``, by
    default keyed ``"fabric.name"``: the last run's wall time), longest
    first, so the longest job does not start last and leave the other
    workers idle at the end."""
    timed = sorted((j for j in jobs if key(j) in durations), key=lambda j: -durations[key(j)])
    return [j for j in jobs if key(j) not in durations] + timed


def log_config_tables(console, source, from_file, taken, done):
    """Log what the ``--config`` file ``source`` gave: for each fabric of
    ``taken`` (``{fabric: items}``) the items of its table that were used
    (a ``--set`` or ``--grid`` of a field wins over the file), then the
    tables (``from_file``, as :func:`sim.config_file.load_config_file`
    returns them) of other fabrics as not used, nothing of them being
    ``done`` (``"run"``, ``"synthesised"``) here; a field of the file that the
    command line gives instead is named as replaced.  Called once the
    request has been checked, so that a refusal stays one line."""
    from rich.markup import escape

    for fabric, items in taken.items():
        if from_file.get(fabric):
            used = [i for i in from_file[fabric] if i in items]
            replaced = [i.partition("=")[0] for i in from_file[fabric] if i not in items]
            console.log(escape(f"--config {source}: [{fabric}] "
                               + (", ".join(used) if used else
                                  "nothing used, the command line gives every field")
                               + (f"; {', '.join(replaced)} given on the command line instead"
                                  if used and replaced else "")))
    unused = [f for f in from_file if f not in taken]
    if unused:
        one = len(unused) == 1
        console.log(escape(f"--config: {', '.join(f'[{f}]' for f in unused)} not used, "
                           f"nothing of {'that fabric' if one else 'those fabrics'} is {done} "
                           f"here; {'its' if one else 'their'} field names and types were "
                           f"checked, not {'its' if one else 'their'} values"))


def _cmd_run(args):
    import concurrent.futures

    from rich.markup import escape

    console = wide_console(stderr=True, log_path=False)
    pairs = resolve_names(args.names)
    fabrics = list(dict.fromkeys(f for f, _ in pairs))
    given = _split_sets(fabrics, args.set)
    from_file = load_config_file(args.config) if args.config is not None else {}
    sets = {f: with_config_items(from_file.get(f, ()), given[f]) for f in fabrics}
    _resolve_simulator(args)

    def blamed(error, fabric, check):
        # the refusal names the --config file when its items are why
        return refused_with_file(error, args.config, fabric, check, given[fabric], sets[fabric])

    # Every plan is built before anything is generated: bad input stops here.
    # An experiment that sets a --set field itself is refused when named on
    # its own and skipped when a whole fabric (or all) is run.
    named = set(args.names)
    jobs, skipped = [], []
    for fabric in fabrics:
        # what every experiment of the fabric would refuse, once per fabric
        fab = _fabric(fabric)

        def check_fabric(items, fab=fab, fabric=fabric):
            cfg = parse_overrides(fab.config, items)
            # (an experiment named alone gives its own reason, checked with it)
            if (fabric in named or "all" in named) \
                    and hasattr(fab.module, "check_fabric_overrides"):
                try:
                    fab.module.check_fabric_overrides(cfg, {i.partition("=")[0] for i in items})
                except ValueError as error:
                    raise UsageError(str(error)) from None

        try:
            check_fabric(sets[fabric])
        except UsageError as error:
            error = blamed(error, fabric, check_fabric)
            if len(fabrics) == 1 or str(error).startswith("--config"):
                raise error from None
            # With several fabrics, say whose configuration refused the value.
            raise UsageError(f"{fabric}: {error}") from None
    for fabric, name in pairs:
        try:
            jobs.append(plan_job(fabric, name, sets[fabric]))
        except UsageError as error:
            error = blamed(error, fabric, lambda items, f=fabric, n=name: plan_job(f, n, items))
            if f"{fabric}.{name}" in named:
                raise error from None
            if isinstance(error, FieldSetByExperiment):
                skipped.append((f"{fabric}.{name}", error, sets[fabric]))
                continue
            # run as part of a whole fabric: say which experiment refused it
            raise UsageError(f"{fabric}.{name}: {error}") from None
    if not jobs:
        raise none_left(skipped)
    # ... and so does a folder the results or the builds cannot be written to.
    results_dir = Path(args.results)
    for job in jobs:
        out = results_dir / job.fabric / f"{job.name}.json"
        if out.is_dir():
            raise UsageError(f"--results must leave {str(out)!r} free for {job.fabric}."
                             f"{job.name}'s results, but it is a folder")
    # Each fabric's results go to a folder of its own, checked now rather than
    # after its simulations; the folders made are removed again, if left
    # empty, whether the run goes on or is refused.
    made = _writable_folders((results_dir, "--results"),
                             *((results_dir / f, "--results")
                               for f in dict.fromkeys(j.fabric for j in jobs)),
                             (Path(args.build), "--build"))
    # said once the request is accepted, so that a refusal stays one line
    for _, error, _ in skipped:
        console.log(f"skipped: {escape(str(error))}")
    log_config_tables(console, args.config, from_file, sets, "run")
    from sim.runner import fst_headers_missing

    if args.waves and args.sim == "verilator" and (missing := fst_headers_missing()):
        packages = {"lz4.h": "liblz4-dev", "zlib.h": "zlib1g-dev"}
        console.log(f"--waves: Verilator writes VCD here, not FST: the C++ compiler finds no "
                    f"{' or '.join(missing)} (Debian: "
                    f"{' '.join(packages[h] for h in missing)}); VCD files are tens of "
                    "times larger (GB for an experiment of many runs) and slower to write, "
                    "and the simulator's first build with tracing takes minutes")
    run_root = Path(args.build) / "runs" / args.sim
    builds = list(dict.fromkeys(b for job in jobs for b in job_verilog(job)))
    failed = False
    # nothing that came out (an interrupt, every experiment failed) leaves an
    # empty results folder behind
    try:
        with pool(args.jobs) as workers:
            # Each distinct Verilog is generated once, the builds in parallel ...
            with console.status(f"generating Verilog for {len(builds)} configuration"
                                f"{'s' * (len(builds) != 1)} "
                                f"(cached per configuration), "
                                f"{min(args.jobs, len(builds))} at a time"):
                futures = {workers.submit(generate, f, hw, args.build): f for f, hw in builds}
                for future in concurrent.futures.as_completed(futures):
                    try:
                        path, seconds = future.result()
                    except Exception as error:   # noqa: BLE001 - each experiment reports it
                        console.log(f"[red]{futures[future]} Verilog generation failed:[/red] "
                                    f"{type(error).__name__}: {escape(str(error))}")
                        failed = True
                        continue
                    console.log(f"{futures[future]} Verilog: {escape(str(path))} ({seconds:.0f} s)")
            # ... then the experiments, as many at once as there are workers.
            durations_path = run_root / DURATIONS_NAME
            durations = {**TYPICAL_SECONDS, **_read_durations(durations_path)}
            started = time.time()
            futures = {workers.submit(execute_or_error, job, args.sim, args.build, run_root,
                                      args.waves, True, args.fresh): job
                       for job in longest_first(jobs, durations)}
            pending = set(futures)

            def progress():
                # The workers take the experiments in submission order, so the
                # first --jobs unfinished ones are those running (the pool also
                # marks running the ones it has queued next).
                running = [f"{futures[f].fabric}.{futures[f].name} "
                           f"{runs_logged(futures[f], run_root, started)}/"
                           f"{sum(n for _, n in job_run_folders(futures[f]))} runs"
                           + ("" if simulation_started(futures[f], run_root, started)
                              else " (building or starting)")
                           for f in [f for f in futures if f in pending][:args.jobs]]
                return (f"{len(jobs) - len(pending)}/{len(jobs)} experiments done ({args.sim}, "
                        f"{min(args.jobs, len(jobs))} at a time)"
                        + ("; " + ", ".join(running) if running else ""))

            with progress_shown(console, progress) as redraw:
                while pending:
                    finished, pending = concurrent.futures.wait(
                        pending, return_when=concurrent.futures.FIRST_COMPLETED)
                    redraw()
                    for future in finished:
                        job = futures[future]
                        data, n_runs, seconds, reused, error = future.result()
                        out = results_dir / job.fabric / f"{job.name}.json"
                        if error is not None:
                            # Tool output (make's "*** [file:line: target]") is not markup.
                            console.log(f"[red]{job.fabric}.{job.name} failed:[/red] "
                                        f"{escape(str(error))}")
                            if out.is_file():
                                # the report would show it, with its own settings
                                console.log(f"{job.fabric}.{job.name}: {escape(str(out))} is "
                                            "an earlier run's result, left as it was; the "
                                            "report shows that one")
                            failed = True
                            continue
                        # the --set items, which the report marks as a what-if
                        write_json_atomically(out, {**data, "set": list(sets[job.fabric])})
                        if not reused:
                            durations[f"{job.fabric}.{job.name}"] = round(seconds, 1)
                            write_json_atomically(durations_path, durations)
                        how = (f"simulation results reused ({reused} of {len(job.parts)} parts)"
                               if reused else "simulated")
                        console.log(f"{job.fabric}.{job.name}: {n_runs} runs in {seconds:.0f} s, "
                                    f"{how}, {_rows_met_text(data, sets[job.fabric])} "
                                    f"-> {out}")
                        for wave in _waveforms(data):
                            console.log(f"{job.fabric}.{job.name} waveform: {escape(wave)}")
    finally:
        _remove_if_empty(made)
    return 1 if failed else 0


def _waveforms(data):
    """``"<path> (<size>)"`` of each waveform file an experiment's result
    names (key ``waves``: a path, or a list of them, one per part)."""
    paths = data.get("waves") or []
    out = []
    for path in [paths] if isinstance(paths, str) else paths:
        try:
            size = Path(path).stat().st_size
        except OSError:
            out.append(f"{path} (not found)")
            continue
        out.append(f"{path} ({size / 1e6:,.1f} MB)")
    return out


def _cmd_sweep(args):
    from rich.markup import escape
    from rich.table import Table

    from sim import sweep
    from sim.report import format_seed, format_value

    if args.scheduler is not None and args.engine != "dask":
        raise UsageError("--scheduler needs --engine dask")
    if args.metric is not None and not args.metric.strip():
        raise UsageError(f"--metric must be the start of a row's quantity (the row plotted), "
                         f"not {args.metric!r}")
    console = wide_console(stderr=True, log_path=False)
    # the fields of the --config file's table of the swept fabric are held at
    # every point, unless a --set or --grid gives them
    from_file = load_config_file(args.config) if args.config is not None else {}
    if args.name.startswith("synth."):
        from sim import synth
        if args.sim is not None:
            raise UsageError(f"--sim does not apply to {args.name} (synthesis runs Yosys and "
                             f"nextpnr, no simulator); leave it out, not {args.sim!r}")
        return synth.sweep(args, from_file)
    pairs = resolve_names([args.name])
    if len(pairs) != 1 or "." not in args.name:
        raise UsageError(f"NAME must be one experiment (fabric.experiment) or synth.BLOCK, "
                         f"not {args.name!r}")
    fabric, name = pairs[0]
    stem = sweep.table_stem(f"{fabric}.{name}", args.tag)
    grid = sweep.parse_grid(_fabric(fabric).config, args.grid)
    held = with_config_items(from_file.get(fabric, ()), args.set, [f for f, _ in grid])
    _resolve_simulator(args)
    results_dir = Path(args.results)
    run_root = Path(args.build) / "runs" / args.sim / "sweep" / stem

    def check(data):
        # on the first point to finish without failing, so that a mistyped
        # --metric costs a point or two, not the sweep
        quantities = list(dict.fromkeys(r["quantity"] for r in data["rows"]))
        if args.metric is not None and not any(q.startswith(args.metric) for q in quantities):
            raise UsageError(f"--metric must start a row's quantity (of the first point done: "
                             f"{'; '.join(quantities)}), not {args.metric!r}; the sweep "
                             f"stopped there")
    # the folders are checked before the points are planned, which can take
    # minutes (a third of a second a point for mesh.round_trip)
    with sweep.outputs_checked(results_dir, stem, args.build):
        planned = time.monotonic()
        total = math.prod(len(values) for _, values in grid)
        try:
            with progress_shown(console, lambda: f"{stem}: planning {total:,} point"
                                f"{'s' * (total != 1)}, {waited_text(planned)}"):
                points = sweep.plan_sweep(fabric, name, grid, held)
        except UsageError as error:
            raise refused_with_file(error, args.config, fabric,
                                    lambda items: sweep.plan_sweep(fabric, name, grid, items),
                                    args.set, held) from None
        log_config_tables(console, args.config, from_file, {fabric: held}, "run")
        if note := sweep.replaced_note(results_dir, f"{fabric}.{name}", args.tag):
            console.log(escape(note))

        def started():
            # once the workers are up: after a refused --scheduler, not before
            console.log(escape(sweep.started_line(stem, len(points), args.engine, args.jobs,
                                                  args.scheduler)))
        with sweep.points_shown(console, stem, len(points)) as progress:
            outcomes = sweep.run_sweep(points, args.sim, args.build, run_root,
                                       engine=args.engine, jobs=args.jobs,
                                       scheduler=args.scheduler, progress=progress, check=check,
                                       started=started)
    table = sweep.sweep_table(points, outcomes)
    path = sweep.write_sweep(results_dir, fabric, name, grid, held, args.sim, args.engine,
                             table, args.metric, args.tag)
    metric, chosen = sweep.metric_rows(table, args.metric)
    if args.metric is not None and not chosen and any("quantity" in r for r in table):
        quantities = list(dict.fromkeys(r["quantity"] for r in table if "quantity" in r))
        raise UsageError(f"--metric must start a row's quantity (the table is in {path}, "
                         f"without a plot), one of: {'; '.join(quantities)}; "
                         f"not {args.metric!r}")
    if chosen:
        # the row the sweep followed, named in full where every point has the same one
        quantities = {r["quantity"] for r in chosen}
        shown = Table(title=f"{stem}: {next(iter(quantities)) if len(quantities) == 1 else metric}")
        for field, _ in grid:
            shown.add_column(field)
        shown.add_column(f"model ({chosen[0]['unit']})")
        shown.add_column("seed")
        shown.add_column("met")
        for r in chosen:
            # as the report shows them: 20,080 cycles, not 2.008e+04; yes or no
            shown.add_row(*[r["point"][f] for f, _ in grid], format_value(r["model"], r["unit"]),
                          format_seed(r.get("reference"), r.get("reference_range"), r["unit"]),
                          {True: "yes", False: "no"}.get(r["met"], "—"))
        wide_console().print(shown)
    written = [path, path.with_suffix(".csv")] + [path.with_suffix(".png")] * bool(chosen)
    print(f"sweep: {', '.join(map(str, written))}")
    return 1 if any(error for _, error in outcomes) else 0


def _cmd_synth(args):
    from sim import synth
    return synth.main(args)


def _rows_met_text(data, sets):
    from sim.report import rows_met_text
    return rows_met_text(data["rows"], data.get("notes", ()), bool(sets))


def _cmd_report(args):
    from sim.report import print_summary, write_report
    try:
        path = write_report(Path(args.results))
    except ValueError as error:
        raise UsageError(str(error).replace("\n", " ")) from None
    print_summary(Path(args.results))
    print(f"report: {path}")
    return 0


def main(argv=None):
    """Entry point of the ``fabricsim`` command; returns the exit status."""
    parser = OneLineParser(prog="fabricsim",
                           description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--results", default="results", type=folder_option,
                        help="results folder (default: results)")
    parser.add_argument("--build", default="build", type=folder_option,
                        help="build folder (default: build)")
    parser.global_options = ("--results", "--build")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="list experiments, configuration fields and "
                                          "FPGA blocks")
    listing.add_argument("fabrics", nargs="*", metavar="FABRIC",
                         help="only these fabrics (all, the default: every one)")
    run = sub.add_parser("run", help="run experiments")
    run.add_argument("names", nargs="+", metavar="NAME",
                     help="a fabric (dsm, mesh, pcie), one experiment (dsm.one_way) or all; "
                          "fabricsim list shows them")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="change a configuration field for a what-if (repeatable; "
                          "fabricsim list shows the fields)")
    run.add_argument("--config", metavar="FILE", action=GivenOnce,
                     help="TOML file of configuration fields for a what-if: [dsm], [mesh], "
                          "[pcie] tables (a --set of the same field wins)")
    run.add_argument("--sim", default=None,
                     help="simulator: verilator (the default, or $FABRICSIM_SIM) or icarus")
    run.add_argument("--waves", action="store_true", help="write a waveform per experiment")
    run.add_argument("--fresh", action="store_true",
                     help="simulate every run even where the build folder holds the result of "
                          "the same Verilog, testbench, plan and simulator (and store the new "
                          "results there)")
    run.add_argument("--jobs", "-j", type=jobs_option, default=os.cpu_count() or 1, metavar="N",
                     help="experiments simulated at once (default: one per CPU)")
    sub.add_parser("report", help="write results/report.md from results/")
    swp = sub.add_parser("sweep", help="run one experiment (or synthesise one block: "
                                       "synth.BLOCK) over a grid of configuration values")
    swp.add_argument("name", metavar="NAME",
                     help="one experiment (dsm.one_way) or synth.BLOCK; fabricsim list shows "
                          "them")
    swp.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                     help="a field and its values (';' between the values of a tuple or string "
                          "field); repeat for a product grid")
    swp.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="a configuration field held at a value at every point (repeatable)")
    swp.add_argument("--config", metavar="FILE", action=GivenOnce,
                     help="TOML file of configuration fields held at every point: [dsm], "
                          "[mesh], [pcie] tables (a --set or --grid of the same field wins)")
    swp.add_argument("--sim", default=None,
                     help="simulator: verilator (the default, or $FABRICSIM_SIM) or icarus; "
                          "not for synth.BLOCK")
    swp.add_argument("--engine", default="local", choices=("local", "dask"),
                     help="a local process pool (default) or a Dask cluster")
    swp.add_argument("--scheduler", metavar="ADDRESS", type=_scheduler_option,
                     help="Dask scheduler address, tcp://HOST:PORT (default: start a local "
                          "Dask cluster)")
    swp.add_argument("--jobs", "-j", type=jobs_option, default=os.cpu_count() or 1, metavar="N",
                     help="points simulated at once (default: one per CPU)")
    swp.add_argument("--metric", metavar="TEXT",
                     help="the row plotted: the first whose quantity starts with TEXT")
    swp.add_argument("--tag", metavar="TAG", action=GivenOnce,
                     help="name the table NAME.TAG.* in the results folder's sweep/ "
                          "(letters, digits, '_' and '-', the first a letter or digit), so "
                          "an earlier sweep's table of NAME stays")
    from sim.synth import DEFAULT_TIMEOUT_S
    syn = sub.add_parser("synth", help="synthesise blocks for an FPGA: LUTs, flip-flops, "
                                       "block RAMs, Fmax")
    syn.add_argument("blocks", nargs="*", metavar="BLOCK",
                     help="blocks to synthesise (default: all; see sim.synth.BLOCKS)")
    syn.add_argument("--config", metavar="FILE", action=GivenOnce,
                     help="TOML file of configuration fields: [dsm], [mesh], [pcie] tables")
    syn.add_argument("--device", metavar="DEVICE",
                     help="only this target: ecp5 or ice40 (default: each block's targets)")
    syn.add_argument("--freq", type=float, metavar="MHZ",
                     help="timing target in MHz (default: ecp5 100, ice40 50)")
    syn.add_argument("--jobs", "-j", type=jobs_option, default=os.cpu_count() or 1, metavar="N",
                     help="blocks synthesised at once (default: one per CPU)")
    syn.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                     help=f"Yosys and nextpnr time allowed per block "
                          f"(default: {DEFAULT_TIMEOUT_S:g})")
    if not (sys.argv[1:] if argv is None else argv):
        # no command: what the commands are, rather than an error that one is missing
        parser.print_help()
        return 2
    args = parser.parse_args(argv)

    def command(_):
        try:
            return {"list": _cmd_list, "run": _cmd_run, "report": _cmd_report,
                    "sweep": _cmd_sweep, "synth": _cmd_synth}[args.command](args)
        except (UsageError, FileNotFoundError) as error:
            print(f"fabricsim: error: {error}", file=sys.stderr)
            return 2
    return exit_status(command, "fabricsim",
                       interrupted="a sweep writes its table only when every point has ended"
                       if args.command == "sweep" else "results finished before it are kept")


if __name__ == "__main__":
    # Run as ``python -m sim.cli`` this file is ``__main__``, a second copy of
    # the module: errors raised in sim.sweep or sim.synth are sim.cli's
    # UsageError, which this copy's ``except`` would not catch.
    from sim.cli import main as _main
    sys.exit(_main())
