"""Tests for the affine size-slope fit of `sim.fit`.

The fit and its RMSE definition follow the seed's "What Exactly Do I Mean by
Bandwidth?" section; expected values here are worked out by hand.
"""

import math

import pytest

from sim.fit import AffineFit, error_pct, fit_affine, median, reference_is_bound, row_error_pct

KIB = 1024
# The seed's sweep: 16 to 96 KiB in 8-KiB steps, 11 points.
SEED_SWEEP = [k * KIB for k in range(16, 97, 8)]


def test_exact_data_recovers_alpha_and_beta():
    alpha, beta = 1101.0, 1 / 19.87
    fit = fit_affine(SEED_SWEEP, [alpha + beta * b for b in SEED_SWEEP])
    assert fit.alpha_cycles == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_cycles_per_byte == pytest.approx(beta, rel=1e-12)
    assert fit.bytes_per_cycle == pytest.approx(19.87, rel=1e-9)
    assert fit.rmse_pct == pytest.approx(0.0, abs=1e-9)
    assert len(fit.residuals_cycles) == len(SEED_SWEEP)
    assert max(abs(r) for r in fit.residuals_cycles) < 1e-6


def test_rmse_pct_for_known_residual_pattern():
    # Residuals d * (1, -2, 1) are orthogonal to both [1, B] columns at evenly
    # spaced sizes, so least squares leaves alpha and beta untouched and returns
    # them as the residuals. RMSE = d * sqrt((1 + 4 + 1) / 3) = d * sqrt(2).
    # Fitted rise = beta * (3000 - 1000) = 0.05 * 2000 = 100 cycles.
    alpha, beta, d = 500.0, 0.05, 1.0
    sizes = [1000, 2000, 3000]
    pattern = [d, -2 * d, d]
    fit = fit_affine(sizes, [alpha + beta * b + r for b, r in zip(sizes, pattern)])
    assert fit.alpha_cycles == pytest.approx(alpha)
    assert fit.beta_cycles_per_byte == pytest.approx(beta)
    assert fit.residuals_cycles == pytest.approx(tuple(pattern), abs=1e-9)
    assert fit.rmse_pct == pytest.approx(100 * math.sqrt(2) / 100)  # 1.41421 %


def test_rmse_normalised_by_fitted_rise_not_elapsed_time():
    # Same residuals with a huge intercept: the percentage must not shrink,
    # because the seed divides by beta * (B_max - B_min), not by elapsed time.
    sizes = [1000, 2000, 3000]
    small = fit_affine(sizes, [500 + 0.05 * b + r for b, r in zip(sizes, [1, -2, 1])])
    large = fit_affine(sizes, [1e6 + 0.05 * b + r for b, r in zip(sizes, [1, -2, 1])])
    assert large.rmse_pct == pytest.approx(small.rmse_pct, rel=1e-6)


def test_to_json_has_exactly_the_stored_keys():
    fit = AffineFit(alpha_cycles=10.0, beta_cycles_per_byte=0.5, rmse_pct=1.25, residuals_cycles=(0.1, -0.1))
    assert fit.to_json() == {"alpha_cycles": 10.0, "beta_cycles_per_byte": 0.5, "rmse_pct": 1.25}
    assert fit.bytes_per_cycle == 2.0
    assert fit.predict(4) == 12.0


@pytest.mark.parametrize(
    ("payloads", "cycles", "message"),
    [
        ([1024, 2048], [10.0], r"same length, not 2 and 1"),
        ([4096, 4096, 4096], [10.0, 11.0, 12.0], r"at least 2 distinct payload sizes.*not 1"),
        ([4096], [10.0], r"at least 2 distinct payload sizes"),
        ([], [], r"at least 2 distinct payload sizes.*not 0"),
        ([1024, 2048, 3072], [300.0, 200.0, 100.0], r"beta must be positive"),
        ([1024, 2048], [100.0, 100.0], r"beta must be positive"),
        ([16, 32], [57.0, 57.0 + 1e-9], r"rise by 1e-09 .* under one cycle"),
        ([1024, 2048], [100.0, float("nan")], r"must all be finite"),
        ([-1024, 2048], [100.0, 200.0], r"non-negative"),
    ],
)
def test_bad_input_raises_one_line_value_error(payloads, cycles, message):
    with pytest.raises(ValueError, match=message) as info:
        fit_affine(payloads, cycles)
    assert "\n" not in str(info.value)


def test_error_pct_sign_and_value():
    assert error_pct(19.7, 19.87) == pytest.approx(-0.85556, abs=1e-4)
    assert error_pct(15.37 * 1.1, 15.37) == pytest.approx(10.0)


def test_error_pct_rejects_zero_reference():
    with pytest.raises(ValueError, match="reference must be non-zero"):
        error_pct(1.0, 0.0)


def test_row_error_pct_none_against_a_bound():
    # seed 002's worst credit-fit residual is a ceiling, not a value to match
    assert reference_is_bound(15, maximum=15)
    assert reference_is_bound(0.0, minimum=0.0)
    assert row_error_pct(0.49, 15, maximum=15) is None
    assert not reference_is_bound(15, maximum=15, tolerance_pct=5.0)
    assert not reference_is_bound(3.3, minimum=3.25, maximum=3.35)
    assert not reference_is_bound(11.0, minimum=0.0)
    assert row_error_pct(16.5, 15, maximum=15, tolerance_pct=20.0) == pytest.approx(10.0)
    assert row_error_pct(3.3, 3.3, minimum=3.25, maximum=3.35) == 0.0
    assert row_error_pct(None, 15) is None
    assert row_error_pct(1.0, None) is None
    assert row_error_pct(1.0, 0.0) is None


def test_median_even_and_odd_and_empty():
    assert median([3, 1, 2]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError, match="empty"):
        median([])


def test_a_rise_of_one_cycle_is_a_rise_despite_rounding():
    """Sizes one flit apart that differ by one counted cycle fit, though the
    least squares gives a rise of 0.999... cycles."""
    fit = fit_affine([32, 64], [100, 101])
    assert fit.beta_cycles_per_byte == pytest.approx(1 / 32)
    with pytest.raises(ValueError, match="under one cycle"):
        fit_affine([32, 64], [100, 100.5])
