"""Affine size-slope fit used to turn elapsed-cycle sweeps into bandwidths.

The Hopper DSM study (seed ``000_8cf2435219a2167b.txt``, section "What Exactly
Do I Mean by Bandwidth?") does not divide payload by elapsed time at a single
size, because the timed interval also holds fill, drain, synchronisation and
completion costs that barely depend on payload. Instead it takes the median
elapsed cycles at each payload size (16 to 96 KiB per active SM), fits

    elapsed = alpha + beta * B

by least squares, and reads ``1 / beta`` as the sustained bandwidth in bytes
per cycle. Fit quality is quoted as the RMSE of the residuals as a percentage
of the fitted time increase across the sweep, ``beta * (B_max - B_min)``. This
module implements exactly that fit so that simulated sweeps are reduced the same
way as the measured ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AffineFit", "fit_affine", "error_pct", "reference_is_bound", "row_error_pct",
           "median"]


@dataclass(frozen=True)
class AffineFit:
    """Result of fitting ``elapsed_cycles = alpha + beta * payload_bytes``.

    Parameters
    ----------
    alpha_cycles : float
        Intercept in cycles: the payload-independent fill, drain and completion
        cost. It is not a separately measured latency.
    beta_cycles_per_byte : float
        Slope in cycles per byte: the steady incremental cost of one more byte.
    rmse_pct : float
        Root-mean-square residual, in percent of the fitted time increase
        ``beta * (B_max - B_min)`` across the swept payload sizes.
    residuals_cycles : tuple of float
        Measured minus fitted elapsed cycles, one per input point, in input
        order.
    """

    alpha_cycles: float
    beta_cycles_per_byte: float
    rmse_pct: float
    residuals_cycles: tuple[float, ...]

    @property
    def bytes_per_cycle(self) -> float:
        """Sustained bandwidth ``1 / beta`` in bytes per cycle.

        Returns
        -------
        float
            Bytes per cycle per active agent (per SM, or per direction in a
            symmetric two-agent test).

        Raises
        ------
        ZeroDivisionError
            If ``beta_cycles_per_byte`` is zero, which `fit_affine` never
            produces.
        """
        return 1.0 / self.beta_cycles_per_byte

    def predict(self, payload_bytes: float) -> float:
        """Fitted elapsed time for a payload.

        Parameters
        ----------
        payload_bytes : float
            Payload in bytes.

        Returns
        -------
        float
            ``alpha + beta * payload_bytes`` in cycles.
        """
        return self.alpha_cycles + self.beta_cycles_per_byte * payload_bytes

    def to_json(self) -> dict[str, float]:
        """Serialisable summary of the fit, as stored in results files.

        Residuals are left out because they can be recomputed from the stored
        points and would otherwise duplicate them.

        Returns
        -------
        dict
            ``{"alpha_cycles": cycles, "beta_cycles_per_byte": cycles/byte,
            "rmse_pct": percent}`` with plain Python floats.
        """
        return {
            "alpha_cycles": float(self.alpha_cycles),
            "beta_cycles_per_byte": float(self.beta_cycles_per_byte),
            "rmse_pct": float(self.rmse_pct),
        }


def fit_affine(payload_bytes: Sequence[int], cycles: Sequence[float]) -> AffineFit:
    """Least-squares fit of ``cycles = alpha + beta * payload_bytes``.

    Pass one (median) elapsed time per payload size to reproduce the seed's
    procedure; repeated sizes are accepted and simply weighted as extra points.

    Parameters
    ----------
    payload_bytes : sequence of int
        Payload per active agent, in bytes. Must be non-negative and finite.
    cycles : sequence of float
        Elapsed time for each payload, in cycles. Same length as
        ``payload_bytes``.

    Returns
    -------
    AffineFit
        Intercept (cycles), slope (cycles/byte), RMSE as a percentage of
        ``beta * (max(payload_bytes) - min(payload_bytes))``, and residuals
        (cycles) in input order.

    Raises
    ------
    ValueError
        If the lengths differ, a value is not finite, a payload is negative,
        fewer than two distinct payload sizes are given, or the fitted slope is
        not positive or rises by under one cycle across the sizes (time must
        grow with payload for a bandwidth to exist).
    """
    if len(payload_bytes) != len(cycles):
        raise ValueError(
            f"payload_bytes and cycles must have the same length, "
            f"not {len(payload_bytes)} and {len(cycles)}"
        )
    x = np.asarray(payload_bytes, dtype=float)
    y = np.asarray(cycles, dtype=float)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("payload_bytes and cycles must all be finite numbers")
    if np.any(x < 0):
        raise ValueError(f"payload_bytes must be non-negative, not {x.min():g}")
    distinct = np.unique(x)
    if distinct.size < 2:
        raise ValueError(
            f"need at least 2 distinct payload sizes to fit a slope, not {distinct.size}"
        )

    # Vandermonde lstsq rather than polyfit so the coefficient order is explicit.
    design = np.column_stack([np.ones_like(x), x])
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    if not beta > 0:
        raise ValueError(
            f"fitted slope beta must be positive, not {beta:.6g} cycles/byte; "
            "elapsed cycles do not grow with payload"
        )

    residuals = y - (alpha + beta * x)
    rmse = math.sqrt(float(np.mean(residuals**2)))
    # The seed normalises by the fitted rise across the sweep, not by the mean
    # elapsed time, so a large fixed intercept cannot hide a poor slope fit.
    fitted_rise = beta * float(distinct[-1] - distinct[0])
    if fitted_rise < 1.0 and not math.isclose(fitted_rise, 1.0, rel_tol=1e-9):
        # Counted cycles are integers: a rise under one cycle is rounding
        # noise (sizes that fill the same flits), not a bandwidth.  A rise
        # of one cycle may come out of the least squares as 0.999...
        raise ValueError(
            f"elapsed cycles rise by {fitted_rise:.3g} across the payload sizes, under one "
            "cycle: the sizes do not differ in what the model moves"
        )
    return AffineFit(
        alpha_cycles=float(alpha),
        beta_cycles_per_byte=float(beta),
        rmse_pct=100.0 * rmse / fitted_rise,
        residuals_cycles=tuple(float(r) for r in residuals),
    )


def error_pct(model: float, reference: float) -> float:
    """Signed relative error of a model value against a reference, in percent.

    Parameters
    ----------
    model : float
        Value produced by the simulation, in any unit.
    reference : float
        Published value in the same unit.

    Returns
    -------
    float
        ``100 * (model - reference) / reference``; positive when the model is
        above the reference.

    Raises
    ------
    ValueError
        If ``reference`` is zero or either value is not finite.
    """
    if not (math.isfinite(model) and math.isfinite(reference)):
        raise ValueError(f"model and reference must be finite, not {model!r} and {reference!r}")
    if reference == 0:
        raise ValueError("reference must be non-zero to compute a relative error")
    return 100.0 * (model - reference) / reference


def reference_is_bound(reference: float | None, *, minimum: float | None = None,
                       maximum: float | None = None,
                       tolerance_pct: float | None = None) -> bool:
    """True when a result row's seed value is only its one-sided bound.

    That is, no tolerance around ``reference`` and ``maximum == reference``
    with no ``minimum``, or the reverse: a seed's worst case the model must
    stay within, such as seed 002's worst credit-fit residual of 15 cycles.
    The distance from such a ceiling is not an error, so the row shows none
    and is judged by the bound alone.

    Parameters
    ----------
    reference : float or None
        The seed's value, in the row's unit.
    minimum, maximum : float or None
        The row's bounds on the model, in the same unit.
    tolerance_pct : float or None
        The row's tolerance around ``reference``, in percent.

    Returns
    -------
    bool
        Whether the row shows no error % against ``reference``.
    """
    return reference is not None and tolerance_pct is None and (
        (maximum == reference and minimum is None) or (minimum == reference and maximum is None))


def row_error_pct(model: float | None, reference: float | None, *,
                  minimum: float | None = None, maximum: float | None = None,
                  tolerance_pct: float | None = None) -> float | None:
    """The error % a result row shows: :func:`error_pct` of ``model`` against
    the seed's ``reference``, or None where there is none to give: either
    value missing, a zero reference, or a reference that is only the row's
    bound (:func:`reference_is_bound`, which takes the other parameters).

    Parameters
    ----------
    model, reference : float or None
        The model's value and the seed's, in the row's unit.
    minimum, maximum : float or None
        The row's bounds on ``model``, in the same unit.
    tolerance_pct : float or None
        The row's tolerance around ``reference``, in percent.

    Returns
    -------
    float or None
        ``100 * (model - reference) / reference``, or None as above.

    Raises
    ------
    ValueError
        If a value given is not finite.
    """
    if model is None or reference is None or reference == 0 or reference_is_bound(
            reference, minimum=minimum, maximum=maximum, tolerance_pct=tolerance_pct):
        return None
    return error_pct(model, reference)


def median(values: Iterable[float]) -> float:
    """Median of repeated measurements, as the seed takes per payload size.

    Parameters
    ----------
    values : iterable of float
        Samples in any unit (typically elapsed cycles or nanoseconds).

    Returns
    -------
    float
        The median, in the unit of ``values``; the mean of the two middle
        samples for an even count.

    Raises
    ------
    ValueError
        If ``values`` is empty or holds a non-finite value.
    """
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        raise ValueError("median of an empty sequence is undefined")
    if not np.all(np.isfinite(data)):
        raise ValueError("median values must all be finite numbers")
    return float(np.median(data))
