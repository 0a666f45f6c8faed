"""Command-line options and shared fixtures of the test suite."""

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("fabricsim")
    group.addoption("--seeds", type=int, default=2, metavar="N",
                    help="random-traffic seeds per fabric and simulator: 1 to N (default 2)")
    group.addoption("--seed", type=int, action="append", default=[], metavar="S",
                    help="run random traffic from seed S only (repeatable); overrides --seeds")


def pytest_generate_tests(metafunc):
    if "random_seeds" in metafunc.fixturenames:
        config = metafunc.config
        if not config.getoption("seed") and config.getoption("seeds") < 1:
            raise pytest.UsageError(f"--seeds must be at least 1, not {config.getoption('seeds')}")
        seeds = config.getoption("seed") or list(range(1, config.getoption("seeds") + 1))
        metafunc.parametrize("random_seeds", [tuple(seeds)],
                             ids=[f"seeds{seeds[0]}-{seeds[-1]}" if len(seeds) > 1
                                  else f"seed{seeds[0]}"])


#: Test files that take longest from a clean clone, longest first (the mesh's
#: Verilog generation and Verilator build lead).  pytest-xdist (``--dist
#: loadfile``) hands files to workers in collection order, so the mesh's chain
#: starts at once; it is still the longest path of a cold ``make test``.
LONGEST_FIRST = ("test_mesh.py", "test_dsm.py", "test_random.py", "test_pcie.py",
                 "test_simulators.py", "test_proofs.py", "test_sweep.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable


@pytest.fixture
def progress_lines(monkeypatch):
    """Progress lines as a piped log gets them, one every status redraw
    (``PIPED_PROGRESS_SECONDS`` 0, ``STATUS_SECONDS`` 0.05), with rich drawing
    no status line into the pipe.  Each line's text calls
    ``sim.cli.waited_text`` once; the fixture counts those calls and gives
    them as ``"T s"``.  Returns ``wait_for(n)``, which waits (up to 60 s)
    until ``n`` texts have been made and returns how many have, so that a
    test can step its fake work between lines without relying on timing."""
    import threading

    import sim.cli

    made = []
    changed = threading.Condition()

    def waited_text(since):
        with changed:
            made.append(since)
            changed.notify_all()
        return "T s"

    def wait_for(n):
        with changed:
            changed.wait_for(lambda: len(made) >= n, timeout=60)
            return len(made)

    monkeypatch.setattr(sim.cli, "PIPED_PROGRESS_SECONDS", 0)
    monkeypatch.setattr(sim.cli, "STATUS_SECONDS", 0.05)
    monkeypatch.setattr(sim.cli, "waited_text", waited_text)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):     # else rich draws its status line
        monkeypatch.delenv(name, raising=False)
    return wait_for
