"""Command-line options of the test suite."""

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
