"""Tests for the ET-SoC-1 shire placement search of `sim.etsoc_placement`.

The constraints come from seed 002 ("What it means for systolic and wavefront
designs", bullet "Order chains by the map, not by shire ID"): the printed ring
moves one hop per step, and shires 0..31 in ID order average 3.3 hops (max 8),
3.5 hops (max 10) when closed from 31 back to 0.
"""

import pytest

from sim.etsoc_placement import RING, default_placement, non_compute_cells, ring_stats, search


@pytest.fixture(scope="module")
def placement():
    return default_placement()


def test_ring_is_the_seeds_and_covers_every_shire():
    assert len(RING) == 32
    assert sorted(RING) == list(range(32))
    assert RING[:4] == (0, 24, 9, 25) and RING[-3:] == (4, 3, 8)


def test_32_distinct_cells_inside_the_grid(placement):
    assert len(placement) == 32
    assert len(set(placement)) == 32
    assert all(0 <= x < 6 and 0 <= y < 6 for x, y in placement)


def test_every_ring_step_is_one_hop(placement):
    for a, b in zip(RING, RING[1:] + RING[:1]):
        (xa, ya), (xb, yb) = placement[a], placement[b]
        assert abs(xa - xb) + abs(ya - yb) == 1, (a, b)
    assert ring_stats(placement)["ring_max_step"] == 1


def test_sequential_boundaries(placement):
    st = ring_stats(placement)
    assert round(st["sequential_mean"], 1) == 3.3
    assert st["sequential_max"] == 8


def test_closed_boundaries(placement):
    st = ring_stats(placement)
    assert round(st["closed_mean"], 1) == 3.5
    assert st["closed_max"] == 10


def test_four_non_compute_cells(placement):
    free = non_compute_cells(placement)
    assert len(free) == 4
    assert not set(free) & set(placement)


def test_deterministic():
    assert default_placement() == default_placement()
    assert search() == search()
    assert search()[0] == default_placement()


def test_grid_too_small_raises():
    with pytest.raises(ValueError):
        search(cols=3, rows=3)


def test_help_describes_the_search_without_running_it():
    """``python -m sim.etsoc_placement --help`` prints its usage at once."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "sim.etsoc_placement", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: python -m sim.etsoc_placement" in done.stdout
    assert "Default placement" not in done.stdout
