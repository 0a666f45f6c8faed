"""Seeded constrained-random traffic for the three fabrics.

Each generator draws a few runs from ``random.Random(seed)``: random traffic
kinds, payload sizes, sources, destinations and start delays, kept inside
what the fabric's registers allow (a draw the run builder refuses is dropped
and the next one drawn).  The runs go through the same testbench and the
same checks as the experiments, so every byte (DSM), TLP payload (PCIe) or
register (ET-SoC-1) is checked at its destination and every run must end
``done`` with nothing left over.  The same seed always draws the same runs.

* ``dsm``: a thread-block cluster of 2 to 16 ranks on random SM slots,
  loads, stores and TMA puts of 16 B to 24 KiB between random ranks, each
  SM issuing and receiving at most two payloads, random start delays, and
  either GX plane switched off in some runs (seed 000).
* ``pcie``: copies between random GPUs (each sending and receiving at most
  once), pushed, pulled or staged through host memory, random TLP sizes
  from the datapath width to the mode's limit (seed 001).
* ``mesh``: ping-pongs, one-way streams, credit round trips, coupled
  rings and hardware allreduce trees (random tree levels and root, up to
  ``registers`` registers, add, max or min) on distinct random minions, 1 to
  127 registers per message, random combine operation (seed 002).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["FABRICS", "Trial", "trial", "run_seeds", "main"]

FABRICS = ("dsm", "pcie", "mesh")


@dataclass
class Trial:
    """The random runs of one ``(fabric, seed)`` and how to build and check them.

    Attributes
    ----------
    fabric : str
        One of :data:`FABRICS`.
    seed : int
        The seed the runs were drawn from.
    cfg : object
        The fabric's configuration (the build and the plan use it).
    runs : list of dict
        Testbench plan entries, each with a ``label`` naming the seed.
    toplevel, testbench : str
        Verilog top module and cocotb test module.
    component : type
        The Amaranth top component (its ``cfg.hardware()`` is built).
    check : callable
        ``check(run, result)`` raises the fabric's ``ExperimentError`` if a
        run lost, duplicated or corrupted data or did not finish.
    plan : callable
        ``plan(runs)``: the testbench plan for these runs (or others of the
        same fabric and configuration).
    transfers : callable
        ``transfers(run, result)``: the transfers of a run that passed its
        check (by default ``run["transfers"]``, what the run was drawn to
        send, which it then did).
    """

    fabric: str
    seed: int
    cfg: Any
    runs: list = field(default_factory=list)
    toplevel: str = ""
    testbench: str = ""
    component: type = None
    check: Callable = None
    plan: Callable = None
    transfers: Callable = lambda run, result: run["transfers"]

    def verilog(self, build_root: Path) -> Path:
        """Generate (or reuse from the build cache) the Verilog of ``cfg``."""
        from sim.build import generate_verilog
        return generate_verilog(self.component, self.cfg.hardware(), self.toplevel,
                                build_root=build_root)


def trial(fabric: str, seed: int, *, small: bool = False, runs: int = 3,
          dirty: set | None = None) -> Trial:
    """Draw ``runs`` random runs of ``fabric`` from ``seed``.

    Parameters
    ----------
    fabric : str
        ``dsm``, ``pcie`` or ``mesh``.
    seed : int
        Any integer; the same seed gives the same runs.
    small : bool
        Smaller payloads (and, for the mesh, a two-shire build of four
        minions) so that a slow simulator such as Icarus finishes quickly.
    runs : int
        Runs drawn, at least 1.
    dirty : set or None
        Mesh only: the minions the run simulated just before these left
        programmed (they are cleared first); updated in place to this
        trial's last run, so trials can share one simulation.

    Raises
    ------
    ValueError
        If ``fabric`` is not one of :data:`FABRICS` or ``runs`` is below 1.
    """
    if fabric not in FABRICS:
        raise ValueError(f"fabric must be one of {', '.join(FABRICS)}, not {fabric!r}")
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive integer, not {runs!r}")
    rng = random.Random(f"{fabric}:{seed}")
    if fabric == "mesh":
        return _mesh(rng, seed, small, runs, set() if dirty is None else dirty)
    return {"dsm": _dsm, "pcie": _pcie}[fabric](rng, seed, small, runs)


def _draw(build, draws):
    """Add draws one by one, keeping each that ``build`` accepts."""
    kept = []
    for candidate in draws:
        try:
            build(kept + [candidate])
        except ValueError:
            continue
        kept.append(candidate)
    return kept


def _replace_valid(rng, cfg, fields):
    """``cfg`` with each field of ``fields`` (``(name, draw)``) set to a drawn
    value where the configuration accepts it (else left as it was)."""
    for name, draw in fields:
        try:
            cfg = dataclasses.replace(cfg, **{name: draw()})
        except ValueError:
            pass
    return cfg


def _dsm(rng, seed, small, n_runs):
    from hdl.hopper.config import DsmConfig
    from hdl.hopper.gpc import Gpc
    from sim.experiments import dsm

    base = DsmConfig()
    most = 4096 if small else 24 * 1024
    runs = []
    for k in range(n_runs):
        size = rng.randint(2, 16)
        cfg = dataclasses.replace(base, cluster_size=size,
                                  placement=tuple(rng.sample(range(base.n_slots), size)))
        planes = rng.choice((3, 3, 3, 1, 2))

        def draw():
            issuer, target = rng.sample(range(size), 2)
            nbytes = 16 * rng.randint(1, most // 16) if rng.random() < 0.5 \
                else 16 * rng.randint(1, 16)
            delay = rng.choice((0, 0, rng.randint(1, 400)))
            return dsm.Stream(rng.choice(sorted(dsm.KINDS)), issuer, target, nbytes, delay)

        label = f"seed {seed} run {k}"
        streams = _draw(lambda s: dsm.build_run(cfg, s, label, planes),
                        [draw() for _ in range(rng.randint(1, 2 * size))])
        run = dsm.build_run(cfg, streams, label, planes)
        run["transfers"], run["checked_bytes"] = len(streams), sum(s.nbytes for s in streams)
        run["traffic"] = (f"ranks on slots {list(cfg.ranks)}, plane_enable {planes}: "
                          + ", ".join(f"{s.kind} {s.issuer}->{s.target} {s.nbytes} B"
                                      f"{f' after {s.delay_cycles}' if s.delay_cycles else ''}"
                                      for s in streams))
        runs.append(run)
    return Trial("dsm", seed, base, runs, "dsm_gpc", "testbenches.dsm", Gpc,
                 lambda run, got: dsm.check_run(base, got),
                 lambda rs: dsm.plan(base, rs))


def _pcie(rng, seed, small, n_runs):
    from hdl.pcie.config import PcieConfig
    from hdl.pcie.gpu import GpuMode
    from hdl.pcie.system import PcieSystem
    from sim.experiments import pcie

    base = PcieConfig()
    runs = []
    for k in range(n_runs):
        # run-time fields: a link trained narrower or slower, Ack and UpdateFC
        # cadence, read request and staging chunk sizes, host event delay
        cfg = _replace_valid(rng, base, (
            ("retrained_gpu", lambda: rng.choice((-1, -1, rng.randrange(base.gpus)))),
            ("retrained_lanes", lambda: rng.choice((1, 2, 4, 8, 16))),
            ("retrained_generation", lambda: rng.choice((3, 4))),
            ("ack_every_tlps", lambda: rng.randint(1, 8)),
            ("update_fc_every_credits", lambda: rng.randint(1, 16)),
            ("max_read_request_bytes", lambda: rng.choice((128, 256, 512, 1024, 4096))),
            ("staging_chunk_bytes", lambda: rng.choice((4096, 8192, 16384))),
            ("host_event_cycles", lambda: rng.randint(0, 2000)),
        ))
        # the modes in turn, so that a seed's three runs take every one (the
        # CI's seeds drew no pull run when the mode was drawn)
        mode = list(GpuMode)[(seed + k) % len(GpuMode)]
        most = cfg.max_payload_bytes if mode == GpuMode.PUSH else 4096
        sizes = [b for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
                 if cfg.datapath_bytes <= b <= most]
        tlp = rng.choice(sizes)
        unit = max(tlp, cfg.staging_chunk_bytes) if mode == GpuMode.STAGED else tlp
        nbytes = unit * rng.randint(1, max(1, (8192 if small else 65536) // unit))
        senders = rng.sample(range(cfg.gpus), rng.randint(1, cfg.gpus))
        receivers = rng.sample(range(cfg.gpus), len(senders))
        pairs = [(s, d) for s, d in zip(senders, receivers) if s != d] or [(0, cfg.gpus - 1)]
        label = f"seed {seed} run {k}"
        run = pcie.copy_run(cfg, label, pairs, nbytes, tlp, mode=mode)
        run["checked_bytes"] = len(pairs) * nbytes
        changed = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                   if getattr(cfg, f.name) != getattr(base, f.name)}
        run["traffic"] = (f"{mode.name.lower()} {nbytes} B in {tlp} B TLPs, pairs {pairs}, "
                          f"set {changed}")
        runs.append(run)
    # TLPs the GPUs sent (writes, read requests, completions), as their links count them
    return Trial("pcie", seed, base, runs, "pcie_system", "testbenches.pcie", PcieSystem,
                 lambda run, got: pcie.check_run(base, run, got),
                 lambda rs: pcie.plan(base, rs),
                 lambda run, got: sum(got["counters"][f"gpu{g}.up.tlps"]
                                      for g in range(base.gpus)))


def _mesh(rng, seed, small, n_runs, dirty):
    from hdl.etsoc.config import COMBINE_OPS, MeshConfig
    from hdl.etsoc.engine import Couple
    from hdl.etsoc.mesh import EtSocMesh
    from sim.experiments import mesh

    if small:
        cfg = MeshConfig(compute_shires=2, mesh_cols=2, mesh_rows=1, placement=((0, 0), (1, 0)),
                         neighbourhoods=1, minions_per_neighbourhood=2, watchdog_cycles=3000)
    else:
        cfg = mesh.build_config(MeshConfig(), mesh.EXPERIMENTS["three_speeds"])
    minions = [cfg.minion_id(s, m) for s in range(cfg.compute_shires)
               for m in range(cfg.minions_per_shire)]
    most = 16 if small else 127
    runs = []
    for k in range(n_runs):
        free = rng.sample(minions, len(minions))

        def draw():
            kind = rng.choice(("ping", "oneway", "credit", "ring", "tree"))
            nregs, op = rng.randint(1, most), rng.randrange(len(COMBINE_OPS))
            exchanges = rng.randint(2, 4)
            if kind == "tree":
                return draw_tree()
            if kind == "ring":
                ring = [free.pop() for _ in range(min(len(free), rng.randint(2, 4)))]
                if len(ring) < 2:
                    return None
                return mesh.Flows(tuple(zip(ring, ring[1:] + ring[:1])), nregs, exchanges, op,
                                  rng.choice((Couple.PING, Couple.NONE)))
            if len(free) < 2:
                return None
            a, b = free.pop(), free.pop()
            cls = {"ping": mesh.PingPong, "oneway": mesh.OneWay,
                   "credit": mesh.CreditPingPong}[kind]
            return cls(a, b, nregs, op, exchanges)

        def draw_tree():
            levels = [b for b, _ in mesh.tree_levels(cfg)]
            mask = sum(1 << b for b in rng.sample(levels, rng.randint(1, len(levels))))
            roots = [g for g in free if g & mask == 0
                     and set(mesh.Tree(mask, base=g).members) <= set(free)]
            if not roots:
                return None
            tree = mesh.Tree(mask, base=rng.choice(roots),
                             nregs=rng.randint(1, min(most, cfg.registers)),
                             op=rng.randrange(1, len(COMBINE_OPS)))
            for g in tree.members:
                free.remove(g)
            return tree

        label = f"seed {seed} run {k}"
        draws = [d for d in (draw() for _ in range(rng.randint(1, 4))) if d is not None]
        programs = _draw(lambda p: mesh.build_run(cfg, label, p, set(dirty), {}), draws)
        run = mesh.build_run(cfg, label, programs, dirty, {})
        messages = [_messages(p) for p in programs]
        run["transfers"] = sum(messages)
        run["checked_bytes"] = sum(n * p.nregs * cfg.register_bytes
                                   for n, p in zip(messages, programs)
                                   if not isinstance(p, mesh.CreditPingPong))
        run["traffic"] = "; ".join(repr(p) for p in programs)
        runs.append(run)
    return Trial("mesh", seed, cfg, runs, "etsoc_mesh", "testbenches.mesh", EtSocMesh,
                 lambda run, got: mesh.check_run(cfg, run, got),
                 lambda rs: mesh.plan(cfg, rs))


def _messages(program):
    """Messages (or credits) one mesh program sends."""
    from sim.experiments import mesh
    if isinstance(program, mesh.Flows):
        return len(program.pairs) * program.exchanges
    if isinstance(program, mesh.OneWay):
        return program.exchanges
    if isinstance(program, mesh.Tree):
        return 2 * (len(program.members) - 1)   # each edge up, then down
    return 2 * program.exchanges


def run_seeds(fabric, seeds, *, sim="verilator", small=None, build_root=Path("build"),
              test_dir=None, cache=False, fresh=False):
    """Simulate the runs of every seed in ``seeds`` for ``fabric`` (one
    simulation) and check each.

    Parameters
    ----------
    fabric : str
        One of :data:`FABRICS`.
    seeds : sequence of int
        Seeds, at least one.
    sim : str
        ``verilator`` or ``icarus``.
    small : bool or None
        See :func:`trial`; default: small under Icarus only.
    build_root, test_dir : Path
        Build cache and the simulation's working folder (default
        ``build_root/random/<fabric>-<sim>``).
    cache, fresh : bool
        With ``cache``, reuse the simulation result of an earlier run of the
        same Verilog, testbench, plan and simulator from
        ``build_root/simulations`` (unless ``fresh``), or store this one's
        there (:func:`sim.runner.run_cocotb_cached`); the checks always run.

    Returns
    -------
    dict
        ``{"fabric", "simulator", "seeds", "runs", "transfers",
        "checked_bytes", "failures"}``; each failure is one line naming the
        seed, the run's traffic and the command that re-runs that seed (the
        same traffic, in a simulation of its own); runs the simulation did
        not reach, because an earlier run ended stuck or broke the credit
        protocol (``overflow``), are failures too.  ``transfers`` and
        ``checked_bytes`` count the runs that passed their check: DSM
        payloads, PCIe TLPs the GPUs sent (writes, read requests and
        completions, from their links' counters) and ET-SoC-1 messages and
        credits, and the bytes checked at their destinations.

    Raises
    ------
    ValueError
        If ``fabric`` is unknown or ``seeds`` is empty.
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    small = sim == "icarus" if small is None else small
    from sim.runner import run_cocotb_cached
    dirty = set()
    trials = [trial(fabric, seed, small=small, dirty=dirty) for seed in seeds]
    first = trials[0]
    runs = [run for t in trials for run in t.runs]
    test_dir = Path(test_dir or Path(build_root) / "random" / f"{fabric}-{sim}")
    got, _ = run_cocotb_cached(first.verilog(Path(build_root)), first.toplevel, first.testbench,
                               sim=sim, plan=first.plan(runs), test_dir=test_dir,
                               reuse=not fresh,
                               cache_dir=Path(build_root) / "simulations" if cache else None)
    results = iter(got["runs"])
    failures, last, transfers, checked_bytes = [], None, 0, 0
    for t in trials:
        for run in t.runs:
            rerun = (f" | traffic: {run['traffic']} | re-run: python -m sim.random_traffic "
                     f"{fabric} --seed {t.seed} --sim {sim}{' --small' if small else ''}")
            result = next(results, None)
            if result is None:
                stopped = f"stopped after {last}" if last else "returned no runs"
                failures.append(f"{run['label']}: not simulated, the simulation {stopped}"
                                + rerun)
                continue
            last = run["label"]
            try:
                t.check(run, result)
            except Exception as error:  # noqa: BLE001 - each fabric's ExperimentError
                failures.append(f"{error}" + rerun)
            else:
                checked_bytes += run["checked_bytes"]
                transfers += t.transfers(run, result)
    return {"fabric": fabric, "simulator": sim, "seeds": seeds, "runs": len(runs),
            "transfers": transfers, "checked_bytes": checked_bytes, "failures": failures}


def _write_results(path, rows):
    """Merge ``rows`` into ``path`` (keyed by fabric and simulator), atomically."""
    import json

    from sim.cli import write_json_atomically
    kept = {}
    try:
        kept = {(r["fabric"], r["simulator"]): r for r in json.loads(path.read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for r in rows:
        kept[(r["fabric"], r["simulator"])] = {**r, "passed": not r["failures"]}
    write_json_atomically(path, {"rows": [kept[k] for k in sorted(kept)]})


def main(argv=None):
    """``python -m sim.random_traffic [FABRIC...] [--seeds N | --seed S...]``:
    run random traffic, print a table, write ``results/random.json``.

    Returns
    -------
    int
        0 if every run arrived intact, 1 if one did not, 2 on bad arguments.
    """
    from sim.cli import (OneLineParser, _remove_if_empty, _resolve_simulator, _writable_folders,
                         folder_option, jobs_option)

    parser = OneLineParser(prog="python -m sim.random_traffic",
                           description=__doc__.split("\n\n")[0])
    parser.add_argument("fabrics", nargs="*", metavar="FABRIC",
                        help=f"fabrics (default: all of {', '.join(FABRICS)})")
    parser.add_argument("--seeds", type=int, default=2, metavar="N",
                        help="run seeds 1 to N (default 2)")
    parser.add_argument("--seed", type=int, action="append", default=[], metavar="S",
                        help="run seed S (repeatable, each seed once; overrides --seeds)")
    parser.add_argument("--sim", default=None,
                        help="verilator (the default, or $FABRICSIM_SIM, which make's SIM "
                             "sets) or icarus")
    parser.add_argument("--small", action="store_true", default=None,
                        help="small payloads and mesh (the default under icarus)")
    parser.add_argument("--results", type=folder_option, default="results",
                        help="results folder (default: results)")
    parser.add_argument("--build", type=folder_option, default="build",
                        help="build folder (default: build)")
    parser.add_argument("-j", "--jobs", type=jobs_option, default=os.cpu_count() or 1,
                        metavar="N",
                        help="fabrics simulated at once (default: one per CPU)")
    parser.add_argument("--fresh", action="store_true",
                        help="simulate even where the build folder holds the result of the "
                             "same Verilog, testbench, plan and simulator")
    args = parser.parse_args(argv)
    bad = [f for f in args.fabrics if f not in FABRICS]
    if bad:
        return parser.refuse(f"FABRIC must be one of {', '.join(FABRICS)}, not {bad[0]!r}")
    if not args.seed and args.seeds < 1:
        return parser.refuse(f"--seeds must be at least 1, not {args.seeds}")
    try:
        _resolve_simulator(args)
        # Checked now, not after the simulations: a results path that is a
        # file would otherwise lose their work.
        made = _writable_folders((Path(args.build), "--build"),
                                 (Path(args.results), "--results"))
    except ValueError as error:     # UsageError: the simulator or a folder
        return parser.refuse(error)
    try:
        return _run_and_write(args)
    finally:
        # a run that wrote nothing (an interrupt) leaves no empty folder
        _remove_if_empty(made)


def _run_and_write(args):
    from rich.markup import escape
    from rich.table import Table

    from sim.cli import progress_shown, waited_text, wide_console

    # a seed given twice draws the same runs: it runs once, as a fabric named twice does
    seeds = list(dict.fromkeys(args.seed)) or list(range(1, args.seeds + 1))
    console = wide_console()
    fabrics = list(dict.fromkeys(args.fabrics or FABRICS))
    options = dict(sim=args.sim, small=args.small, build_root=Path(args.build), cache=True,
                   fresh=args.fresh)
    jobs = min(args.jobs, len(fabrics))
    started = time.monotonic()

    def waiting():
        return (f"random traffic from {len(seeds)} seed{'s' * (len(seeds) != 1)} under "
                f"{args.sim} on {', '.join(fabrics)}, {jobs} at a time, for "
                f"{waited_text(started)}")

    # on stderr, apart from the table
    with progress_shown(wide_console(stderr=True, log_path=False), waiting):
        if jobs == 1:
            rows = [run_seeds(fabric, seeds, **options) for fabric in fabrics]
        else:
            from sim.cli import pool
            # One simulation per fabric, in parallel; rows keep the fabrics' order.
            with pool(jobs) as workers:
                futures = [workers.submit(run_seeds, fabric, seeds, **options)
                           for fabric in fabrics]
                rows = [future.result() for future in futures]
    if len(seeds) == 1:
        named = f"seed {seeds[0]}"
    elif seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        named = f"seeds {seeds[0]}..{seeds[-1]}"
    else:
        named = f"seeds {', '.join(map(str, seeds))}"
    table = Table(title=f"random traffic, {named}")
    for column in ("fabric", "simulator", "runs", "transfers", "bytes checked", "result"):
        table.add_column(column, justify="left" if column in ("fabric", "simulator")
                         else "right")
    for r in rows:
        table.add_row(r["fabric"], r["simulator"], str(r["runs"]), str(r["transfers"]),
                      str(r["checked_bytes"]),
                      "[green]pass[/green]" if not r["failures"] else
                      f"[red]{len(r['failures'])} failed[/red]")
    console.print(table)
    for r in rows:
        for failure in r["failures"]:
            console.print(f"[red]{escape(failure)}[/red]", highlight=False)
    _write_results(Path(args.results) / "random.json", rows)
    return 0 if all(not r["failures"] for r in rows) else 1


if __name__ == "__main__":
    import sys

    from sim.cli import exit_status
    sys.exit(exit_status(main, "python -m sim.random_traffic"))
