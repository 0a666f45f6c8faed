"""``fabricsim``: list, run and report the fabrics' experiments.

    fabricsim list
    fabricsim run NAME... [--set FIELD=VALUE]... [--sim verilator|icarus] [--waves]
    fabricsim report

NAME is a fabric (``dsm``, ``mesh``, ``pcie``), one experiment (``dsm.one_way``) or ``all``.
``--set`` overrides any field of the fabric's configuration for a what-if;
structural fields rebuild the RTL (cached by configuration), run-time fields
only change the registers written per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "parse_overrides", "resolve_names"]

FABRICS = ("dsm", "mesh", "pcie")


class UsageError(ValueError):
    """Bad command-line input; the message names the field and what is allowed."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``fabricsim: error: ...``,
    exit status 2) rather than the usage text and the error."""

    def error(self, message):
        self.exit(2, f"fabricsim: error: {message} (see fabricsim --help)\n")


def _writable_folder(path, what):
    """Create folder ``path`` if needed and check that files can be written in it.

    Raises
    ------
    UsageError
        If it cannot be created or written; the message names ``what`` (the
        option) and the folder.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UsageError(f"{what} must be a folder fabricsim can write, not {str(path)!r} "
                         f"({error.strerror or error})") from None


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
        fabric, _, experiment = name.partition(".")
        if fabric not in FABRICS:
            raise UsageError(f"NAME must start with one of {', '.join(FABRICS)} or be 'all', "
                             f"not {name!r}")
        known = _experiments(fabric)
        if not experiment:
            out += [(fabric, e) for e in known]
        elif experiment in known:
            out.append((fabric, experiment))
        else:
            raise UsageError(f"experiment must be one of {', '.join(known)}, not {experiment!r}")
    return list(dict.fromkeys(out))


def parse_overrides(config_cls, items):
    """Apply ``FIELD=VALUE`` strings to a default ``config_cls`` and validate it.

    Values are parsed by the field's default's type: integers (``0x`` allowed),
    floats, booleans (``true``/``false``, ``1``/``0``, ``yes``/``no``,
    ``on``/``off``), strings, and comma-separated tuples of numbers.

    Raises
    ------
    UsageError
        On a malformed item, an unknown field, an unparsable value, or a value
        the configuration rejects.
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    defaults = config_cls()
    changes = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq:
            raise UsageError(f"--set takes FIELD=VALUE, not {item!r}")
        if name not in fields:
            raise UsageError(f"--set field must be one of {', '.join(fields)}, not {name!r}")
        default = getattr(defaults, name)
        try:
            if isinstance(default, tuple):
                parts = [p for p in text.replace(" ", "").split(",") if p]
                value = tuple(_number(p) for p in parts)
            elif isinstance(default, bool):
                if text.lower() not in _BOOLEAN:
                    raise UsageError(f"{name} must be true or false (or 1/0, yes/no, on/off), "
                                     f"not {text!r}")
                value = _BOOLEAN[text.lower()]
            elif isinstance(default, int):
                value = int(text, 0)
            elif isinstance(default, float):
                value = float(text)
            else:
                value = text
        except UsageError:
            raise
        except ValueError:
            kind = {int: "an integer (0x... allowed)", float: "a number"}.get(
                type(default), "comma-separated numbers" if isinstance(default, tuple)
                else type(default).__name__)
            raise UsageError(f"{name} must be {kind}, not {text!r}") from None
        changes[name] = value
    try:
        return dataclasses.replace(defaults, **changes)
    except ValueError as error:
        raise UsageError(str(error)) from None


_BOOLEAN = {"1": True, "true": True, "yes": True, "on": True,
            "0": False, "false": False, "no": False, "off": False}


def _number(text):
    try:
        return int(text, 0)
    except ValueError:
        return float(text)


def _cmd_list(args):
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="experiments")
    for col in ("name", "what"):
        table.add_column(col)
    for fabric in FABRICS:
        for name, exp in _experiments(fabric).items():
            table.add_row(f"{fabric}.{name}", exp.title)
    console.print(table)
    for fabric in FABRICS:
        table = Table(title=f"{fabric} configuration (--set FIELD=VALUE)")
        for col in ("field", "default", "rebuilds", "source"):
            table.add_column(col, overflow="fold")
        for f in dataclasses.fields(_fabric(fabric).config):
            default = f.default if len(repr(f.default)) < 40 else "(see source)"
            table.add_row(f.name, repr(default) if default != "(see source)" else default,
                          "yes" if f.metadata.get("structural") else "no",
                          f.metadata.get("source", ""))
        console.print(table)
    return 0


def _cmd_run(args):
    from rich.console import Console

    from sim.build import generate_verilog
    from sim.runner import run_cocotb
    from sim.toolchain import check_simulator

    console = Console(stderr=True)
    pairs = resolve_names(args.names)
    fabrics = list(dict.fromkeys(f for f, _ in pairs))
    sets = {f: [item for item in args.set] for f in fabrics}
    if len(fabrics) > 1 and args.set:
        # A --set applies to every fabric that has the field.
        for f in fabrics:
            names = {x.name for x in dataclasses.fields(_fabric(f).config)}
            sets[f] = [item for item in args.set if item.partition("=")[0] in names]
        known = set().union(*({x.name for x in dataclasses.fields(_fabric(f).config)}
                              for f in fabrics))
        for item in args.set:
            if item.partition("=")[0] not in known:
                raise UsageError(f"--set field must be a field of {', '.join(fabrics)}, "
                                 f"not {item.partition('=')[0]!r}")
    try:
        check_simulator(args.sim)
    except (ValueError, RuntimeError) as error:
        raise UsageError(str(error)) from None
    # Every plan is built before anything is generated: bad input stops here.
    jobs = []
    for fabric, name in pairs:
        fab = _fabric(fabric)
        cfg = parse_overrides(fab.config, sets[fabric])
        exp = fab.module.EXPERIMENTS[name]
        explicit = {item.partition("=")[0] for item in sets[fabric]}
        try:
            parts = (fab.module.build_parts(cfg, exp, explicit)
                     if hasattr(fab.module, "build_parts") else [(None, cfg)])
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
        parts = built
        jobs.append((fabric, name, fab, exp, parts))
    # ... and so does a folder the results or the builds cannot be written to.
    results_dir = Path(args.results)
    _writable_folder(results_dir, "--results")
    _writable_folder(Path(args.build), "--build")
    failed = False
    verilog_of = {}
    for fabric, name, fab, exp, parts in jobs:
        t1 = time.monotonic()
        got = {}
        for part, cfg, runs in parts:
            key = (fabric, repr(cfg.hardware()))
            if key not in verilog_of:
                t0 = time.monotonic()
                with console.status(f"{fabric}: generating Verilog (cached per configuration)"):
                    verilog_of[key] = generate_verilog(fab.top, cfg.hardware(), fab.top_name,
                                                       build_root=Path(args.build))
                console.log(f"{fabric} Verilog: {verilog_of[key]} ({time.monotonic() - t0:.0f} s)")
            verilog = verilog_of[key]
            label = f"{fabric}.{name}" + (f" ({part})" if part else "")
            run_dir = f"{fabric}.{name}" + (f".{part}" if part else "")
            with console.status(f"{label}: building the simulator if needed, then {len(runs)} "
                                f"runs on {args.sim}"):
                got[part] = run_cocotb(verilog, fab.top_name, fab.testbench, sim=args.sim,
                                       waves=args.waves, plan=fab.module.plan(cfg, runs),
                                       test_dir=Path(args.build) / "runs" / args.sim / run_dir)
        n_runs = sum(len(runs) for _, _, runs in parts)
        try:
            if parts[0][0] is None:
                _, cfg, runs = parts[0]
                data = fab.module.analyse(cfg, exp, runs, got[None]["runs"], args.sim)
            else:
                data = fab.module.analyse({p: c for p, c, _ in parts}, exp,
                                          {p: r for p, _, r in parts},
                                          {p: got[p]["runs"] for p, _, _ in parts}, args.sim)
        except (fab.module.ExperimentError, ValueError) as error:
            console.log(f"[red]{fabric}.{name} failed:[/red] {error}")
            failed = True
            continue
        waves = [str(g["waves"]) for g in got.values() if "waves" in g]
        if waves:
            data["waves"] = waves[0] if len(waves) == 1 else waves
        out = results_dir / fabric / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, out)
        met = sum(_met(r) for r in data["rows"])
        console.log(f"{fabric}.{name}: {n_runs} runs in {time.monotonic() - t1:.0f} s, "
                    f"{met}/{len(data['rows'])} rows met -> {out}")
    return 1 if failed else 0


def _met(row):
    from sim.report import row_met
    return row_met(row)


def _cmd_report(args):
    from sim.report import print_summary, write_report
    try:
        path = write_report(Path(args.results))
    except (ValueError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise UsageError(str(error).replace("\n", " ")) from None
    print_summary(Path(args.results))
    print(f"report: {path}")
    return 0


def main(argv=None):
    """Entry point of the ``fabricsim`` command; returns the exit status."""
    parser = _Parser(prog="fabricsim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--build", default="build", help="build folder (default: build)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list experiments and configuration fields")
    run = sub.add_parser("run", help="run experiments")
    run.add_argument("names", nargs="+", metavar="NAME")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    run.add_argument("--sim", default=os.environ.get("FABRICSIM_SIM", "verilator"))
    run.add_argument("--waves", action="store_true", help="write a waveform per experiment")
    sub.add_parser("report", help="write results/report.md from results/")
    args = parser.parse_args(argv)
    try:
        return {"list": _cmd_list, "run": _cmd_run, "report": _cmd_report}[args.command](args)
    except (UsageError, FileNotFoundError) as error:
        print(f"fabricsim: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
