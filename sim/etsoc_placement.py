"""Logical placement of the ET-SoC-1's 32 compute shires on its 6x6 mesh.

The ET-SoC-1 study (seed ``002_ef78cf597185d0e6.txt``) maps the 32 compute
shires onto a 6x6 mesh but prints the map only as a chart. What the text does
pin down is in the section "What it means for systolic and wavefront designs",
bullet "Order chains by the map, not by shire ID":

* the ring `RING` moves exactly one mesh hop at every step, including the
  closing step back to its start;
* stepping through shires 0, 1, ..., 31 averages 3.3 hops per boundary with a
  maximum of 8; closing the sequence from 31 back to 0 gives 3.5 and 10.

The seed's values (the ring, 3.3, 8, 3.5 and 10) are read from
``sim/reference/mesh.toml`` (``[placement.*]``), where ``mesh.round_trip``'s
rows find them too.

Hops are Manhattan distances on the grid: "What the numbers say", item 1, finds
that routes are shortest paths through all 36 cells, the four non-compute
cells (master, spare, PCIe and I/O shires) included.

`search` enumerates every placement that meets these constraints with a
depth-first walk along the ring, shire 0 fixed at (0, 0). Because the closing
boundary 31 -> 0 is 10 hops on a 6x6 grid, shires 0 and 31 sit in opposite
corners, so fixing shire 0 removes the rotations and all but one reflection:
each placement still appears together with its mirror image in the diagonal
x = y. Run this module to print the default placement.
"""

from __future__ import annotations

from functools import lru_cache

from sim.experiments import load_reference

__all__ = ["RING", "N_SHIRES", "search", "default_placement", "hop_stats", "ring_stats",
           "non_compute_cells"]

Cell = tuple[int, int]
Placement = tuple[Cell, ...]

# Seed 002, "What it means for systolic and wavefront designs", bullet "Order
# chains by the map, not by shire ID", from sim/reference/mesh.toml
# ([placement.*]): "This ring through all 32 compute shires moves one hop at
# every step: 0 24 9 25 ... 4 3 8, and back to 0."
_SEED = load_reference("mesh")["placement"]
RING: tuple[int, ...] = tuple(_SEED["ring"]["shires"])
N_SHIRES = 32

# Same bullet: "Stepping through shires 0, 1, 2, ... 31 averages 3.3 hops per
# boundary and up to 8 (3.5 and up to 10 if the ring closes from 31 back to 0)."
SEQUENTIAL_MEAN, SEQUENTIAL_MAX = (_SEED["sequential_mean"]["value"],
                                   _SEED["sequential_max"]["value"])
CLOSED_MEAN, CLOSED_MAX = _SEED["closed_mean"]["value"], _SEED["closed_max"]["value"]


def _hops(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def ring_stats(placement: Placement) -> dict[str, float]:
    """Hop statistics of a placement, all in mesh hops (Manhattan distance).

    Parameters
    ----------
    placement : sequence of (x, y)
        Cell of each shire, indexed by shire ID (32 entries).

    Returns
    -------
    dict
        ``ring_max_step`` / ``ring_min_step``: the largest and the smallest
        hop count between neighbours on `RING`, closing step included (1 for
        a valid placement);
        ``sequential_mean`` / ``sequential_max``: mean and maximum over the 31
        boundaries 0 -> 1, ..., 30 -> 31;
        ``closed_mean`` / ``closed_max``: the same over 32 boundaries, adding
        31 -> 0. Means are unrounded floats, maxima ints.

    Raises
    ------
    ValueError
        If `placement` does not have 32 entries.
    """
    if len(placement) != N_SHIRES:
        raise ValueError(f"placement: expected {N_SHIRES} cells, got {len(placement)}")
    return hop_stats(lambda a, b: _hops(placement[a], placement[b]))


def hop_stats(distance) -> dict[str, float]:
    """The statistics of :func:`ring_stats` for any distance between shires.

    Parameters
    ----------
    distance : callable
        ``distance(a, b)``: hops from shire ID ``a`` to ``b`` (0 to 31), a
        Manhattan distance on a placement or hops read off round trips.

    Returns
    -------
    dict
        The keys of :func:`ring_stats`; with float distances every value is
        a float, the maxima and minimum included.

    Raises
    ------
    Exception
        Whatever ``distance`` raises (a ``KeyError`` for a pair it lacks, say).
    """
    ring = [distance(a, b) for a, b in zip(RING, RING[1:] + RING[:1])]
    seq = [distance(s, s + 1) for s in range(N_SHIRES - 1)]
    closed = seq + [distance(N_SHIRES - 1, 0)]
    return {
        "ring_max_step": max(ring),
        "ring_min_step": min(ring),
        "sequential_mean": sum(seq) / len(seq),
        "sequential_max": max(seq),
        "closed_mean": sum(closed) / len(closed),
        "closed_max": max(closed),
    }


def _meets_seed(placement: Placement) -> bool:
    st = ring_stats(placement)
    return (
        st["ring_max_step"] == 1
        and round(st["sequential_mean"], 1) == SEQUENTIAL_MEAN
        and st["sequential_max"] == SEQUENTIAL_MAX
        and round(st["closed_mean"], 1) == CLOSED_MEAN
        and st["closed_max"] == CLOSED_MAX
    )


def _check_grid(cols: int, rows: int) -> None:
    # A closed one-hop ring needs a grid at least 2 wide in both directions.
    if cols < 2:
        raise ValueError(f"cols={cols}: a closed ring needs at least 2 columns")
    if rows < 2:
        raise ValueError(f"rows={rows}: a closed ring needs at least 2 rows")
    if cols * rows < N_SHIRES:
        raise ValueError(f"cols={cols}, rows={rows}: {cols * rows} cells cannot hold {N_SHIRES} shires")


@lru_cache(maxsize=None)
def _search(cols: int, rows: int) -> tuple[Placement, ...]:
    cells = [(x, y) for y in range(rows) for x in range(cols)]
    nbrs = {
        (x, y): [(x + dx, y + dy) for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1))
                 if 0 <= x + dx < cols and 0 <= y + dy < rows]
        for x, y in cells
    }
    origin = (0, 0)
    last = N_SHIRES - 1
    # The sequential maximum (8) is below the closed one (10), so the 10-hop
    # boundary is 31 -> 0: shire 31 sits exactly CLOSED_MAX hops from shire 0
    # (on 6x6, the opposite corner).
    far = [c for c in cells if _hops(c, origin) == CLOSED_MAX]
    if not far:
        return ()
    i_last = RING.index(last)
    pos: list[Cell | None] = [None] * N_SHIRES
    used: set[Cell] = set()
    found: list[Placement] = []

    def fits(i: int, cell: Cell) -> bool:
        # Necessary conditions, checked as soon as a shire is placed at ring
        # index i: the walk can still get back to shire 0 and reach a cell for
        # shire 31 in time, and no boundary s -> s+1 already exceeds 8 hops.
        shire = RING[i]
        if _hops(cell, origin) > N_SHIRES - i:
            return False
        if i < i_last and min(_hops(cell, t) for t in far) > i_last - i:
            return False
        if shire == last and cell not in far:
            return False
        return all(
            pos[s] is None or _hops(cell, pos[s]) <= SEQUENTIAL_MAX
            for s in (shire - 1, shire + 1) if 0 <= s <= last
        )

    def walk(i: int) -> None:
        here = pos[RING[i - 1]]
        if i == N_SHIRES:
            placement = tuple(pos)
            if _hops(here, origin) == 1 and _meets_seed(placement):
                found.append(placement)
            return
        for cell in nbrs[here]:
            if cell in used or not fits(i, cell):
                continue
            pos[RING[i]] = cell
            used.add(cell)
            walk(i + 1)
            used.remove(cell)
            pos[RING[i]] = None

    pos[RING[0]] = origin
    used.add(origin)
    walk(1)
    return tuple(sorted(found))


def search(cols: int = 6, rows: int = 6) -> list[Placement]:
    """Every placement of the 32 compute shires that meets the seed's constraints.

    Shire 0 is fixed at (0, 0). A placement meets the constraints when every
    step of `RING` (closing step included) is 1 hop, the boundaries 0 -> 1 ...
    30 -> 31 average 3.3 hops (rounded to one decimal) with a maximum of 8, and
    adding 31 -> 0 gives 3.5 hops and a maximum of 10.

    Parameters
    ----------
    cols, rows : int
        Mesh size in cells; cells are (x, y) with 0 <= x < cols, 0 <= y < rows.

    Returns
    -------
    list of tuple of (x, y)
        Each placement is a tuple indexed by shire ID. The list is sorted
        lexicographically (by the cell of shire 0, then shire 1, ...), so the
        order does not depend on the search order. Mirror images in the
        diagonal x = y both appear.

    Raises
    ------
    ValueError
        If `cols` or `rows` is below 2 or the grid has fewer than 32 cells.
    """
    _check_grid(cols, rows)
    return list(_search(cols, rows))


def default_placement() -> Placement:
    """The placement used by the model: the first solution of `search()` on 6x6.

    The seed does not pin down a single placement (its map is only drawn), so
    the tie-break is the lexicographic order of `search`: the smallest
    placement when read as the (x, y) cells of shire 0, 1, 2, ... in turn.
    Which four cells the non-compute shires take follows from that choice
    (see `non_compute_cells`).

    Returns
    -------
    tuple of (x, y)
        Cell of each compute shire, indexed by shire ID.

    Raises
    ------
    RuntimeError
        If the search finds no placement (it finds several hundred on 6x6).
    """
    solutions = _search(6, 6)
    if not solutions:
        raise RuntimeError("no placement meets the seed's ring constraints")
    return solutions[0]


def non_compute_cells(placement: Placement, cols: int = 6, rows: int = 6) -> tuple[Cell, ...]:
    """Cells that hold no compute shire (master, spare, PCIe and I/O shires).

    Parameters
    ----------
    placement : sequence of (x, y)
        Cell of each compute shire, indexed by shire ID.
    cols, rows : int
        Mesh size in cells.

    Returns
    -------
    tuple of (x, y)
        The free cells in row-major order (y, then x); 4 on a 6x6 mesh.

    Raises
    ------
    ValueError
        If `cols` or `rows` is below 2 or the grid has fewer than 32 cells.
    """
    _check_grid(cols, rows)
    taken = set(placement)
    return tuple((x, y) for y in range(rows) for x in range(cols) if (x, y) not in taken)


def _format_grid(placement: Placement, cols: int = 6, rows: int = 6) -> str:
    at = {cell: shire for shire, cell in enumerate(placement)}
    return "\n".join(
        " ".join(f"{at[(x, y)]:>2}" if (x, y) in at else " ." for x in range(cols))
        for y in range(rows)
    )


if __name__ == "__main__":
    import time

    from sim.cli import OneLineParser

    OneLineParser(
        prog="python -m sim.etsoc_placement",
        description="Search every placement of the 32 compute shires that meets the "
                    "seed's ring constraints and print the default one, its non-compute "
                    "cells and its hop statistics.").parse_args()
    t0 = time.perf_counter()
    n = len(search())
    elapsed = time.perf_counter() - t0
    placement = default_placement()
    print("Default placement (row y=0 at the top, x left to right; '.' = non-compute):")
    print(_format_grid(placement))
    print(f"non-compute cells: {non_compute_cells(placement)}")
    print(f"hop statistics: {ring_stats(placement)}")
    print(f"{n} placements with shire 0 at (0, 0), found in {elapsed:.1f} s")
