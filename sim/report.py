"""Markdown report and console summary of every experiment's results.

Each experiment writes ``results/<fabric>/<experiment>.json`` holding its
swept points, the affine size-slope fits (see `sim.fit` and the seed's "What
Exactly Do I Mean by Bandwidth?" section) and a table of rows comparing model
quantities with the published numbers they reproduce. This module reads all of
them, checks their shape, and writes ``results/report.md`` with one section per
experiment and a plot in the style of the seed's worked example: elapsed cycles
against payload with the fit overlaid, and the residual cycles below (or,
for a series indexed by mesh hops, round trip against hops), plus a heat map
of the mesh placement and a chart where an experiment provides them.

A row passes when it has no tolerance or bound (a model-only quantity), or
when ``|error_pct| <= tolerance_pct`` and its bounds hold; a row whose model
is null (not measured by the build) does not pass.
"""

from __future__ import annotations

import io
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.build import write_files_atomically
from sim.fit import AffineFit, row_error_pct
from sim.sweep import TAG_PATTERN

__all__ = [
    "ResultRow",
    "ResultSeries",
    "ExperimentResult",
    "load_results",
    "write_report",
    "print_summary",
    "met_sentence",
    "met_text",
    "rows_met_text",
    "format_number",
    "format_value",
    "format_range",
    "format_seed",
]

REPORT_NAME = "report.md"

_MET = {True: "✓", False: "✗", None: "—"}
_KIB = 1024


@dataclass(frozen=True)
class ResultRow:
    """One compared quantity of an experiment.

    Members
    -------
    quantity : str
        What is compared, e.g. ``"load B/cycle"``.
    model : float or None
        Value from the simulation, in ``unit``; None when the build the
        experiment ran cannot measure it (the row then counts as not met).
    reference : float or None
        Published value in ``unit``; None for model-only quantities.
    unit : str
        Unit of ``model`` and ``reference``.
    source : str or None
        Seed file and section the reference comes from.
    error_pct : float or None
        Signed error of ``model`` against ``reference`` in percent, computed
        when the row is loaded (a result file's own ``error_pct`` is not
        used); None when either is missing or ``reference`` is zero or only
        the row's bound (:func:`sim.fit.row_error_pct`).
    tolerance_pct : float or None
        Largest allowed ``|error_pct|`` in percent; None means not checked.
    target : str or None
        Free-text description of the target, e.g. ``"within 3%"``.
    minimum, maximum : float or None
        Bounds ``model`` must respect (e.g. a fit RMSE below 2 %); None: unbounded.
    reference_range : tuple of two floats or None
        ``(low, high)`` when the seed gives a range rather than one value
        (``reference`` is then its midpoint): the report shows the range and
        no error %.
    """

    quantity: str
    model: float | None
    reference: float | None
    unit: str
    source: str | None
    error_pct: float | None
    tolerance_pct: float | None
    target: str | None
    minimum: float | None = None
    maximum: float | None = None
    reference_range: tuple[float, float] | None = None

    @property
    def met(self) -> bool | None:
        """Whether the row meets its tolerance.

        Returns
        -------
        bool or None
            None when the row has neither a tolerance nor a bound, otherwise
            ``abs(error_pct) <= tolerance_pct`` and the bounds hold.
        """
        if self.model is None:
            return False
        checks = []
        if self.tolerance_pct is not None:
            # Loading guarantees error_pct is set whenever a tolerance is.
            assert self.error_pct is not None
            checks.append(abs(self.error_pct) <= self.tolerance_pct)
        if self.minimum is not None:
            checks.append(self.model >= self.minimum)
        if self.maximum is not None:
            checks.append(self.model <= self.maximum)
        return all(checks) if checks else None

    @property
    def passes(self) -> bool:
        """True unless the row misses its tolerance or bounds, or was not measured."""
        return self.met is not False


@dataclass(frozen=True)
class ResultSeries:
    """One swept series (e.g. ``"load"``) of an experiment.

    Members
    -------
    name : str
        Series label.
    payload_bytes : tuple of int
        Payload per active agent of each point, in bytes.
    cycles : tuple of float
        Elapsed (median) cycles of each point.
    fit : AffineFit or None
        Stored fit, with residuals recomputed against the points in cycles;
        None when the experiment did not fit this series.
    hops : tuple of int
        Mesh hops of each point, for a series indexed by hops (then
        ``payload_bytes`` is empty).
    hop_fit : tuple of two floats or None
        ``(alpha, beta)`` of a hop-indexed series, in cycles and cycles per hop.
    baseline_for : str or None
        Name of the series of the same experiment this one is the baseline
        of (key ``baseline_for``; e.g. B's one-way load for its both-ways
        load): the fit plot of payload-indexed series draws it dashed, in
        that series' colour (the plot of hop-indexed series draws it as any
        other).
    seed_lines : tuple of (str, float, float)
        The seed's own fits of the same quantity (key ``seed_lines``: a list
        of ``{"label", "alpha_cycles", "beta_cycles_per_byte"}``, or
        ``"beta_cycles_per_hop"`` for a hop-indexed series), each
        ``(label, alpha in cycles, beta in cycles per byte or per hop)``:
        the plot draws each in the series' colour, dotted (then
        dash-dotted), over its points' range, so the model's line stands
        next to the seed's.
    """

    name: str
    payload_bytes: tuple[int, ...]
    cycles: tuple[float, ...]
    fit: AffineFit | None
    hops: tuple[int, ...] = ()
    hop_fit: tuple[float, float] | None = None
    baseline_for: str | None = None
    seed_lines: tuple[tuple[str, float, float], ...] = ()

    @property
    def plottable(self) -> bool:
        """True when the series has a fit and at least two points."""
        if self.hops:
            return self.hop_fit is not None and len(self.hops) >= 2
        return self.fit is not None and len(self.payload_bytes) >= 2

    @property
    def hop_residuals(self) -> tuple[float, ...]:
        """Cycles minus ``alpha + beta * hops`` of a hop-indexed series."""
        if self.hop_fit is None:
            return ()
        alpha, beta = self.hop_fit
        return tuple(c - (alpha + beta * h) for h, c in zip(self.hops, self.cycles))


@dataclass(frozen=True)
class ExperimentResult:
    """Contents of one ``results/<fabric>/<experiment>.json`` file.

    Members
    -------
    path : Path
        File the result was read from.
    heatmap : dict or None
        ``{"from_shire", "cols", "rows", "non_compute", "cells": [{"shire", "x",
        "y", "cycles"}]}``: round trips from one shire drawn on the mesh.
    fabric, experiment : str
        Names matching the file's directory and stem.
    title : str
        Human-readable title.
    simulator : str
        HDL simulator that produced the numbers, e.g. ``"verilator"``.
    config : dict
        Configuration the experiment ran with.
    series : tuple of ResultSeries
        Swept series, possibly empty.
    rows : tuple of ResultRow
        Compared quantities, possibly empty.
    notes : tuple of str
        Free-text remarks.
    what_if : tuple of str
        The ``--set FIELD=VALUE`` items the experiment ran with (key
        ``"set"``; empty, or absent, for the seed's model as it is).
    chart : dict or None
        ``{"title", "x_label", "y_label", "x_log2", "y_log", "lines": [{"name",
        "points": [[x, y], ...]}], "seed": [{"name", "x": [first, last], "low",
        "high", "value"}]}``: measured points drawn as lines, for experiments
        whose x axis is neither payload nor hops; ``seed`` (optional) marks
        the seed's values in the chart's units, a bar from ``low`` to ``high``
        at one ``x`` (``first`` = ``last``, with a mark at ``value`` if given)
        or a band over ``x`` from ``first`` to ``last``.
    topology : dict or None
        ``{"title", "legend", "nodes": [{"name", "x", "y"}], "links": [{"a", "b",
        "ab", "ba"}]}``: a machine's nodes and links, each link labelled with
        its measured utilisation in each direction (fractions, ``ab`` from
        node ``a`` to ``b``); ``legend`` (optional) says what the labels are.
    """

    path: Path
    fabric: str
    experiment: str
    title: str
    simulator: str
    config: dict[str, Any]
    series: tuple[ResultSeries, ...]
    rows: tuple[ResultRow, ...]
    notes: tuple[str, ...] = field(default=())
    what_if: tuple[str, ...] = field(default=())
    heatmap: dict[str, Any] | None = None
    chart: dict[str, Any] | None = None
    topology: dict[str, Any] | None = None

    @property
    def heatmap_path(self) -> Path:
        """Where the placement heat map is written."""
        return self.path.with_name(self.path.stem + "_heatmap.png")

    @property
    def chart_path(self) -> Path:
        """Where the chart is written."""
        return self.path.with_name(self.path.stem + "_chart.png")

    @property
    def topology_path(self) -> Path:
        """Where the topology diagram is written."""
        return self.path.with_name(self.path.stem + "_topology.png")

    @property
    def rows_met(self) -> int:
        """Number of rows that meet their target (tolerance or bounds)."""
        return sum(row.met is True for row in self.rows)

    @property
    def rows_checked(self) -> int:
        """Number of rows with a target, met or not (an unmeasured row counts);
        the others are reported for information."""
        return sum(row.met is not None for row in self.rows)

    @property
    def rows_met_text(self) -> str:
        """``"met / checked"``, plus the rows reported for information
        (:func:`met_text`: ``"N for information"`` when no row has a target)."""
        return _rows_text(self.rows)

    @property
    def plot_path(self) -> Path:
        """Where this experiment's plot is written: next to its JSON file."""
        return self.path.with_suffix(".png")

    @property
    def has_plot(self) -> bool:
        """True when at least one series has a fit and two or more points."""
        return any(s.plottable for s in self.series)


# --------------------------------------------------------------------------
# Loading and validation


class _Context:
    """Carries the file path so every error names the file in one line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, where: str, message: str) -> ValueError:
        location = f"{self.path}: {where}: " if where else f"{self.path}: "
        return ValueError(location + message)

    def obj(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(where, f"expected an object, not {type(value).__name__}")
        return value

    def key(self, obj: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise self.error(where, f"missing key {key!r}")
        return obj[key]

    def string(self, obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
        value = obj.get(key) if optional else self.key(obj, key, where)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.error(where, f"key {key!r} must be a string, not {value!r}")
        return value

    def number(self, obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
        value = obj.get(key) if optional else self.key(obj, key, where)
        if value is None and optional:
            return None
        # bool is an int subclass; a stray true/false is a writer bug, not a number.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(where, f"key {key!r} must be a finite number, not {value!r}")
        return value

    def array(self, obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
        value = self.key(obj, key, where)
        if not isinstance(value, list):
            raise self.error(where, f"key {key!r} must be a list, not {type(value).__name__}")
        return value


def _load_row(ctx: _Context, raw: Any, where: str) -> ResultRow:
    row = ctx.obj(raw, where)
    quantity = ctx.string(row, "quantity", where)
    # The key must be there; null marks a quantity the build could not measure.
    model = ctx.key(row, "model", where)
    model = None if model is None else float(ctx.number(row, "model", where))
    unit = ctx.string(row, "unit", where)
    reference = ctx.number(row, "reference", where, optional=True)
    ctx.number(row, "error_pct", where, optional=True)   # type-checked, then recomputed
    tolerance = ctx.number(row, "tolerance_pct", where, optional=True)
    minimum = _optional_float(ctx.number(row, "minimum", where, optional=True))
    maximum = _optional_float(ctx.number(row, "maximum", where, optional=True))
    # The error is recomputed from the model and the seed's value rather than
    # read: the file's own error_pct could say a row is met that is not.
    err = row_error_pct(model, reference, minimum=minimum, maximum=maximum,
                        tolerance_pct=tolerance)
    if tolerance is not None:
        if tolerance < 0:
            raise ctx.error(where, f"key 'tolerance_pct' must be non-negative, not {tolerance!r}")
        if err is None and model is not None:
            raise ctx.error(where, "has 'tolerance_pct' but no non-zero 'reference'")
    return ResultRow(
        quantity=quantity,
        model=model,
        reference=None if reference is None else float(reference),
        unit=unit,
        source=ctx.string(row, "source", where, optional=True),
        error_pct=None if err is None else float(err),
        tolerance_pct=None if tolerance is None else float(tolerance),
        target=ctx.string(row, "target", where, optional=True),
        minimum=minimum,
        maximum=maximum,
        reference_range=_load_range(ctx, row, where),
    )


def _load_range(ctx: _Context, row: Mapping[str, Any], where: str) -> tuple[float, float] | None:
    value = row.get("reference_range")
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            for v in value) or value[0] > value[1]:
        raise ctx.error(where, "key 'reference_range' must be [low, high], two finite numbers "
                               f"with low <= high, not {value!r}")
    return float(value[0]), float(value[1])


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def met_text(met: int, checked: int, total: int) -> str:
    """``"met / checked"`` rows, followed by ``" (+N for information)"`` when
    ``N = total - checked`` rows have no target; ``"N for information"``
    when no row has a target (a fault experiment's, whose runs are checked
    but whose bandwidths the seed never measured)."""
    info = total - checked
    if not checked and info:
        return f"{info} for information"
    return f"{met} / {checked}" + (f" (+{info} for information)" if info else "")


def met_sentence(met: int, checked: int, total: int) -> str:
    """:func:`met_text` as a phrase: ``"5 / 8 rows met"``, or ``"6 rows for
    information"`` when no row has a target."""
    if checked or not total:
        return met_text(met, checked, total) + " rows met"
    return f"{total} row{'s' * (total != 1)} for information"


def rows_met_text(raw_rows: Sequence[Mapping[str, Any]], notes: Sequence[str] = (),
                  what_if: bool = False) -> str:
    """:func:`met_sentence` of result-row dicts, as a run's line gives it:
    a ``what_if`` is marked "(a what-if)", and "(a what-if: ...)" when a row
    misses its target (compared with the seed's hardware as built); otherwise a
    missed row is followed by "(a known gap: ...)" when one of the
    experiment's ``notes`` starts ``Known gap``, and by nothing else.

    Raises
    ------
    ValueError
        If a row is malformed (see :func:`load_results`).
    """
    rows = [_load_row(_Context(Path("<row>")), raw, "row") for raw in raw_rows]
    text = _rows_text(rows, met_sentence)
    if all(r.passes for r in rows):
        return text + (" (a what-if)" if what_if else "")
    if what_if:
        return text + " (a what-if: its rows stand against the seed's hardware as built)"
    if any(str(n).startswith("Known gap") for n in notes):
        return text + " (a known gap: the report's notes for it say why)"
    return text


def _rows_text(rows: Sequence[ResultRow], form=met_text) -> str:
    """:func:`met_text` (or ``form``) of loaded rows."""
    return form(sum(r.met is True for r in rows), sum(r.met is not None for r in rows),
                len(rows))


def row_met(raw: Mapping[str, Any]) -> bool | None:
    """Whether one result-row dict meets its target: True or False, False
    when it was not measured, None when it has no target (a tolerance or
    bounds) and is reported for information.

    Raises
    ------
    ValueError
        If the row is malformed (see :func:`load_results`).
    """
    return _load_row(_Context(Path("<row>")), raw, "row").met


def _load_points(ctx: _Context, raw_points: list[Any], where: str,
                 axis: str) -> tuple[list[int], list[float]]:
    """``(x values, cycles)`` of a series' points; ``axis`` names the x key."""
    xs: list[int] = []
    cycles: list[float] = []
    for i, raw_point in enumerate(raw_points):
        pwhere = f"{where}.points[{i}]"
        point = ctx.obj(raw_point, pwhere)
        x = ctx.number(point, axis, pwhere)
        if x < 0 or x != int(x):
            raise ctx.error(pwhere, f"key '{axis}' must be a non-negative integer, not {x!r}")
        xs.append(int(x))
        cycles.append(float(ctx.number(point, "cycles", pwhere)))
    return xs, cycles


def _load_hop_series(ctx: _Context, name: str, raw_points: list[Any], raw_fit: Any,
                     where: str) -> ResultSeries:
    hop_values, cycles = _load_points(ctx, raw_points, where, "hops")
    hop_fit = None
    if raw_fit is not None:
        fwhere = f"{where}.fit"
        fit_obj = ctx.obj(raw_fit, fwhere)
        hop_fit = (float(ctx.number(fit_obj, "alpha_cycles", fwhere)),
                   float(ctx.number(fit_obj, "beta_cycles_per_hop", fwhere)))
    if hop_fit is not None and not hop_values:
        raise ctx.error(where, "has a fit but no points")
    return ResultSeries(name=name, payload_bytes=(), cycles=tuple(cycles), fit=None,
                        hops=tuple(hop_values), hop_fit=hop_fit)


def _load_series(ctx: _Context, name: str, raw_points: list[Any], raw_fit: Any, where: str) -> ResultSeries:
    payloads, cycles = _load_points(ctx, raw_points, where, "payload_bytes")

    fit = None
    if raw_fit is not None:
        fwhere = f"{where}.fit"
        fit_obj = ctx.obj(raw_fit, fwhere)
        alpha = float(ctx.number(fit_obj, "alpha_cycles", fwhere))
        beta = float(ctx.number(fit_obj, "beta_cycles_per_byte", fwhere))
        if beta <= 0:
            raise ctx.error(fwhere, f"key 'beta_cycles_per_byte' must be positive, not {beta!r}")
        # Residuals are not stored; recompute them against the stored fit so the
        # plot shows exactly what the experiment reported, without refitting.
        residuals = tuple(c - (alpha + beta * b) for b, c in zip(payloads, cycles))
        fit = AffineFit(
            alpha_cycles=alpha,
            beta_cycles_per_byte=beta,
            rmse_pct=float(ctx.number(fit_obj, "rmse_pct", fwhere)),
            residuals_cycles=residuals,
        )
    return ResultSeries(name=name, payload_bytes=tuple(payloads), cycles=tuple(cycles), fit=fit)


def _load_seed_lines(ctx: _Context, s: Mapping[str, Any], where: str,
                     beta_key: str) -> tuple[tuple[str, float, float], ...]:
    """A series' optional ``seed_lines``, as :attr:`ResultSeries.seed_lines`."""
    if "seed_lines" not in s:
        return ()
    lines = []
    for i, raw in enumerate(ctx.array(s, "seed_lines", where)):
        lwhere = f"{where}.seed_lines[{i}]"
        line = ctx.obj(raw, lwhere)
        lines.append((ctx.string(line, "label", lwhere),
                      float(ctx.number(line, "alpha_cycles", lwhere)),
                      float(ctx.number(line, beta_key, lwhere))))
    return tuple(lines)


def _draw_seed_lines(ax, s: ResultSeries, xs: Sequence[float], scale: float, color) -> None:
    """Each of ``s.seed_lines`` in ``color`` over the range of ``xs`` (in the
    series' own x unit), drawn at ``x / scale`` on the axis: dotted, then
    dash-dotted, and so on, each labelled ``seed: <label>``."""
    lo, hi = min(xs), max(xs)
    for i, (label, alpha, beta) in enumerate(s.seed_lines):
        ax.plot([lo / scale, hi / scale], [alpha + beta * lo, alpha + beta * hi],
                (":", "-.")[i % 2], color=color, linewidth=1.6, label=f"seed: {label}")


def _load_experiment(path: Path) -> ExperimentResult:
    ctx = _Context(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ctx.error("", f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise ctx.error("", f"not UTF-8 (byte {exc.start}: {exc.reason})") from None
    except (ValueError, RecursionError) as exc:
        # JSON that parses no further: a number of thousands of digits, arrays
        # nested thousands deep
        raise ctx.error("", f"not a result file ({type(exc).__name__}: {exc})") from None
    doc = ctx.obj(raw, "top level")

    fabric = ctx.string(doc, "fabric", "top level")
    experiment = ctx.string(doc, "experiment", "top level")
    # The plot is written next to the JSON, so names that disagree with the path
    # would make the report link one experiment's plot under another's title.
    if fabric != path.parent.name:
        raise ctx.error("top level", f"key 'fabric' is {fabric!r} but the file is in directory {path.parent.name!r}")
    if experiment != path.stem:
        raise ctx.error("top level", f"key 'experiment' is {experiment!r} but the file is named {path.name!r}")

    config = doc.get("config") or {}
    if not isinstance(config, Mapping):
        raise ctx.error("top level", f"key 'config' must be an object, not {type(config).__name__}")

    series: list[ResultSeries] = []
    if "series" in doc:
        for i, raw_series in enumerate(ctx.array(doc, "series", "top level")):
            where = f"series[{i}]"
            s = ctx.obj(raw_series, where)
            axis = s.get("x", "payload_bytes")
            if axis not in ("payload_bytes", "hops"):
                raise ctx.error(where, f"key 'x' must be 'payload_bytes' or 'hops', not {axis!r}")
            load = _load_hop_series if axis == "hops" else _load_series
            loaded = load(ctx, ctx.string(s, "name", where), ctx.array(s, "points", where),
                          s.get("fit"), where)
            baseline_for = ctx.string(s, "baseline_for", where, optional=True)
            seed_lines = _load_seed_lines(ctx, s, where, "beta_cycles_per_hop" if axis == "hops"
                                          else "beta_cycles_per_byte")
            series.append(replace(loaded, baseline_for=baseline_for, seed_lines=seed_lines))
        names = [s.name for s in series]
        for i, s in enumerate(series):
            if s.baseline_for is not None and (s.baseline_for == s.name
                                               or s.baseline_for not in names):
                others = ", ".join(repr(n) for n in names if n != s.name)
                raise ctx.error(f"series[{i}]", f"key 'baseline_for' must name another series "
                                                f"({others}), not {s.baseline_for!r}")
    elif "points" in doc:
        series.append(_load_series(ctx, experiment, ctx.array(doc, "points", "top level"), doc.get("fit"), "top level"))

    rows = tuple(_load_row(ctx, r, f"rows[{i}]") for i, r in enumerate(ctx.array(doc, "rows", "top level")))

    notes = doc.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ctx.error("top level", "key 'notes' must be a list of strings")
    what_if = doc.get("set", [])
    if not isinstance(what_if, list) or not all(
            isinstance(n, str) and "=" in n and "`" not in n and "\n" not in n for n in what_if):
        raise ctx.error("top level", "key 'set' must be a list of FIELD=VALUE strings")

    heatmap = doc.get("heatmap")
    if heatmap is not None:
        hm = ctx.obj(heatmap, "heatmap")
        for key in ("from_shire", "cols", "rows"):
            ctx.number(hm, key, "heatmap")
        cols, rows_ = int(ctx.number(hm, "cols", "heatmap")), int(ctx.number(hm, "rows", "heatmap"))
        if not (1 <= cols <= 64 and 1 <= rows_ <= 64):
            raise ctx.error("heatmap", f"keys 'cols' and 'rows' must be from 1 to 64, not "
                                       f"{cols} and {rows_}")
        cells = [ctx.obj(c, f"heatmap.cells[{i}]") for i, c in enumerate(ctx.array(hm, "cells", "heatmap"))]
        spots = [(c, f"heatmap.cells[{i}]") for i, c in enumerate(cells)]
        for key in ("non_compute", "source_cell"):
            if key in hm:
                raw = hm[key] if key == "non_compute" else [hm[key]]
                if not isinstance(raw, list):
                    raise ctx.error("heatmap", f"key '{key}' must be a list of [x, y] cells")
                for j, xy in enumerate(raw):
                    if not (isinstance(xy, list) and len(xy) == 2):
                        raise ctx.error("heatmap", f"key '{key}' must hold [x, y] cells, not {xy!r}")
                    spots.append(({"x": xy[0], "y": xy[1]}, f"heatmap.{key}[{j}]"))
        for cell, where in spots:
            for key in ("x", "y") + (("shire", "cycles") if "shire" in cell or where.startswith("heatmap.cells") else ()):
                ctx.number(cell, key, where)
            if not (0 <= cell["x"] < cols and 0 <= cell["y"] < rows_):
                raise ctx.error(where, f"cell ({cell['x']}, {cell['y']}) must lie inside the "
                                       f"{cols}x{rows_} grid")
        heatmap = dict(hm)

    chart = doc.get("chart")
    if chart is not None:
        ch = ctx.obj(chart, "chart")
        for key in ("title", "x_label", "y_label"):
            ctx.string(ch, key, "chart")
        for key in ("x_log2", "y_log"):
            if not isinstance(ch.get(key, False), bool):
                raise ctx.error("chart", f"key {key!r} must be true or false, not {ch[key]!r}")
        for i, raw_line in enumerate(ctx.array(ch, "lines", "chart")):
            lwhere = f"chart.lines[{i}]"
            line = ctx.obj(raw_line, lwhere)
            ctx.string(line, "name", lwhere)
            for j, xy in enumerate(ctx.array(line, "points", lwhere)):
                if not (isinstance(xy, list) and len(xy) == 2 and all(
                        isinstance(v, (int, float)) and not isinstance(v, bool)
                        and math.isfinite(v) for v in xy)):
                    raise ctx.error(f"{lwhere}.points[{j}]", f"must be [x, y] numbers, not {xy!r}")
        for i, raw_mark in enumerate(ctx.array(ch, "seed", "chart") if "seed" in ch else ()):
            mwhere = f"chart.seed[{i}]"
            mark = ctx.obj(raw_mark, mwhere)
            ctx.string(mark, "name", mwhere)
            span = ctx.array(mark, "x", mwhere)
            if not (len(span) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           and math.isfinite(v) for v in span)
                    and span[0] <= span[1]):
                raise ctx.error(mwhere, f"key 'x' must be [first, last] numbers in order, "
                                        f"not {span!r}")
            low, high = ctx.number(mark, "low", mwhere), ctx.number(mark, "high", mwhere)
            value = ctx.number(mark, "value", mwhere, optional=True)
            if not low <= (low if value is None else value) <= high:
                raise ctx.error(mwhere, f"keys 'low', 'value' and 'high' must be in order, "
                                        f"not {low!r}, {value!r}, {high!r}")
            if ch.get("y_log") and low <= 0:
                raise ctx.error(mwhere, f"key 'low' must be positive on the chart's log "
                                        f"axis, not {low!r}")
            if ch.get("x_log2") and span[0] <= 0:
                raise ctx.error(mwhere, f"key 'x' must be positive on the chart's log "
                                        f"axis, not {span!r}")
        chart = dict(ch)

    topology = doc.get("topology")
    if topology is not None:
        tp = ctx.obj(topology, "topology")
        ctx.string(tp, "title", "topology")
        names = set()
        for i, raw_node in enumerate(ctx.array(tp, "nodes", "topology")):
            nwhere = f"topology.nodes[{i}]"
            node = ctx.obj(raw_node, nwhere)
            names.add(ctx.string(node, "name", nwhere))
            for key in ("x", "y"):
                ctx.number(node, key, nwhere)
        for i, raw_link in enumerate(ctx.array(tp, "links", "topology")):
            lwhere = f"topology.links[{i}]"
            link = ctx.obj(raw_link, lwhere)
            for key in ("a", "b"):
                if ctx.string(link, key, lwhere) not in names:
                    raise ctx.error(lwhere, f"key '{key}' must name a node, not {link[key]!r}")
            for key in ("ab", "ba"):
                value = ctx.number(link, key, lwhere)
                if not 0 <= value <= 1:
                    raise ctx.error(lwhere, f"key '{key}' must be a fraction from 0 to 1, "
                                            f"not {value!r}")
        topology = dict(tp)

    title = ctx.string(doc, "title", "top level")
    if not title.strip() or len(title.splitlines()) != 1:
        # it becomes a heading of the report
        raise ctx.error("top level", f"key 'title' must be one line of text, not {title!r}")
    return ExperimentResult(
        heatmap=heatmap,
        chart=chart,
        topology=topology,
        path=path,
        fabric=fabric,
        experiment=experiment,
        title=title,
        simulator=ctx.string(doc, "simulator", "top level"),
        config=dict(config),
        series=tuple(series),
        rows=rows,
        notes=tuple(notes),
        what_if=tuple(what_if),
    )


def _experiment_order(path: Path) -> tuple:
    """Sort key of ``<fabric>/<experiment>.json``: by fabric, then in the order
    the fabric lists its experiments (A, B, C, ... for dsm); a name it does
    not list comes after them, by name."""
    import importlib

    fabric, name = path.parent.name, path.stem
    try:
        names = list(importlib.import_module(f"sim.experiments.{fabric}").EXPERIMENTS)
    except (ImportError, AttributeError):
        names = []
    return (fabric, names.index(name) if name in names else len(names), name)


def load_results(results_dir: Path) -> list[ExperimentResult]:
    """Read and check every ``<fabric>/<experiment>.json`` under a directory,
    ``<fabric>`` one of :data:`sim.cli.FABRICS`; other folders (``sweep/``,
    notes) are not read.

    Parameters
    ----------
    results_dir : Path
        The results directory, usually ``results/``.

    Returns
    -------
    list of ExperimentResult
        Sorted by fabric, then in the order the fabric lists its experiments.

    Raises
    ------
    FileNotFoundError
        If ``results_dir`` does not exist or holds no result files.
    ValueError
        If a file is not valid JSON, lacks a required key, has a value of the
        wrong type, or names a fabric or experiment that differs from its path.
        The one-line message names the file, the place in it and the key.
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results directory {results_dir} "
                                + ("is a file" if results_dir.exists() else "does not exist"))
    from sim.cli import FABRICS

    # only the fabrics' folders: not sweep/ (sweep tables), nor a folder of
    # notes, nor a build folder given as the results folder too
    paths = sorted((p for fabric in FABRICS for p in (results_dir / fabric).glob("*.json")),
                   key=_experiment_order)
    if not paths:
        raise FileNotFoundError(f"no <fabric>/<experiment>.json result files under {results_dir}")
    return [_load_experiment(p) for p in paths]


# --------------------------------------------------------------------------
# Formatting


#: A value nearer zero than this is rounding noise (a perfect fit's RMSE,
#: 1e-14) and prints as 0.
_ZERO = 1e-9


def format_number(value: float | None) -> str:
    """A model or seed value as the report and the console show it: four
    significant figures, but never scientific notation for cycle counts
    (20,080, not 2.008e+04); a value within rounding noise of zero (a perfect
    fit's RMSE, 1e-14) is 0; ``None`` (not measured) is a dash."""
    if value is None:
        return "—"
    if abs(value) < _ZERO:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10_000:
        return f"{value:,.0f}"
    if magnitude >= 1_000:
        return f"{value:.0f}"
    return f"{value:.4g}"


#: The unit of a row whose model is a yes (1) or no (0): shown as words.
FLAG_UNIT = "1 = yes"


def _fmt_flag(value: float | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def format_value(value: float | None, unit: str) -> str:
    """A row's model or seed value as the report shows it: yes or no for a
    row of unit :data:`FLAG_UNIT`, else :func:`format_number`."""
    return _fmt_flag(value) if unit == FLAG_UNIT else format_number(value)


def format_seed(reference: float | None, reference_range: tuple[float, float] | None,
                unit: str) -> str:
    """A row's seed value as the report and the console show it: its range
    (:func:`format_range`) where the seed gives one, else
    :func:`format_value`; a dash where the seed gives neither."""
    if reference_range is not None:
        return format_range(reference_range)
    return format_value(reference, unit)


def _value_cells(row: ResultRow) -> list[str]:
    """A result row's model, seed, unit, error % and target cells: a yes/no
    row (unit :data:`FLAG_UNIT`) in words, without an error."""
    model = format_value(row.model, row.unit)
    seed = format_seed(row.reference, row.reference_range, row.unit)
    if row.unit == FLAG_UNIT:
        return [model, seed, "yes / no", "—",
                "yes" if row.target in ("1", "1 = yes") else _target_text(row)]
    if row.reference_range is not None:
        # no error % against a midpoint the seed never gave
        return [model, seed, row.unit, "—", _target_text(row)]
    return [model, seed, row.unit, _error_cell(row), _target_text(row)]


def _error_cell(row: ResultRow) -> str:
    """A row's error: in % of the seed, or, for a quantity that is itself a
    percentage and has no tolerance in % to be compared with, the difference
    in percentage points ("-11.2 pp" rather than "-101" % of 11 %)."""
    if (row.unit == "%" and row.tolerance_pct is None and row.error_pct is not None
            and row.model is not None and row.reference is not None):
        points = row.model - row.reference
        return "0 pp" if abs(points) < _ZERO else f"{points:+.3g} pp"
    return _fmt_error(row.error_pct)


def format_range(bounds: tuple[float, float]) -> str:
    """A seed's range ``(low, high)`` as the report and the console show it,
    each bound as :func:`format_number`: "2.8–5", or "-1 to 1" where ``low``
    is negative (not "-1–1")."""
    between = " to " if bounds[0] < 0 else "–"
    return f"{format_number(bounds[0])}{between}{format_number(bounds[1])}"


def _fmt_rmse(rmse_pct: float, points: int) -> str:
    """A fit's RMSE % to three decimals (a perfect fit's rounding noise,
    3e-14, reads 0.000), or ``— (2 points)`` for a line through two points,
    which always fits them exactly."""
    return "— (2 points)" if points <= 2 else f"{rmse_pct:.3f}"


def _fmt_error(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) < _ZERO:
        return "0"
    if abs(value) >= 100:
        return f"{value:+.0f}"
    return f"{value:+.3g}"


def _target_text(row: ResultRow) -> str:
    if row.target:
        return row.target
    if row.tolerance_pct is not None:
        return f"within {format_number(row.tolerance_pct)}%"
    return "—"


def _cell(text: str) -> str:
    # A literal pipe or newline would split or end the markdown table row.
    return text.replace("|", "\\|").replace("\n", " ")


def _short(text: str, limit: int = 60) -> str:
    """``text``, or a pointer to the JSON file when it is too long for a line."""
    return text if len(text) <= limit else "(in the JSON file)"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _status(result: ExperimentResult) -> str:
    if not result.rows_checked:
        return "—"
    return "✓" if result.rows_met == result.rows_checked else "✗"


# --------------------------------------------------------------------------
# Plotting


def _render_hop_plot(result: ExperimentResult) -> bytes:
    """PNG of round-trip cycles vs mesh hops with the fit (top) and residuals (bottom)."""
    fig = Figure(figsize=(7.0, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for s in result.series:
        if not (s.hops and s.plottable):
            continue
        assert s.hop_fit is not None
        alpha, beta = s.hop_fit
        (marks,) = top.plot(s.hops, s.cycles, "o", alpha=0.5)
        color = marks.get_color()
        lo, hi = min(s.hops), max(s.hops)
        top.plot([lo, hi], [alpha + beta * lo, alpha + beta * hi], "-", color=color,
                 label=f"{s.name}: {format_number(alpha)} + {format_number(beta)} x hops cycles")
        _draw_seed_lines(top, s, s.hops, 1, color)
        bottom.plot(s.hops, s.hop_residuals, "o", color=color, alpha=0.5)
    bottom.axhline(0.0, color="0.4", linewidth=0.8)
    top.set_title(result.title)
    top.set_ylabel("round trip (minion cycles)")
    top.legend(fontsize="small")
    top.grid(True, alpha=0.3)
    bottom.set_xlabel("mesh hops")
    bottom.set_ylabel("residual (cycles)")
    bottom.grid(True, alpha=0.3)
    return _png(fig)


def _render_heatmap(result: ExperimentResult) -> bytes:
    """PNG of the mesh placement, each shire coloured by its round trip from one shire."""
    import numpy as np

    hm = result.heatmap
    assert hm is not None
    cols, rows = int(hm["cols"]), int(hm["rows"])
    grid = np.full((rows, cols), np.nan)
    fig = Figure(figsize=(6.0, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for cell in hm["cells"]:
        grid[int(cell["y"]), int(cell["x"])] = cell["cycles"]
    image = ax.imshow(grid, cmap="Blues")
    fig.colorbar(image, ax=ax, label="round trip (minion cycles)")
    for cell in hm["cells"]:
        ax.text(cell["x"], cell["y"], f"{cell['shire']}\n{cell['cycles']:.0f}", ha="center",
                va="center", fontsize=7)
    for x, y in hm.get("non_compute", []):
        ax.add_patch(_rectangle(x, y, "0.75"))
        ax.text(x, y, "non-\ncompute", ha="center", va="center", fontsize=7)
    if "source_cell" in hm:
        x, y = hm["source_cell"]
        ax.add_patch(_rectangle(x, y, "gold"))
        ax.text(x, y, f"{hm['from_shire']}\nsource", ha="center", va="center", fontsize=7)
    ax.set_title(f"{result.title}: from shire {hm['from_shire']}")
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    return _png(fig)


def _render_chart(result: ExperimentResult) -> bytes:
    """PNG of an experiment's ``chart``: one marked line per entry of ``lines``."""
    chart = result.chart
    assert chart is not None
    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()

    def text(name: str) -> str:
        return name.replace("$", r"\$")      # a name, not mathtext

    for line in chart["lines"]:
        points = sorted(line["points"])
        ax.plot([x for x, _ in points], [y for _, y in points], "o-", label=text(line["name"]))
    for mark in chart.get("seed") or ():
        (first, last), low, high = mark["x"], mark["low"], mark["high"]
        if first == last:
            value = mark.get("value")
            centre = (low + high) / 2 if value is None else value
            ax.errorbar([first], [centre], yerr=[[centre - low], [high - centre]],
                        fmt="none" if value is None else "D", color="black", mfc="none",
                        capsize=5, label=text(mark["name"]), zorder=3)
        else:
            ax.fill_between([first, last], [low, low], [high, high], color="0.5", alpha=0.25,
                            linewidth=0, label=text(mark["name"]))
    if chart.get("x_log2"):
        ax.set_xscale("log", base=2)
    if chart.get("y_log"):
        ax.set_yscale("log")
        # plain numbers, not powers of ten; of the minor ticks only 2, 3 and 5
        # of each decade are labelled, so the labels do not overlap
        def plain(v, _):
            return f"{v:,.0f}" if v >= 1000 else f"{v:g}"
        ax.yaxis.set_major_formatter(FuncFormatter(plain))
        ax.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: plain(v, _) if f"{v:.0e}"[0] in "235" else ""))
    ax.set_title(text(chart["title"]))
    ax.set_xlabel(text(chart["x_label"]))
    ax.set_ylabel(text(chart["y_label"]))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def _render_topology(result: ExperimentResult) -> bytes:
    """PNG of a machine's nodes and links, each link coloured by its busier
    direction and labelled with both directions' utilisation."""
    import textwrap

    from matplotlib import colormaps

    tp = result.topology
    assert tp is not None
    at = {n["name"]: (n["x"], n["y"]) for n in tp["nodes"]}
    fig = Figure(figsize=(8.0, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = colormaps["viridis"]
    for link in tp["links"]:
        (xa, ya), (xb, yb) = at[link["a"]], at[link["b"]]
        busiest = max(link["ab"], link["ba"])
        ax.plot([xa, xb], [ya, yb], "-", color=cmap(busiest), linewidth=1.5 + 5 * busiest,
                zorder=1)
        # labelled nearer node a, so the links fanning out of one node stay apart
        ax.text(xa + 0.3 * (xb - xa), ya + 0.3 * (yb - ya),
                f"{100 * link['ab']:.0f}% / {100 * link['ba']:.0f}%", fontsize=7,
                ha="center", va="center", bbox={"facecolor": "white", "edgecolor": "none",
                                                 "alpha": 0.8, "pad": 1}, zorder=3)
    for name, (x, y) in at.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=8, zorder=4,
                bbox={"facecolor": "0.9", "edgecolor": "0.3", "boxstyle": "round"})
    legend = textwrap.fill(tp.get("legend", "utilisation a to b / b to a"), 110)
    ax.set_title(f"{tp['title']}\n{legend}", fontsize=9)
    ax.invert_yaxis()
    ax.axis("off")
    ax.margins(0.08)
    return _png(fig)


def _rectangle(x: float, y: float, color: str) -> Any:
    from matplotlib.patches import Rectangle
    return Rectangle((x - 0.5, y - 0.5), 1, 1, color=color)


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    # No "Software" tag so regenerated plots differ only when the data does.
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    return buffer.getvalue()


#: The x axis of each fabric's fit plot: what a series' payload is.
_PAYLOAD_AXIS = {"dsm": "payload per active SM (KiB)",
                 "pcie": "bytes copied per GPU pair (KiB)",
                 "mesh": "payload per sending minion (KiB)"}

#: Series a fit plot holds before its legend moves beside the axes and its
#: colours come from a 20-colour map (the default cycle has 10).
_MANY_SERIES = 8


def _render_plot(result: ExperimentResult) -> bytes:
    """PNG of cycles vs payload with fit lines (top) and residuals (bottom)."""
    import textwrap

    from matplotlib import colormaps

    if any(s.hops for s in result.series):
        return _render_hop_plot(result)
    shown = [s for s in result.series if s.plottable]
    many = len(shown) > _MANY_SERIES
    fig = Figure(figsize=(11.0, 6.0) if many else (7.0, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    # Lines through two sizes each leave no residual: no panel for them.
    two_sizes = all(len(s.payload_bytes) == 2 for s in shown)
    if two_sizes:
        top = bottom = fig.subplots(1, 1)
    else:
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    colors = colormaps["tab20"].colors
    # A baseline is drawn after its series, dashed with hollow marks in its colour.
    drawn = {}
    ordered = ([s for s in shown if s.baseline_for is None]
               + [s for s in shown if s.baseline_for is not None])
    for i, s in enumerate(ordered):
        assert s.fit is not None
        kib = [b / _KIB for b in s.payload_bytes]
        style = {}
        if s.baseline_for in drawn:
            style = {"color": drawn[s.baseline_for], "markerfacecolor": "none"}
        elif many:
            style = {"color": colors[i % 20]}
        (marks,) = top.plot(kib, s.cycles, "osD^v<>"[i // 20 % 7] if many else "o", label=None,
                            **style)
        color = drawn[s.name] = marks.get_color()
        line = "--" if s.baseline_for in drawn else "-"
        lo, hi = min(s.payload_bytes), max(s.payload_bytes)
        top.plot(
            [lo / _KIB, hi / _KIB],
            [s.fit.predict(lo), s.fit.predict(hi)],
            line,
            color=color,
            label=(
                f"{s.name}: 1/β = {format_number(s.fit.bytes_per_cycle)} B/cycle, "
                f"α = {format_number(s.fit.alpha_cycles)} cycles"
                + (f", RMSE {_fmt_rmse(s.fit.rmse_pct, len(s.payload_bytes))}%"
                   if len(s.payload_bytes) > 2 else "")
            ),
        )
        _draw_seed_lines(top, s, s.payload_bytes, _KIB, color)
        if not two_sizes:
            bottom.plot(kib, s.fit.residuals_cycles, "o" + line, color=color, linewidth=0.8,
                        **({"markerfacecolor": "none"} if line == "--" else {}))
    if two_sizes:
        top.set_title(textwrap.fill(result.title, 90 if many else 60) + "\n(two sizes a "
                      "series: each line passes through both, so no residual is drawn)",
                      fontsize="medium")
    else:
        bottom.axhline(0.0, color="0.4", linewidth=0.8)
        # At least a cycle either way, so that rounding (1e-10 cycles off a
        # line through two points) is not drawn as a spread.
        low, high = bottom.get_ylim()
        bottom.set_ylim(min(low, -1.0), max(high, 1.0))
        bottom.set_ylabel("residual (cycles)")
        top.set_title(textwrap.fill(result.title, 90 if many else 60), fontsize="medium")
    top.set_ylabel("elapsed cycles")
    # 1,000,000 rather than 1.0 under a "1e6" at the top of the axis
    top.yaxis.set_major_formatter(FuncFormatter(lambda value, _: format_number(value)))
    if many:
        fig.legend(loc="outside right upper", fontsize="x-small")
    else:
        top.legend(fontsize="small")
    top.grid(True, alpha=0.3)
    bottom.set_xlabel(_PAYLOAD_AXIS.get(result.fabric, "payload (KiB)"))
    bottom.grid(True, alpha=0.3)
    return _png(fig)


# --------------------------------------------------------------------------
# Output


def _experiment_section(result: ExperimentResult, results_dir: Path) -> list[str]:
    lines = [f"### {result.title}", ""]
    lines.append(f"`{result.fabric}/{result.path.name}` · simulator: {result.simulator}")
    lines.append("")
    if result.what_if:
        sets = " ".join(f"`{item}`" for item in result.what_if)
        lines += [f"**What-if:** run with {sets} (by `--set` or `--config`). The seed's "
                  "numbers were measured on the "
                  "hardware as built, so the error column shows how far the change moves the "
                  "model from them. The notes below are written for the seed's values and "
                  "may not hold for these.", ""]
    if result.config:
        config = ", ".join(f"`{k}={_short(json.dumps(v))}`" for k, v in result.config.items())
        lines += [f"Configuration: {config}", ""]

    if result.rows:
        table = [[row.quantity, *_value_cells(row), _MET[row.met], row.source or "—"]
                 for row in result.rows]
        lines += _md_table(["quantity", "model", "seed", "unit", "error %", "target", "met", "source"], table)
        lines.append("")

    hop_fitted = [s for s in result.series if s.hop_fit is not None]
    if hop_fitted:
        lines += _md_table(["series", "points", "α (cycles)", "β (cycles/hop)", "worst residual (cycles)"],
                           [[s.name, str(len(s.hops)), format_number(s.hop_fit[0]),
                             format_number(s.hop_fit[1]),
                             format_number(max(abs(r) for r in s.hop_residuals))]
                            for s in hop_fitted if s.hop_fit is not None])
        lines.append("")

    fitted = [s for s in result.series if s.fit is not None]
    if fitted:
        fit_table = [
            [
                s.name,
                str(len(s.payload_bytes)),
                format_number(s.fit.alpha_cycles),
                format_number(s.fit.beta_cycles_per_byte),
                format_number(s.fit.bytes_per_cycle),
                _fmt_rmse(s.fit.rmse_pct, len(s.payload_bytes)),
            ]
            for s in fitted
            if s.fit is not None
        ]
        lines += _md_table(["series", "points", "α (cycles)", "β (cycles/B)", "1/β (B/cycle)", "RMSE %"], fit_table)
        lines.append("")

    if result.notes:
        lines += [f"- {note}" for note in result.notes]
        lines.append("")

    if result.has_plot:
        link = result.plot_path.relative_to(results_dir).as_posix()
        lines += [f"![{result.title}]({link})", ""]
    if result.heatmap is not None:
        link = result.heatmap_path.relative_to(results_dir).as_posix()
        lines += [f"![{result.title}: placement heat map]({link})", ""]
    if result.chart is not None:
        link = result.chart_path.relative_to(results_dir).as_posix()
        lines += [f"![{result.chart['title']}]({link})", ""]
    if result.topology is not None:
        link = result.topology_path.relative_to(results_dir).as_posix()
        lines += [f"![{result.topology['title']}]({link})", ""]
    return lines


def write_report(results_dir: Path) -> Path:
    """Write ``report.md`` and one plot per fitted experiment.

    Every result file is read and checked before anything is written, so a
    malformed file leaves the previous report and plots untouched. Each output
    file is written atomically (temporary file, then rename).

    Parameters
    ----------
    results_dir : Path
        Directory holding ``<fabric>/<experiment>.json``; the report is written
        to ``results_dir / "report.md"`` and each plot next to its JSON file as
        ``<fabric>/<experiment>.png``.

    Returns
    -------
    Path
        Path of the written report.

    Raises
    ------
    FileNotFoundError
        If ``results_dir`` does not exist or holds no result files.
    ValueError
        If a result file is malformed; the message names the file and the key.
    """
    results_dir = Path(results_dir)
    results = load_results(results_dir)
    # Render every plot before writing anything so a plotting failure also
    # leaves the old outputs in place.
    plots = {r.plot_path: _plotted(r, _render_plot) for r in results if r.has_plot}
    plots.update({r.heatmap_path: _plotted(r, _render_heatmap) for r in results
                  if r.heatmap is not None})
    plots.update({r.chart_path: _plotted(r, _render_chart) for r in results
                  if r.chart is not None})
    plots.update({r.topology_path: _plotted(r, _render_topology) for r in results
                  if r.topology is not None})

    total_text = _rows_text([row for r in results for row in r.rows], met_sentence)
    simulators = ", ".join(sorted({r.simulator for r in results}))
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")

    lines = [
        "# fabricsim report",
        "",
        f"Generated {generated} · simulator: {simulators} · "
        f"{len(results)} experiment{'s' * (len(results) != 1)}, {total_text}"
        + (f" · **{what_ifs} experiment{'s' * (what_ifs != 1)} run as "
           f"{'what-ifs' if what_ifs != 1 else 'a what-if'}**, marked below and in the "
           f"titles of {'their' if what_ifs != 1 else 'its'} plots"
           if (what_ifs := sum(bool(r.what_if) for r in results)) else ""),
        "",
        "A row is met when |error %| is within its tolerance (or the model within its "
        "bounds); rows marked — have neither, are reported for information and are not "
        "counted as met.",
        "",
        "How to read the tables: **model** is the number measured in the simulated RTL "
        "(cycles counted by its own counters, turned into the row's unit); **seed** is the "
        "published measurement the fabric is modelled after (low–high where the seed gives "
        "a range), its section and sentence in the source column; **error %** is 100 × "
        "(model − seed) / seed, left out (—) where the seed gives a range or only a bound, "
        "and for a row in % without a tolerance the difference model − seed in "
        "percentage points (pp); a row for information (target —) shows its error too, "
        "and its experiment's notes say why it is not a target. Cycles and B/cycle "
        "are in each fabric's own clock: the SM clock (sm_clock_ghz, 1.785 GHz) for dsm, the "
        "minion clock (minion_mhz, 600 MHz) for mesh unless a row says mesh cycles "
        "(mesh_mhz, 400 MHz), 1 GHz (1 ns) for pcie, at the seeds' clocks unless an "
        "experiment's configuration sets others; "
        "GB/s is 1e9 B/s. A fit is elapsed cycles = α + β × payload (or × hops) by least "
        "squares, 1/β its bandwidth, and its RMSE % the root-mean-square residual as a "
        "percentage of the rise the fit gives across the swept sizes. Where an undisclosed "
        "depth or latency was chosen to meet a row, the experiment's notes name the field "
        "and the row: such a row checks the calibration rather than predicting.",
        "",
        "## Summary",
        "",
    ]
    summary = [
        [r.fabric, r.experiment, r.title, r.rows_met_text, _status(r)] for r in results
    ]
    lines += _md_table(["fabric", "experiment", "title", "rows met", "status"], summary)
    lines.append("")

    lines += _verification_section(results_dir)
    lines += _faults_survived(results)
    # make report runs neither of these long jobs; say so rather than
    # leave their sections out without a word
    lines += _bench_section(results_dir) or [
        "## Simulation speed", "",
        f"No `{BENCH_NAME}` in this folder: `{_make(results_dir, 'bench')}` measures "
        "simulated cycles per second and the report's own time, and writes it.", ""]
    synth_lines, synth_plots = _synth_section(results_dir)
    if not (results_dir / SYNTH_NAME).exists():
        # the section's heading, the line, then any synthesis sweep's plot
        synth_lines = ["## FPGA synthesis", "",
                       f"No `{SYNTH_NAME}` in this folder: `{_make(results_dir, 'synth')}` "
                       "synthesises every block and writes it.", ""] + synth_lines[2:]
    lines += synth_lines
    plots.update(synth_plots)

    current_fabric = None
    for result in results:
        if result.fabric != current_fabric:
            current_fabric = result.fabric
            lines += [f"## {current_fabric}", ""]
        lines += _experiment_section(result, results_dir)

    report_path = results_dir / REPORT_NAME
    for path in [*plots, report_path]:
        # checked before the first is written, so nothing is written half
        if path.is_dir():
            raise ValueError(f"--results must leave {str(path)!r} free for the report, "
                             f"but it is a folder")
    # all or none: a full disk leaves the last report and its plots as they were
    write_files_atomically({**plots,
                            report_path: ("\n".join(lines).rstrip() + "\n").encode("utf-8")})
    return report_path


#: Added to the plot titles of an experiment run as a what-if, so that a
#: plot seen on its own is not taken for the seed's model.
WHAT_IF_MARK = " (what-if)"


def _plotted(result: ExperimentResult, render) -> bytes:
    """``render(result)``, a PNG, its titles marked :data:`WHAT_IF_MARK` for
    a what-if; numbers that pass the file's checks yet cannot be drawn
    (finite but beyond what a plot's scale can hold) raise a
    :class:`ValueError` naming the file."""
    if result.what_if:
        marked = {"title": result.title + WHAT_IF_MARK}
        for key in ("chart", "topology"):
            value = getattr(result, key)
            if isinstance(value, Mapping) and isinstance(value.get("title"), str):
                marked[key] = {**value, "title": value["title"] + WHAT_IF_MARK}
        result = replace(result, **marked)
    try:
        return render(result)
    except (OverflowError, ValueError) as error:
        raise ValueError(f"{result.path}: its numbers cannot be plotted "
                         f"({type(error).__name__}: {error})") from None


#: Experiments that run the fabric with a fault the hardware tolerates.
FAULT_EXPERIMENTS = {
    ("dsm", "plane_off"): "one GX plane switched off (either one)",
    ("pcie", "link_faults"): "one GPU link trained narrower (x8, x4) or at Gen3",
    ("mesh", "non_compute"): "traffic routed through the four non-compute cells",
}


def _faults_survived(results) -> list[str]:
    """Lines naming the fault experiments in ``results``: a result file exists
    only when every run of it ended with every byte checked, so each listed
    fault was survived; its bandwidth cost is in its own section."""
    table = [[f"{r.fabric}.{r.experiment}", FAULT_EXPERIMENTS[r.fabric, r.experiment],
              r.rows_met_text]
             for r in results if (r.fabric, r.experiment) in FAULT_EXPERIMENTS]
    if not table:
        return []
    lines = ["Faults the hardware tolerates: every run completed with every byte checked; "
             "the bandwidth cost is in each experiment's section.", ""]
    return lines + _md_table(["experiment", "fault", "rows met"], table) + [""]


BENCH_NAME = "bench.json"

#: What reading a malformed table file raises: a missing key, a wrong type, an
#: infinite number made an integer, a list where a table belongs, arrays
#: nested too deep for the JSON reader.
_MALFORMED = (ValueError, KeyError, TypeError, OverflowError, AttributeError, RecursionError)


def _present(path: Path, what: str) -> bool:
    """Whether the optional results file ``path`` (a ``what`` file) is there.

    Raises
    ------
    ValueError
        If ``path`` exists but is not a file (a folder, say).
    """
    if path.exists() and not path.is_file():
        raise ValueError(f"{path}: not {what} (it is a folder)")
    return path.exists()


def _bench_section(results_dir: Path) -> list[str]:
    """The simulation-speed table of ``results_dir / bench.json`` (written by
    ``make bench``), or nothing when there is none.

    Raises
    ------
    ValueError
        If the file is malformed; the message names the file and the key.
    """
    path = results_dir / BENCH_NAME
    if not _present(path, "a bench file"):
        return []
    try:
        bench = json.loads(path.read_text(encoding="utf-8"))
        rows = bench["rows"]
        table = [[str(r["top"]), str(r["simulator"]), f"{int(r['cycles']):,}",
                  f"{float(r['wall_s']):.2f}", f"{float(r['cycles_per_s']):,.0f}",
                  f"{float(r['ratio_to_bare']):.3f}", f"{float(r['build_s']):.0f}",
                  f"{float(r['peak_rss_mib']):.0f}"] for r in rows]
        targets = []
        for r in rows:
            if r["simulator"] == "verilator-cocotb":
                ratio, cycles = float(r["ratio_to_bare"]), int(r["cycles"])
                short = "" if cycles >= 1_000_000 else f", only {cycles:,} cycles"
                targets.append([f"cocotb at a quarter of the bare harness or more over a "
                                f"million cycles: {r['top']}{short}", f"{ratio:.3f}", ">= 0.25",
                                "not measured: a run under a million cycles" if short
                                else _met(ratio >= 0.25)])
        rss = max(float(r["peak_rss_mib"]) for r in rows if r["simulator"] != "amaranth-pysim")
        targets.append(["peak memory of one simulation (Verilator, Icarus)",
                        f"{rss:.0f} MiB", "< 4096 MiB", _met(rss < 4096)])
        report = bench.get("report")
        if report is not None:
            # The warm target is shown twice: with every cache warm, and
            # with the builds alone reused (every run simulated again).
            what = {"cold": "empty build folder",
                    "warm": "the build folder it left (builds and simulation results reused)",
                    "fresh": "builds reused, every run simulated again (`FRESH=1`)"}
            for kind, limit in (("cold", 15), ("warm", 3), ("fresh", 3)):
                if f"{kind}_s" not in report:     # bench files from before FRESH=1
                    continue
                minutes = float(report[f"{kind}_s"]) / 60
                ok = minutes <= limit and int(report[f"{kind}_exit"]) == 0
                targets.append([f"`make report`, {what[kind]}, {report['cpus']} CPUs "
                                f"(exit {report[f'{kind}_exit']})", f"{minutes:.1f} min",
                                f"<= {limit} min", _met(ok)])
        skipped = [f"- {k['top']}, {k['simulator']}: {k['reason']}"
                   for k in bench.get("skipped", [])]
    except _MALFORMED as error:
        raise ValueError(f"{path}: not a bench file ({type(error).__name__}: {error})") from None
    return (["## Simulation speed", "",
             "Simulated cycles per second of each top's main clock on one workload, "
             "measured in one `make bench` run; the bare harness is a C++ main around "
             "the Verilated top with no Python, the upper limit on this machine.", ""]
            + _md_table(["top", "simulator", "cycles", "wall s", "cycles/s", "ratio to bare",
                         "build s", "peak RSS MiB"], table) + [""]
            + (["Not measured:", "", *skipped, ""] if skipped else [])
            + _md_table(["target", "measured", "target", "met"], targets) + [""])


def _met(ok):
    return "yes" if ok else "**no**"


SYNTH_NAME = "synth.json"
SWEEP_DIR = "sweep"   #: results/sweep/: tables of `fabricsim sweep`


def _synth_section(results_dir: Path) -> tuple[list[str], dict[Path, bytes]]:
    """The FPGA table of ``results_dir / synth.json`` (written by ``make
    synth``) and a plot per synthesis sweep (``sweep/synth.<block>.json``):
    ``(lines, {plot path: PNG bytes})``, both empty when there is no file.

    Raises
    ------
    ValueError
        If a file is malformed; the message names the file and the key.
    """
    path = results_dir / SYNTH_NAME
    lines: list[str] = []
    plots: dict[Path, bytes] = {}
    if _present(path, "a synthesis file"):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
            table = [[str(r["block"]), str(r["device"]), _cell(str(r["config"])),
                      _count_text(r["luts"]), _count_text(r["ffs"]), _count_text(r["brams"]),
                      f"{float(r['fmax_mhz']):.1f}" if r["fmax_mhz"] else "—",
                      f"{float(r['target_mhz']):g}" if r.get("target_mhz") else "—",
                      str(r["status"]) if r["status"] == "ok"
                      else f"**{r['status']}**" + (f": {_cell(_clip(str(r['message']), 160))}"
                                                   if r.get("message") else "")]
                     for r in rows]
            versions = sorted({f"{k} {v}" for r in rows
                               for k, v in (r.get("tool_versions") or {}).items()})
            options = {}
            for r in rows:
                if r.get("nextpnr_options"):
                    options.setdefault(" ".join(map(str, r["nextpnr_options"])), []).append(
                        str(r["block"]))
        except _MALFORMED as error:
            raise ValueError(f"{path}: not a synthesis file ({type(error).__name__}: "
                             f"{error})") from None
        lines += ["## FPGA synthesis", "",
                  "Each block on its own (some at a reduced size: the configuration column gives "
                  "what was built) "
                  "and each fabric's top at a small configuration, "
                  "from the same Verilog the simulators run, synthesised by Yosys and placed "
                  "and routed by nextpnr (`make synth`); LUTs, flip-flops, block RAMs and "
                  "Fmax are the tools' own figures. ECP5 rows are placed out of context "
                  "(ports are internal nets). Tools: " + "; ".join(versions) + ".", ""]
        lines += _md_table(["block", "device", "configuration", "LUTs", "FFs", "BRAMs",
                            "Fmax MHz", "target MHz", "status"], table) + [""]
        lines += [f"nextpnr ran with `{text}` (for large designs: faster, at some cost in "
                  f"Fmax) on {', '.join(blocks)}." for text, blocks in options.items()]
        lines += [""] if options else []
    # each block's untagged sweep first, then its tagged ones (synth.BLOCK.TAG)
    for sweep_path in sorted((results_dir / SWEEP_DIR).glob("synth.*.json"),
                             key=lambda p: (p.stem.split(".")[1], p.stem.count("."), p.stem)):
        try:
            sweep = json.loads(sweep_path.read_text(encoding="utf-8"))
            # The block's name becomes a file name; the grid names the swept field.
            if not re.fullmatch(r"[A-Za-z0-9_]+", str(sweep["experiment"])):
                raise ValueError(f"key 'experiment' must be a block name, not "
                                 f"{sweep['experiment']!r}")
            if not (isinstance(sweep["grid"], dict) and sweep["grid"]):
                raise ValueError(f"key 'grid' must be a table of the swept field, not "
                                 f"{sweep['grid']!r}")
            tag = sweep.get("tag")
            if tag is not None and not (isinstance(tag, str) and TAG_PATTERN.fullmatch(tag)):
                raise ValueError(f"key 'tag' must be letters, digits, '_' or '-', not {tag!r}")
            field = next(iter(sweep["grid"]))
            png = _render_synth_sweep(sweep)
        except (*_MALFORMED, IndexError) as error:
            raise ValueError(f"{sweep_path}: not a synthesis sweep ({type(error).__name__}: "
                             f"{error})") from None
        if png is None:
            continue
        tagged = "" if tag is None else f".{tag}"
        plot = results_dir / f"synth_sweep_{sweep['experiment']}{tagged}.png"
        plots[plot] = png
        if not lines:
            lines += ["## FPGA synthesis", ""]
        lines += [f"Area and clock of `{sweep['experiment']}` against `{field}` "
                  f"(`fabricsim sweep synth.{sweep['experiment']}"
                  + ("" if tag is None else f" --tag {tag}")
                  + f"`, {sweep['simulator']}):", "",
                  f"![{sweep['experiment']} synthesis sweep]({plot.name})", ""]
    return lines, plots


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _count_text(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


def _render_synth_sweep(sweep: Mapping[str, Any]) -> bytes | None:
    """Two panels against the sweep's first grid field: LUTs and flip-flops,
    and Fmax; ``None`` when no point has figures."""
    field = next(iter(sweep["grid"]))
    from sim.cli import _number

    typed = [str(v) for v in sweep["grid"][field]]
    try:
        # a value as typed on the command line and read as --set reads it: 32, 0x20, 1.5
        at, labels = {v: float(_number(v)) for v in typed}, None
    except ValueError:
        # a tuple or string field: its values in grid order, named on the axis
        at, labels = {v: float(i) for i, v in enumerate(typed)}, typed
    series: dict[str, list[tuple[float, float]]] = {}
    for r in sweep["rows"]:
        if "error" in r or r.get("model") is None:
            continue
        series.setdefault(r["quantity"], []).append((at[str(r["point"][field])],
                                                     float(r["model"])))
    if not series:
        return None
    fig = Figure(figsize=(8.4, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    area, clock = fig.subplots(1, 2)
    for quantity in ("LUTs", "flip-flops"):
        pts = sorted(series.get(quantity, []))
        if pts:
            area.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=quantity)
    area.set_xlabel(field)
    area.set_ylabel("count")
    area.legend(fontsize=8)
    area.grid(True, alpha=0.3)
    pts = sorted(series.get("Fmax", []))
    clock.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color="tab:red")
    clock.set_xlabel(field)
    clock.set_ylabel("Fmax (MHz)")
    clock.grid(True, alpha=0.3)
    for ax in (area, clock):
        # from zero, so that a 1 % change does not fill the panel
        ax.set_ylim(bottom=0)
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, fontsize=7)
    tag = f" (--tag {sweep['tag']})" if sweep.get("tag") else ""
    fig.suptitle(f"{sweep['experiment']}{tag} on {sweep['simulator']}", fontsize=9)
    return _png(fig)


PROOFS_NAME = "proofs.json"
RANDOM_NAME = "random.json"


def _make(results_dir: Path, target: str) -> str:
    """The make command whose ``target`` writes into ``results_dir``:
    ``make TARGET``, with ``RESULTS=`` naming the folder unless it is the
    Makefile's default, ``results/`` of the working folder."""
    here, folder = Path.cwd().resolve(), Path(results_dir).resolve()
    if folder == here / "results":
        return f"make {target}"
    shown = folder.relative_to(here) if folder.is_relative_to(here) else folder
    return f"make {target} RESULTS={shlex.quote(str(shown))}"


def _verification_section(results_dir: Path) -> list[str]:
    """The report's verification section: the bounded proofs of
    ``results_dir / proofs.json`` (written by ``python -m sim.prove``) and the
    random traffic of ``results_dir / random.json`` (written by ``python -m
    sim.random_traffic``), or a line for each saying how to run it.

    Raises
    ------
    ValueError
        If a file is malformed; the message names the file and the key.
    """
    lines = ["## Verification", ""]
    path = results_dir / PROOFS_NAME
    if not _present(path, "a proofs file"):
        lines += [f"No bounded proofs in this folder: `{_make(results_dir, 'prove')}` "
                  "writes them.", ""]
    else:
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
            table = [[str(r["proof"]), str(r["block"]), str(r["property"]),
                      str(int(r["depth"])), "✓" if r["passed"] is True else "✗"] for r in rows]
        except _MALFORMED as error:
            raise ValueError(f"{path}: not a proofs file ({type(error).__name__}: {error})") \
                from None
        passed = sum(row[-1] == "✓" for row in table)
        lines += [f"Bounded proofs (Yosys SAT over the stated number of cycles from reset): "
                  f"{passed} / {len(table)} passed.", ""]
        lines += _md_table(["proof", "block", "property", "depth (cycles)", "passed"], table)
        lines += [""]
    path = results_dir / RANDOM_NAME
    if not _present(path, "a random-traffic file"):
        return lines + ["No random-traffic results in this folder: "
                        f"`{_make(results_dir, 'report')}` runs `python -m "
                        "sim.random_traffic`, which writes them.", ""]
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        table = [[str(r["fabric"]), str(r["simulator"]),
                  ", ".join(str(int(s)) for s in r["seeds"]), str(int(r["runs"])),
                  str(int(r["transfers"])), str(int(r["checked_bytes"])),
                  "✓" if r["passed"] is True else f"✗ ({len(r['failures'])} runs failed)"]
                 for r in rows]
    except _MALFORMED as error:
        raise ValueError(f"{path}: not a random-traffic file ({type(error).__name__}: {error})") \
            from None
    passed = sum(row[-1] == "✓" for row in table)
    lines += [f"Seeded constrained-random traffic (every byte, TLP payload or register checked "
              f"at its destination): {passed} / {len(table)} fabric and simulator pairs "
              f"passed. Transfers are DSM payloads, PCIe TLPs the GPUs sent (writes, read "
              f"requests and completions) and ET-SoC-1 messages and credits.",
              ""]
    lines += _md_table(["fabric", "simulator", "seeds", "runs", "transfers", "bytes checked",
                        "passed"], table)
    return lines + [""]


def print_summary(results_dir: Path, *, console: Console | None = None) -> bool:
    """Print the per-experiment summary and any missed rows to the console.

    Parameters
    ----------
    results_dir : Path
        Directory holding ``<fabric>/<experiment>.json``.
    console : rich.console.Console, optional
        Where to print; a new stdout console by default.

    Returns
    -------
    bool
        True when every row with a target is met and every row was measured.

    Raises
    ------
    FileNotFoundError
        If ``results_dir`` does not exist or holds no result files.
    ValueError
        If a result file is malformed; the message names the file and the key.
    """
    results = load_results(Path(results_dir))
    if console is None:
        from sim.cli import wide_console
        console = wide_console()

    table = Table(title=f"fabricsim results ({results_dir})")
    table.add_column("fabric")
    table.add_column("experiment")
    table.add_column("title")
    table.add_column("rows met", justify="right")
    table.add_column("status", justify="center")
    for r in results:
        status = _status(r)
        style = {"✓": "green", "✗": "bold red"}.get(status, "dim")
        # Titles and names come from result files; escape so "[...]" is not read as markup.
        table.add_row(
            escape(r.fabric), escape(r.experiment),
            escape(r.title + WHAT_IF_MARK * bool(r.what_if)), r.rows_met_text,
            f"[{style}]{status}[/]"
        )
    console.print(table)

    missed = [(r, row) for r in results for row in r.rows if not row.passes]
    for r, row in missed:
        if row.reference_range is not None:
            seed = f"{format_range(row.reference_range)} {row.unit} (target {_target_text(row)})"
        else:
            error = _error_cell(row)
            seed = (f"{format_number(row.reference)} {row.unit} "
                    f"({error}{'' if error.endswith('pp') else '%'}, "
                    f"target {_target_text(row)})")
        detail = (f"{r.fabric}/{r.experiment}{WHAT_IF_MARK * bool(r.what_if)}: "
                  f"{row.quantity} model "
                  f"{format_number(row.model)} vs seed {seed}")
        console.print(
            f"[bold red]✗[/] {escape(detail)}",
            markup=True,
            highlight=False,
        )
    console.print(_rows_text([row for r in results for row in r.rows], met_sentence))
    if missed:
        # the notes are written for the seed's configuration, not a what-if's
        known = "; ".join(
            ([] if all(r.what_if for r, _ in missed) else
             ["the experiment's notes in the report say what is known of it"])
            + ([] if not any(r.what_if for r, _ in missed) else
               ["a what-if's rows compare the changed model with the seed's hardware as "
                "built"]))
        console.print("A missed row is a target the model does not meet, not a failed run "
                      f"(every run finished and its data checked out): {known}.")
    return not missed
