"""Stall snapshot of a stuck run, the same for every fabric.

Every switch of every fabric is a :class:`~hdl.common.switch.CreditSwitch`,
and every top exports three counters per switch block, read when the
watchdog (:class:`~hdl.common.watchdog.Watchdog`) ends a run as stuck:

* ``<block>.occupied``: bit ``input * n_vc + vc``, that input buffer holds a flit;
* ``<block>.no_credit``: bit ``output * n_vc + vc``, that output holds no credit;
* ``<block>.in<i>.wants``: bit ``vc * n_out + output``, a flit of that VC at
  input ``i`` waits for that output.

A fourth, ``<block>.credits_away`` (bit ``output * n_vc + vc``, that output
does not hold all its credits), is read once a run has finished and the
fabric is at rest: :func:`credits_away` names every bit left set, a credit
lost or returned twice on that link.

:func:`describe` turns them into one line per block that holds anything:
its non-empty buffers, its outputs without credit and its waiting
requesters, each wait marked with whether the output it waits for has a
credit.  Reading a deadlock is then following the waits: a flit waits for
an output with no credit, because the buffer that output feeds is full,
whose head waits for ...
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Block", "describe", "credits_away"]


@dataclass(frozen=True)
class Block:
    """One switch block's shape, to decode its snapshot counters.

    Attributes
    ----------
    name : str
        Counter prefix (``gx0``, ``router_2_3``, ``switch1``).
    inputs, outputs : tuple of str
        Port names, in index order.
    vcs : tuple of str
        Virtual channel names, in index order.
    """

    name: str
    inputs: tuple
    outputs: tuple
    vcs: tuple


def describe(counters, blocks):
    """Lines naming every non-empty buffer, every output without credit and
    every waiting requester of ``blocks``, one line per block that holds a
    flit (blocks whose counters were not read are skipped).

    Parameters
    ----------
    counters : dict of str to int
        Counter values read after the run stopped.
    blocks : iterable of Block

    Returns
    -------
    list of str
        Empty when no switch holds a flit.
    """
    lines = []
    for b in blocks:
        occupied = counters.get(f"{b.name}.occupied")
        if not occupied:
            continue
        n_vc, n_out = len(b.vcs), len(b.outputs)
        no_credit = counters.get(f"{b.name}.no_credit", 0)
        full = [f"{b.inputs[i]}.{b.vcs[v]}" for i in range(len(b.inputs)) for v in range(n_vc)
                if occupied >> (i * n_vc + v) & 1]
        dry = [f"{b.outputs[o]}.{b.vcs[v]}" for o in range(n_out) for v in range(n_vc)
               if no_credit >> (o * n_vc + v) & 1]
        waits = []
        for i, port in enumerate(b.inputs):
            wants = counters.get(f"{b.name}.in{i}.wants", 0)
            for v in range(n_vc):
                for o in range(n_out):
                    if wants >> (v * n_out + o) & 1:
                        why = "no credit" if no_credit >> (o * n_vc + v) & 1 else "credit held"
                        waits.append(f"{port}.{b.vcs[v]} -> {b.outputs[o]} ({why})")
        lines.append(f"{b.name}: buffers holding flits {', '.join(full)}; "
                     f"outputs without credit {', '.join(dry) or 'none'}; "
                     f"waiting {', '.join(waits) or 'none'}")
    return lines


def credits_away(counters, blocks):
    """``block.output.vc`` of every switch output whose ``credits_away`` bit
    is set in ``counters`` (read with the fabric at rest, so every credit
    should be home); blocks whose counter was not read are skipped.

    Parameters
    ----------
    counters : dict of str to int
        Counter values read after the run, once nothing moves.
    blocks : iterable of Block

    Returns
    -------
    list of str
        Empty when every output holds all its credits.
    """
    away = []
    for b in blocks:
        bits = counters.get(f"{b.name}.credits_away", 0)
        n_vc = len(b.vcs)
        away += [f"{b.name}.{b.outputs[o]}.{b.vcs[v]}" for o in range(len(b.outputs))
                 for v in range(n_vc) if bits >> (o * n_vc + v) & 1]
    return away
