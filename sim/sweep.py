"""Parameter sweeps: one experiment over a grid of configuration values.

    fabricsim sweep NAME --grid FIELD=V1,V2,... [--grid ...] [--set FIELD=VALUE]...
                    [--engine local|dask] [--scheduler ADDRESS] [--jobs N] [--metric TEXT]
                    [--tag TAG]

Every point of the grid (the product of the ``--grid`` lists) is the
experiment ``NAME`` (``fabric.experiment``) run under the ``--set`` fields
plus that point's values, exactly as ``fabricsim run NAME --set ...`` would
run it.  Points are planned first (bad input stops before anything is built),
then each distinct Verilog configuration is generated once, then the points
are simulated: on a local process pool (``--engine local``, the default), or
on a Dask distributed cluster (``--engine dask --scheduler ADDRESS``; without
``--scheduler`` a local Dask cluster of ``--jobs`` workers is started).  A
Dask cluster's workers must see the same project and build folder (a shared
filesystem) as the machine that submits the sweep.

The table lands in ``results/sweep/<fabric>.<experiment>.json`` and ``.csv``
(one line per point and result row: the point's values, the row's quantity,
model value, unit and whether it met its target, empty for a row reported for
information; a failed point's error; and for a synthesis sweep the point's
status, such as ``ok`` or ``does not fit``, beside figures that are only
Yosys's estimate when the design does not fit), with a plot of the swept
metric (the first row whose quantity starts with ``--metric``; by default the
experiment's first row) against the first grid field in ``.png``.  The table
is the same whichever engine ran it: the numbers are simulated cycles.  With
``--tag TAG`` the files are ``<fabric>.<experiment>.<TAG>.*``, so a second
sweep of the experiment keeps the first one's table.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import itertools
import json
import math
import re
import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["MAX_POINTS", "SCHEDULER_TIMEOUT_S", "TAG_PATTERN", "check_outputs",
           "connect_scheduler", "grid_points", "map_tasks", "metric_rows", "outputs_checked",
           "parse_grid", "plan_sweep", "points_shown", "progress_line", "replaced_note",
           "run_sweep", "scheduler_option", "seed_text", "started_line", "sweep_table",
           "table_stem", "where", "write_sweep"]

ENGINES = ("local", "dask")

#: Seconds a Dask scheduler named by ``--scheduler`` has to answer: to accept
#: the connection and complete Dask's handshake.
SCHEDULER_TIMEOUT_S = 15

_SCHEDULER = re.compile(r"(?:tcp://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?")


def scheduler_option(text):
    """``--scheduler`` value: a Dask scheduler's address over TCP,
    ``tcp://HOST:PORT``, ``HOST:PORT``, or ``HOST`` (Dask's port, 8786).
    Dask's other transports (``tls://``, ``ucx://``, ``inproc://``) need set-up
    that ``fabricsim sweep`` does not make, and are refused.

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not such an address, or its port is not 1 to 65535.
    """
    import argparse

    match = _SCHEDULER.fullmatch(text)
    if match is None or (match[2] is not None and not 0 < int(match[2]) < 65536):
        raise argparse.ArgumentTypeError(
            f"--scheduler must be a Dask scheduler's address, tcp://HOST:PORT (or HOST:PORT), "
            f"not {text!r}")
    return text


def connect_scheduler(address, timeout_s=SCHEDULER_TIMEOUT_S):
    """A ``dask.distributed.Client`` of the scheduler at ``address``.  The
    scheduler is first asked who it is, over a connection of its own that
    has ``timeout_s`` seconds in all: Dask's connect timeout does not cover
    its handshake, so a service that takes the connection and then waits
    (a web server) would hang a client, and one that sends something else
    first (an SSH server's banner) would fail it with a traceback at exit.

    Raises
    ------
    UsageError
        If no Dask scheduler answers at ``address`` in time, or what answers
        is not one (the message names the address and what went wrong).
    """
    import asyncio

    from dask.distributed import Client
    from distributed.comm import connect
    from distributed.core import send_recv

    from sim.cli import UsageError

    async def identity():
        comm = await connect(address, timeout=timeout_s)
        try:
            return await send_recv(comm, op="identity")
        finally:
            comm.abort()

    try:
        answer = asyncio.run(asyncio.wait_for(identity(), timeout_s))
        kind = answer.get("type") if isinstance(answer, dict) else type(answer).__name__
        why = None if kind == "Scheduler" else f"it answered as {kind!r}"
    except TimeoutError:                # asyncio's, since Python 3.11
        why = f"no answer in {timeout_s} s"
    except OSError as error:
        why = f"{type(error).__name__}: {error}"
    except Exception as error:   # noqa: BLE001 - whatever answered, in one line
        text = str(error).splitlines()[0] if str(error) else "no message"
        why = (f"what answered does not speak Dask's protocol: {type(error).__name__}: "
               f"{text if len(text) <= 80 else text[:77] + '...'}")
    if why is not None:
        raise UsageError(f"--scheduler must be the address of a running Dask scheduler, "
                         f"not {address!r} ({why})")
    return Client(address, timeout=f"{timeout_s}s")


def parse_grid(config_cls, items):
    """``[(field, [value text, ...])]`` from ``FIELD=V1,V2,...`` strings.  A
    field whose values are tuples of numbers or strings takes its points
    separated by ``;`` (``--grid payload_kib=16,32;64``, ``--grid
    "gx_planes=gx0,gx1;gx0"``), since its values may hold commas.

    Raises
    ------
    UsageError
        If a field is unknown or given twice, has no values, or gives one
        value twice.
    """
    from sim.cli import UsageError, unknown_field

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    grid = []
    for item in items:
        name, eq, text = item.partition("=")
        if name not in fields:
            raise unknown_field("--grid", config_cls, name)
        if not eq or not text.strip():
            raise UsageError(f"--grid {name} must list values as {name}=V1,V2,..., "
                             f"not {item!r}")
        if any(name == g for g, _ in grid):
            raise UsageError(f"--grid field {name!r} is given twice")
        # A tuple's values, or a string's, may hold commas themselves.
        spaced = isinstance(fields[name].default, (tuple, str))
        values = [v.strip() for v in text.split(";" if spaced else ",")]
        if any(not v for v in values):
            raise UsageError(f"--grid {name} has an empty value in {text!r}")
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            # as two spellings of one value are (found once the points are planned)
            raise UsageError(f"--grid {name} gives {twice!r} twice; give each value once")
        grid.append((name, values))
    if not grid:
        raise UsageError("--grid must be given at least once (FIELD=V1,V2,...)")
    return grid


#: Most points a sweep's grid may have: planning takes milliseconds a point
#: and each point is a simulation (or a synthesis) of seconds to minutes.
MAX_POINTS = 10_000


def grid_points(grid, items, plan, same=lambda planned: planned):
    """``[(point, point items, plan(point items))]`` for every point of ``grid``
    (``[(field, [values])]``), in product order: ``point`` is ``{field: value
    text}``, ``point items`` the ``FIELD=VALUE`` strings ``items`` plus the
    point's, and ``plan`` checks and plans them.  Two points whose plans give
    the same ``same(plan)`` (two spellings of one value, 16 and 0x10) are one
    configuration.

    Raises
    ------
    UsageError
        If the grid has more than :data:`MAX_POINTS` points, an ``items``
        field is also swept, ``plan`` raises it for a point, or two points
        are one configuration; the message names the points.
    """
    from sim.cli import UsageError

    points = math.prod(len(values) for _, values in grid)
    if points > MAX_POINTS:
        raise UsageError(f"--grid must give at most {MAX_POINTS:,} points, not {points:,} "
                         f"({' x '.join(str(len(v)) for _, v in grid)}); split the sweep")
    swept = {field for field, _ in grid}
    for item in items:
        if item.partition("=")[0] in swept:
            raise UsageError(f"--set {item.partition('=')[0]} is also a --grid field; "
                             "give it in one of them")
    out, seen = [], {}
    for combo in itertools.product(*(values for _, values in grid)):
        point = dict(zip((field for field, _ in grid), combo))
        point_items = list(items) + [f"{k}={v}" for k, v in point.items()]
        try:
            planned = plan(point_items)
        except UsageError as error:
            raise UsageError(f"sweep point {where(point)}: {error}") from None
        key = same(planned)
        if key in seen:
            raise UsageError(f"sweep points {seen[key]} and {where(point)} are the same "
                             "configuration; list each value once")
        seen[key] = where(point)
        out.append((point, point_items, planned))
    return out


def where(point):
    """A point ``{field: value text}`` as the messages name it:
    ``"lanes=8, generation=4"``."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def plan_sweep(fabric, name, grid, items=()):
    """``[(point, Job)]`` for every point of ``grid`` (``[(field, [values])]``),
    each planned by :func:`sim.cli.plan_job` under ``items`` plus the point's
    ``FIELD=VALUE`` strings; ``point`` is ``{field: value text}``.

    Raises
    ------
    UsageError
        If any point is bad input; the message names the point.
    """
    from sim.cli import plan_job

    return [(point, job) for point, _, job in
            grid_points(grid, items, lambda its: plan_job(fabric, name, its),
                        same=lambda job: tuple(cfg for _, cfg, _ in job.parts))]


def _point_dir(run_root, index):
    return Path(run_root) / f"p{index:03d}"


def run_sweep(points, sim, build_root, run_root, engine="local", jobs=1, scheduler=None,
              progress=None, check=None, started=None):
    """Simulate every planned point; returns ``[(data or None, error or None)]`` in
    the order of ``points``.  ``progress(done, total, point, error)`` is called as
    each point finishes, ``check(data)`` with the first point's data (the
    first in grid order, when it did not fail; :func:`map_tasks`), ``started()``
    once the workers are ready (:func:`map_tasks`).

    Raises
    ------
    UsageError
        If ``engine`` is unknown, the Dask scheduler cannot be reached, or
        ``check`` refuses the first point's data.
    """
    from sim.cli import (UsageError, _missing_folders, _remove_if_empty, execute_or_error,
                         generate, job_verilog)

    build_root, run_root = str(Path(build_root).resolve()), Path(run_root).resolve()
    # A folder of its own, so two sweeps of one experiment never share run files.
    made = _missing_folders(run_root)
    run_root.mkdir(parents=True, exist_ok=True)
    run_root = Path(tempfile.mkdtemp(prefix="sweep-", dir=run_root))
    builds = list(dict.fromkeys(b for _, job in points for b in job_verilog(job)))
    tasks = [(job, sim, build_root, str(_point_dir(run_root, i))) for i, (_, job) in enumerate(points)]

    def outcome(value):
        data, _, _, _, error = value
        return data, error

    def point_progress(done, total, i, error):
        progress(done, total, points[i][0], error)

    # A configuration that fails to generate fails its points, each listed.
    try:
        return map_tasks(execute_or_error, tasks, engine, jobs, scheduler,
                         progress=point_progress if progress else None, outcome=outcome,
                         prepare=[(generate, (f, hw, build_root)) for f, hw in builds],
                         check=check, started=started)
    except UsageError:
        # refused (an unreachable scheduler, a --metric no row has): no run
        # folder, unless Dask workers may still be writing to it
        if engine == "local" or not any(run_root.iterdir()):
            shutil.rmtree(run_root, ignore_errors=True)
            _remove_if_empty(made)
        raise


def _as_pair(value):
    return value, None


def map_tasks(fn, tasks, engine="local", jobs=1, scheduler=None, progress=None,
              outcome=_as_pair, prepare=(), check=None, started=None):
    """``fn(*task)`` for every task of ``tasks``, on a local process pool
    (``engine="local"``, ``jobs`` workers) or a Dask cluster (``"dask"``: the
    scheduler at ``scheduler``, or a local cluster of ``jobs`` workers).  The
    calls ``prepare`` (``[(fn, args)]``) run to the end first, their errors
    ignored.  Returns ``[(result or None, error or None)]`` in task order, each
    result passed through ``outcome`` (which returns that pair); a task that
    raised, or whose worker died (a killed process, a lost Dask worker), gives
    ``(None, message)`` and fails only itself.
    ``progress(done, total, index, error)`` is called as each task finishes,
    and ``check(result)`` with the first result to come back from a task
    that did not fail (in the order they finish; a failed point before it
    is not checked): a :class:`~sim.cli.UsageError` it raises is raised at once,
    and the tasks no worker has taken never run (the local pool stops its
    running ones too, see :func:`sim.cli.pool`; Dask cannot stop a running
    task, which ends on its worker).  ``started()`` is called once the pool
    has started or the Dask scheduler has answered, before any task is
    submitted, so that what a run announces comes after a refusal of its
    scheduler, not before.

    Raises
    ------
    UsageError
        If ``engine`` is unknown, the Dask scheduler cannot be reached
        (:func:`connect_scheduler`), or ``check`` refuses the first result.
    """
    from sim.cli import UsageError

    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    out = [None] * len(tasks)
    unchecked = check is not None

    def finished(done, i, future):
        nonlocal unchecked
        try:
            out[i] = outcome(future.result())
        except Exception as error:   # noqa: BLE001 - listed with the task
            out[i] = (None, f"{type(error).__name__}: {error}")
        if progress:
            progress(done, len(tasks), i, out[i][1])
        if unchecked and out[i][1] is None:
            unchecked = False
            check(out[i][0])

    if engine == "local":
        import concurrent.futures

        from sim.cli import pool
        # a refusal by check() leaves the pool's block, which stops the
        # workers and fails the tasks not started (sim.cli.pool)
        with pool(jobs) as workers:
            if started:
                started()
            concurrent.futures.wait([workers.submit(f, *args) for f, args in prepare])
            futures = {workers.submit(fn, *t): i for i, t in enumerate(tasks)}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                finished(done, futures[future], future)
        return out
    try:
        from dask.distributed import LocalCluster, as_completed
    except ImportError:   # pragma: no cover - a dependency of the project
        raise UsageError("--engine dask needs the dask and distributed packages") from None
    cluster = None
    try:
        if scheduler is None:
            cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            scheduler = cluster.scheduler_address
        client = connect_scheduler(scheduler)
        if started:
            started()
        with client:
            made = [client.submit(f, *args, pure=False) for f, args in prepare]
            client.gather(made, errors="skip")
            futures = [client.submit(fn, *t, pure=False) for t in tasks]
            index = {f.key: i for i, f in enumerate(futures)}
            try:
                for done, future in enumerate(as_completed(futures), 1):
                    finished(done, index[future.key], future)
            except UsageError:
                client.cancel(futures)
                raise
    finally:
        if cluster is not None:
            cluster.close()
    return out


def sweep_table(points, outcomes):
    """Rows of the sweep table: one per point and result row, in point order:
    ``{"point": {field: value}, "quantity", "model", "reference", "unit",
    "error_pct", "met"}`` (``reference`` the seed's value, ``None`` when the
    row has none; where the seed gives a range, ``reference_range`` as well,
    ``reference`` its midpoint and ``error_pct`` None); a failed point gives
    one row with ``"error"`` (what failed) instead.

    Raises
    ------
    ValueError
        If a result row lacks what :func:`sim.report.row_met` needs to judge it.
    """
    from sim.report import row_met

    table = []
    for (point, _), (data, error) in zip(points, outcomes):
        if error is not None:
            table.append({"point": point, "error": error})
            continue
        for row in data["rows"]:
            entry = {"point": point, "quantity": row["quantity"], "model": row["model"],
                     "reference": row.get("reference"), "unit": row.get("unit", ""),
                     "error_pct": row.get("error_pct"), "met": row_met(row)}
            if row.get("reference_range") is not None:
                # the seed gives a range: no error % against its midpoint
                entry.update(reference_range=row["reference_range"], error_pct=None)
            table.append(entry)
    return table


def progress_line(done, total, label, point, error):
    """The console line (rich markup) for a sweep point that finished:
    ``"[done/total] label field=value, ...: done"``, or ``failed:`` and
    ``error`` when it failed.  The point and the error are escaped, since
    tool output (make's ``*** [file:line: target]``) is not markup."""
    from rich.markup import escape

    where = ", ".join(f"{k}={v}" for k, v in point.items())
    status = f"[red]failed:[/red] {escape(str(error))}" if error else "done"
    return f"[{done}/{total}] {label} {escape(where)}: {status}"


def started_line(label, total, engine, jobs, scheduler, target=None):
    """The line a sweep logs once its workers are up: ``"dsm.one_way: 3
    points on local, 2 at a time"`` (``min(jobs, total)`` at a time), with
    ``on TARGET, ENGINE`` where the sweep names a target (a synthesis sweep's
    device), and on a Dask cluster the scheduler's address in place of the
    count (``"... on dask (tcp://host:8786)"``)."""
    where = f"{target}, {engine}" if target else engine
    return (f"{label}: {total} point{'s' * (total != 1)} on {where}"
            + (f" ({scheduler})" if scheduler else f", {min(jobs, total)} at a time"))


@contextlib.contextmanager
def points_shown(console, label, total):
    """Show how many of a sweep's ``total`` points are done, and for how long
    it has run, while the ``with`` block runs (:func:`sim.cli.progress_shown`:
    a point of a new configuration is silent for minutes while it is
    generated and built), on the rich ``console``, each line starting with
    ``label`` (``dsm.one_way``, ``synth.gx_plane``).  Yields
    ``progress(done, total, point, error)``, which logs :func:`progress_line`
    for each point that ends."""
    from sim.cli import progress_shown, waited_text

    finished = [0]
    started = time.monotonic()

    def progress(done, total, point, error):
        finished[0] = done
        console.log(progress_line(done, total, label, point, error))

    def waiting():
        return f"{label}: {finished[0]}/{total} points done after {waited_text(started)}"

    with progress_shown(console, waiting):
        yield progress


def metric_rows(table, metric):
    """``(metric, rows)``: the rows of ``table`` plotted for ``metric`` (a
    quantity prefix; ``None`` picks the first row's quantity), the first match
    at each point, in point order."""
    rows = [r for r in table if "error" not in r]
    if not rows:
        return None, []
    if metric is None:
        metric = rows[0]["quantity"]
    chosen, seen = [], set()
    for r in rows:
        key = tuple(r["point"].items())
        if r["quantity"].startswith(metric) and key not in seen:
            seen.add(key)
            chosen.append(r)
    return metric, chosen


#: What ``--tag`` may hold: it becomes part of file names, and a leading
#: '-' would read as an option when typed back.
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def table_stem(name, tag):
    """The file stem of the sweep of ``name`` (``fabric.experiment`` or
    ``synth.BLOCK``): ``name``, or ``name.tag`` with a ``--tag``.

    Raises
    ------
    sim.cli.UsageError
        If ``tag`` is not 1 to 64 letters, digits, ``_`` or ``-``, the
        first a letter or digit (:data:`TAG_PATTERN`).
    """
    from sim.cli import UsageError

    if tag is None:
        return name
    if not TAG_PATTERN.fullmatch(tag):
        raise UsageError(f"--tag must be 1 to 64 letters, digits, '_' or '-', starting with a "
                         f"letter or digit (it names the sweep's files), not {tag!r}")
    return f"{name}.{tag}"


def replaced_note(results_dir, name, tag=None):
    """The line a sweep of ``name`` (``fabric.experiment`` or ``synth.BLOCK``)
    under ``tag`` logs as it starts when ``<results_dir>/sweep`` already holds
    its table, which it replaces when it ends; None if it holds none.

    Raises
    ------
    sim.cli.UsageError
        As :func:`table_stem`, for a bad ``tag``.
    """
    stem = table_stem(name, tag)
    path = _output_paths(results_dir, stem)[2]
    if not path.is_file():
        return None
    other = "another --tag" if tag is not None else f"--tag TAG writes {name}.TAG.json"
    return (f"{path} holds an earlier sweep's table: this sweep replaces it when it ends "
            f"({other} to keep both)")


def _output_paths(results_dir, stem):
    """``(csv, png, json)`` paths of a sweep's table under ``<results_dir>/sweep``."""
    folder = Path(results_dir) / "sweep"
    return tuple(folder / f"{stem}.{ext}" for ext in ("csv", "png", "json"))


def check_outputs(results_dir, stem):
    """Check, before a sweep runs, that its table can be written: folder
    ``<results_dir>/sweep`` (made if missing) takes files and none of
    ``<stem>.json``, ``.csv`` or ``.png`` in it is a folder.  Returns the
    folders it made (``sweep`` and any missing parents), innermost first.

    Raises
    ------
    sim.cli.UsageError
        Naming ``--results`` and the path at fault.
    """
    from sim.cli import UsageError, _missing_folders, _remove_if_empty, _writable_folder

    folder = Path(results_dir) / "sweep"
    made = _missing_folders(folder)
    try:
        # --results itself first, so a file given there is named, not its "sweep"
        _writable_folder(Path(results_dir), "--results")
        _writable_folder(folder, "--results")
    except UsageError:
        _remove_if_empty(made)
        raise
    for out in _output_paths(results_dir, stem):
        if out.is_dir():
            raise UsageError(f"--results must leave {str(out)!r} free for the sweep's "
                             f"table, but it is a folder")
    return made


@contextlib.contextmanager
def outputs_checked(results_dir, stem, build_dir):
    """Context in which a sweep's points run: :func:`check_outputs` on entry,
    then the build folder ``build_dir``; if either is refused, or anything
    inside raises (a scheduler that cannot be reached, an interrupt), the
    folders it made are removed again while still empty.

    Raises
    ------
    sim.cli.UsageError
        As :func:`check_outputs`, or naming ``--build`` if ``build_dir``
        cannot be written.
    """
    from sim.cli import _remove_if_empty, _writable_folders

    made = check_outputs(results_dir, stem)
    try:
        made += _writable_folders((Path(build_dir), "--build"))
        yield
    except BaseException:
        _remove_if_empty(made)
        raise


def seed_text(reference, reference_range=None):
    """A row's seed value as a sweep's CSV gives it, at full precision: the
    value, or its range ``low-high`` (``low to high`` when ``low`` is
    negative: "-1.0 to 1.0", not "-1.0-1.0").  The console table shows it
    as the report does (:func:`sim.report.format_seed`)."""
    if reference_range is None:
        return f"{reference}"
    low, high = reference_range
    return f"{low} to {high}" if low < 0 else f"{low}-{high}"


def write_sweep(results_dir, fabric, name, grid, items, sim, engine, table, metric=None,
                tag=None):
    """Write ``<results_dir>/sweep/<fabric>.<name>.json``, ``.csv`` and ``.png``
    (``<fabric>.<name>.<tag>.*`` with a ``tag``); returns the JSON path.  All
    three are made in memory first, then each is written to a temporary name
    and renamed when complete, so a table that cannot be drawn or encoded
    leaves an earlier sweep's files as they were.  The plot
    is of the first row whose quantity starts with ``metric`` at each point
    (the first row by default), with the failed points named under it; it is
    left out when no row matches.

    Raises
    ------
    sim.cli.UsageError
        As :func:`table_stem`, for a bad ``tag``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.build import write_files_atomically

    metric, chosen = metric_rows(table, metric)
    folder = Path(results_dir) / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    stem = table_stem(f"{fabric}.{name}", tag)
    csv_path, png_path, path = _output_paths(results_dir, stem)
    fields = [f for f, _ in grid]
    text = io.StringIO()
    writer = csv.writer(text)
    # "failure": what stopped a point (the JSON's "error"), not the error %
    writer.writerow(fields + ["quantity", "model", "seed", "unit", "error_pct", "met",
                              "failure", "status"])
    for r in table:
        cells = ["" if r.get(k) is None else r[k]
                 for k in ("quantity", "model", "reference", "unit", "error_pct", "met",
                           "error", "status")]
        if r.get("reference") is not None:
            cells[2] = seed_text(r["reference"], r.get("reference_range"))
        writer.writerow([r["point"][f] for f in fields] + cells)
    png = None
    if chosen:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        x_field, others = fields[0], fields[1:]
        lines = {}
        for r in chosen:
            key = ", ".join(f"{f}={r['point'][f]}" for f in others) or metric
            lines.setdefault(key, []).append((r["point"][x_field], r["model"]))
        for key, pts in lines.items():
            if all(_is_number(x) for x, _ in pts):
                pts = sorted((float(x), y) for x, y in pts)
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=key)
        # the seed measured one configuration, the chip's; drawn when every
        # point's row gives the same one (a band where the seed gives a range)
        seeds = {(r.get("reference"), tuple(r.get("reference_range") or ())) for r in chosen}
        seed, band = next(iter(seeds)) if len(seeds) == 1 else (None, ())
        if band:
            ax.axhspan(*band, color="0.3", alpha=0.15,
                       label="seed's range (measured on the hardware as built)")
        elif seed is not None:
            ax.axhline(seed, color="0.3", linestyle="--", linewidth=1,
                       label="seed (measured on the hardware as built)")
        ax.set_xlabel(x_field)
        ax.set_ylabel(f"{chosen[0]['unit']}".strip() or "model")
        title = chosen[0]["quantity"]
        ax.set_title(f"{stem}\n" + (title if len(title) < 70 else title[:67] + "..."),
                     fontsize=9)
        failed = [where(r["point"]) for r in table if "error" in r]
        if failed:
            # a failed point has no value to draw: named, so its gap is not
            # read as a point left out of the grid
            shown = "; ".join(failed[:4]) + (f"; and {len(failed) - 4} more"
                                             if len(failed) > 4 else "")
            # under the x label, where no point or legend can hide it
            ax.annotate(f"failed, not drawn (see the table): {shown}", (0, 0),
                        xycoords="axes fraction", xytext=(0, -30),
                        textcoords="offset points", fontsize=7, color="C3", va="top")
        if len(lines) > 1 or others or seed is not None or band:
            ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        png = io.BytesIO()
        try:
            fig.savefig(png, format="png", dpi=110)
        finally:
            plt.close(fig)
    record = json.dumps({
        "fabric": fabric, "experiment": name, "simulator": sim, "engine": engine,
        "grid": {f: v for f, v in grid}, "fixed": list(items), "metric": metric,
        **({"tag": tag} if tag is not None else {}),
        "plot": png_path.name if chosen else None, "rows": table}, indent=1) + "\n"
    files = {csv_path: text.getvalue(), path: record}
    if png is not None:
        files[png_path] = png.getvalue()
    # all or none: a full disk leaves an earlier sweep's files as they were
    write_files_atomically(files)
    if png is None:
        # No row to plot: a plot left from an earlier sweep would not match the table.
        png_path.unlink(missing_ok=True)
    return path


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True

