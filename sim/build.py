"""Verilog generation with a content-addressed build cache.

Amaranth emits no Verilog parameters, so every configuration of a fabric is
its own Verilog file. Each file lives in ``<build_root>/<name>-<hash12>/``,
where the hash covers everything that can change the generated text: the
configuration, the RTL sources under the ``hdl`` package, the module that
defines the component factory, the Amaranth version and this module's own
post-processing of Yosys's output. A file that is already there is reused
as is, which also lets the simulator builds keyed on that folder be reused.
The hash is of the files on disk, the Verilog comes from the code the
process runs: a process that loaded a source before it was edited generates
nothing (:class:`SourceChanged`).

A block built many times that stands behind a
:class:`~hdl.common.shared.SharedModule` is converted once into a module of
its own (:func:`convert_hierarchy`), marked as a Verilator hierarchical block
unless its top is one of :data:`FLAT_TOPS`, it is one of
:data:`FLAT_MODULES`, or the Verilog holds only one instance of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import inspect
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["FLAT_MODULES", "FLAT_TOPS", "HIER_BLOCK", "SourceChanged", "config_hash",
           "convert_hierarchy", "generate_verilog", "mark_hier_block", "write_atomically",
           "write_files_atomically"]

_HASH_CHARS = 12


class SourceChanged(RuntimeError):
    """A source file of the Verilog (under ``hdl/``, the factory's, or
    ``sim/build.py``) changed on disk after the process that would generate
    the Verilog loaded it, or while it was generating: the text would not
    match its key in the build cache, so none is written."""


def _hdl_sources(fabric: str | None = None) -> dict[str, Path]:
    """``.py`` files under ``hdl/`` that shape a fabric's Verilog.

    With `fabric` (a subpackage name such as ``"hopper"``) the other fabrics'
    subpackages are left out, so editing one fabric never rebuilds another;
    ``hdl/common`` and the package root are always included.
    """
    spec = importlib.util.find_spec("hdl")
    if spec is None or not spec.submodule_search_locations:
        return {}
    files: dict[str, Path] = {}
    for location in spec.submodule_search_locations:
        root = Path(location).resolve()
        for path in root.rglob("*.py"):
            inner = path.relative_to(root)
            top = inner.parts[0] if len(inner.parts) > 1 else None
            if fabric is not None and top not in (None, "common", fabric):
                continue
            # Keyed by the path inside the package, so a checkout in another
            # folder hashes the same and a moved file changes the hash.
            files[f"hdl/{inner.as_posix()}"] = path
    return files


def _fabric_of(component_factory: Callable[[Any], Any] | None) -> str | None:
    module = getattr(component_factory, "__module__", "") or ""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "hdl" else None


def _factory_source(component_factory: Callable[[Any], Any]) -> Path | None:
    # A component defined outside hdl/ (a test's own design, say) would not
    # be covered by the hdl/ sources, so its defining file joins the hash.
    try:
        source = inspect.getsourcefile(component_factory)
    except TypeError:
        return None
    return Path(source).resolve() if source else None


def _hashed_sources(component_factory: Callable[[Any], Any] | None) -> dict[str, Path]:
    """The source files :func:`config_hash` reads besides this module, by
    label."""
    sources = _hdl_sources(_fabric_of(component_factory))
    if component_factory is not None:
        extra = _factory_source(component_factory)
        if extra is not None and extra not in sources.values():
            sources[f"factory/{extra.name}"] = extra
    return sources


def _process_started() -> float:
    """When this process started, in seconds since the epoch, rounded up to
    Linux's clock tick (10 ms; it loads no module of its own that soon),
    from its ``/proc`` entry; elsewhere when this module was loaded."""
    try:
        stat = Path("/proc/self/stat").read_text()
        # Field 22 (clock ticks after boot), counted after the command name.
        ticks = int(stat.rsplit(")", 1)[1].split()[19]) + 1
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.time() - since_boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _LOADED_AT


_LOADED_AT = time.time()


def _changed_since_loaded(component_factory: Callable[[Any], Any] | None) -> list[str]:
    """Hashed source files (this module included) whose module this process
    has loaded and which changed on disk after the process started: the code
    that would generate the Verilog may be older than the file its key is
    computed from."""
    loaded = {Path(module.__file__).resolve() for module in list(sys.modules.values())
              if getattr(module, "__file__", None)}
    started, now = _process_started(), time.time()
    files = {"sim/build.py": Path(__file__).resolve(), **_hashed_sources(component_factory)}
    changed = []
    for label, path in sorted(files.items()):
        with contextlib.suppress(OSError):
            # A time ahead of the clock (a copy from a machine ahead of this
            # one) is no edit made while this process ran.
            if path.resolve() in loaded and started < path.stat().st_mtime <= now:
                changed.append(label)
    return changed


def config_hash(config: Any, component_factory: Callable[[Any], Any] | None = None) -> str:
    """Hash of everything that determines the Verilog for a configuration.

    Covered: the Amaranth version, this module's source (it post-processes
    the Verilog), the configuration's type and ``repr``, the ``.py`` files
    under the ``hdl`` package (by path inside it and content), and the file
    defining `component_factory` if that is outside ``hdl``. Editing any of
    them gives a new hash, hence a rebuild.

    Parameters
    ----------
    config : frozen dataclass instance
        The configuration; its type's qualified name and its ``repr`` are
        hashed, so its ``repr`` must be deterministic across processes
        (avoid sets of strings, whose order changes with hash seeding).
    component_factory : callable, optional
        The factory that will build the component; the source file that
        defines it is hashed too, when it is outside the ``hdl`` package.  A
        factory inside ``hdl/<fabric>/`` hashes only that fabric's sources
        with ``hdl/common``.

    Returns
    -------
    str
        Hex SHA-256 digest (64 characters).

    Raises
    ------
    TypeError
        If `config` is not an instance of a frozen dataclass.
    """
    if not (
        dataclasses.is_dataclass(config)
        and not isinstance(config, type)
        and type(config).__dataclass_params__.frozen
    ):
        raise TypeError(
            f"config must be an instance of a frozen dataclass, not {type(config).__qualname__}"
        )
    import amaranth

    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        # Length-prefixed fields, so no two different inputs concatenate
        # to the same byte string.
        for part in (label.encode(), data):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)

    add("amaranth", amaranth.__version__.encode())
    # This file rewrites Yosys's output, so its own text shapes the Verilog.
    add("sim/build.py", Path(__file__).read_bytes())
    config_type = type(config)
    add("config", f"{config_type.__module__}.{config_type.__qualname__}:{config!r}".encode())
    sources = _hashed_sources(component_factory)
    for label in sorted(sources):
        add(label, sources[label].read_bytes())
    return digest.hexdigest()


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8 text, or bytes as they are) to ``path`` through a
    temporary file in the same folder, renamed into place once complete, so a
    reader never sees a partial file.

    Raises
    ------
    OSError
        If the file cannot be written; its ``filename`` is ``path``, not the
        temporary name.
    """
    write_files_atomically({path: text})


def write_files_atomically(files: dict[Path, str | bytes]) -> None:
    """Write every file of ``files`` (path -> UTF-8 text or bytes) as
    :func:`write_atomically` does, all or none: each goes to a temporary file
    first, and only once all are complete are they renamed into place, so a
    full disk or a folder that refuses one leaves the earlier files as they
    were.

    Raises
    ------
    OSError
        If a file cannot be written (then none has been changed) or, rarer,
        renamed into place (then those before it have been); its
        ``filename`` is that file's path, not the temporary name.
    """
    written = []
    try:
        for path, text in files.items():
            path = Path(path)
            # A unique name per writer, so two processes generating the same
            # configuration never write into one temporary file; "x" mode keeps
            # the usual umask permissions (mkstemp would make the file private).
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                with (open(tmp, "xb") if isinstance(text, bytes)
                      else open(tmp, "x", encoding="utf-8")) as handle:
                    written.append((tmp, path))
                    handle.write(text)
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as error:
                raise OSError(error.errno, error.strerror, str(path)) from None
        for tmp, path in written:
            try:
                os.replace(tmp, path)
            except OSError as error:
                raise OSError(error.errno, error.strerror, str(path)) from None
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise


_CONSTANT_PROCESS = re.compile(
    r"^(\s*)always @\*\n(\s+[^\n=;]+ = \d+'[bdh][0-9a-fA-F_]+;)$", re.MULTILINE)


def settle_constant_processes(text: str) -> str:
    """Turn ``always @*`` blocks that only assign a constant into ``initial`` blocks.

    Yosys writes a comb assignment of a constant to some bits of a variable as
    an ``always @*`` with an empty sensitivity list.  Such a block never runs
    (Verilator warns ALWNEVER and leaves the bits at zero; Icarus never wakes
    it), so e.g. a constant source-slot field would read as 0.  Nothing else
    writes those bits, so setting them once at time zero is the intended
    meaning.
    """
    return _CONSTANT_PROCESS.sub(r"\1initial\n\2", text)


_ZERO_MEMORY_INIT = re.compile(
    r"^  initial begin\n(?:    [A-Za-z_][\w$]*\[\d+\] = \d+'h0+;\n)+  end\n", re.MULTILINE)


def drop_zero_memory_init(text: str) -> str:
    """Remove the per-word zero initialisation Yosys writes for every memory.

    Amaranth memories always carry an initial value; a 200 KiB shared memory
    becomes 6,400 ``initial`` assignments, which multiply the simulator's C++
    and its compile time.  Simulators start memories at zero (Verilator with
    ``--x-initial fast``) or X (Icarus), and the models write every word they
    read (the fill phase), so the lines carry no meaning.
    """
    return _ZERO_MEMORY_INIT.sub("", text)


@contextlib.contextmanager
def locked(directory: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (created if missing) for the
    ``with`` block: processes that share a build folder (parallel experiments,
    test workers, sweep points) take turns building in it.  ``waiting`` is
    called once, before blocking, if another holder has the lock.  The lock
    is not re-entrant: a holder that asks again waits for ever."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def generate_verilog(
    component_factory: Callable[[Any], Any],
    config: Any,
    name: str,
    build_root: Path = Path("build"),
) -> Path:
    """Generate (or reuse) the Verilog for one configuration of a component.

    Parameters
    ----------
    component_factory : callable
        Called as ``component_factory(config)``; must return an Amaranth
        ``wiring.Component``, whose signature gives the Verilog ports
        (member paths joined with ``__``, e.g. ``o__payload``).
    config : frozen dataclass instance
        The configuration; see :func:`config_hash` for what is hashed.
    name : str
        Verilog module name of the top level, also the file's stem and the
        build folder's prefix. Must be a plain Verilog identifier.
    build_root : pathlib.Path, default ``Path("build")``
        Folder holding all build folders; relative paths are taken from the
        current directory.

    Returns
    -------
    pathlib.Path
        Absolute path of ``<build_root>/<name>-<hash12>/<name>.v``. If that
        file already exists it is returned untouched (cache hit).

    Raises
    ------
    TypeError
        If `config` is not a frozen dataclass instance, or the factory does
        not return a ``wiring.Component``.
    ValueError
        If `name` is not a valid Verilog identifier.
    amaranth.back.verilog.YosysError
        If Yosys fails to convert the design.
    SourceChanged
        On a cache miss, if a source file this process loaded changed after
        it started, or a source changed while the Verilog was generated;
        nothing is written.
    """
    if not (name.isidentifier() and name.isascii()):
        raise ValueError(f"name must be a Verilog identifier such as 'gpc_dsm', not {name!r}")
    digest = config_hash(config, component_factory)
    out_dir = Path(build_root).resolve() / f"{name}-{digest[:_HASH_CHARS]}"
    out_path = out_dir / f"{name}.v"
    if out_path.is_file():
        return out_path
    with locked(out_dir):
        # Another process may have generated it while this one waited.
        if not out_path.is_file():
            # The key comes from the files on disk, the Verilog from the code
            # this process runs: both must be the same sources.
            changed = _changed_since_loaded(component_factory)
            if changed:
                raise SourceChanged(f"{', '.join(changed)} changed after this process "
                                    f"started, so it may run the older code: run again")
            text = _generate(component_factory, config, name)
            if config_hash(config, component_factory) != digest:
                raise SourceChanged("a source of the Verilog changed while it was being "
                                    "generated: run again")
            out_dir.mkdir(parents=True, exist_ok=True)
            # The repr is kept beside the Verilog so a build folder can be
            # traced back to its configuration without recomputing hashes.
            write_atomically(out_dir / "config.txt",
                             f"{type(config).__qualname__}: {config!r}\n")
            write_atomically(out_path, text)
    return out_path


def convert_hierarchy(component: Any, name: str) -> str:
    """Verilog text of `component` as module `name`, followed by every module
    its :class:`~hdl.common.shared.SharedModule` instances stand for, each
    converted once however many instances use it and marked as a Verilator
    hierarchical block (:data:`HIER_BLOCK`) unless `name` is in
    :data:`FLAT_TOPS`, the module in :data:`FLAT_MODULES`, or the Verilog
    holds only one instance of it (see :data:`FLAT_MODULES`).  The top's
    ``sync`` domain gets ports ``clk`` and ``rst``, and its reset passes one
    flip-flop before any logic sees it (:func:`_convert_top`).

    Raises
    ------
    ValueError
        If a shared module name is used for two different blocks, or equals
        `name`.
    amaranth.back.verilog.YosysError
        If Yosys fails to convert a module.
    """
    from amaranth.back import verilog

    from hdl.common.shared import collect_shared_modules

    with collect_shared_modules() as modules:
        top = _convert_top(component, name)
        texts = {}
        while pending := [n for n in modules if n not in texts]:
            for module_name in pending:
                if module_name == name:
                    raise ValueError(f"shared module {module_name!r} has the top level's name")
                pending = modules[module_name]
                texts[module_name] = _convert_with_domains(pending.take(), module_name,
                                                           pending.domains)
    # Marked once every module is converted, when every instance is counted.
    for module_name, text in texts.items():
        if not (name in FLAT_TOPS or module_name in FLAT_MODULES
                or modules[module_name].instances < 2):
            texts[module_name] = mark_hier_block(text, module_name)
    return "\n".join([top, *texts.values()])


def _signature_ports(block: Any) -> dict:
    """``{port name: (value, direction)}`` of every member of ``block``'s
    signature, named by its path joined with ``__`` (``o__payload``)."""
    from amaranth.hdl import ValueCastable
    from amaranth.hdl._ir import PortDirection
    from amaranth.lib.wiring import In

    ports = {}
    for path, member, value in block.signature.flatten(block):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        ports["__".join(map(str, path))] = (
            value, PortDirection.Input if member.flow == In else PortDirection.Output)
    return ports


#: Name of the domain that the top level's ``sync`` logic runs in once
#: :func:`_convert_top` has taken its reset through a flip-flop.
STAGED_DOMAIN = "sync_staged"


def _convert_top(component: Any, name: str) -> str:
    """Verilog of the top-level ``component`` as module ``name``, with ports
    ``clk`` and ``rst`` for its ``sync`` domain beside the signature's, and
    that reset taken through one flip-flop clocked by ``clk`` before it
    reaches any logic (the top's own and its shared modules').  The top must
    leave ``sync`` undefined, as every top here does.

    The first ``clk`` edge after ``rst`` falls still resets the design; its
    logic runs from the second, one cycle later than with ``rst`` wired
    straight in.  A testbench must therefore let one edge pass after
    releasing ``rst`` before it drives anything (``RegisterTB.start`` does),
    or its first register write is reset away.  What such a testbench
    measures between its own events is unchanged, but logic that runs by
    itself from reset (free-running timers, time stamps) starts a cycle
    later.  In hardware this is the usual register on a
    synchronous reset before it fans out.  In simulation it matters more:
    Amaranth computes each register's next value in combinational logic that
    reads the domain's reset, so with ``rst`` a top-level input, Verilator
    re-evaluated all of that logic whenever an input changed, on both
    edges of every clock.  Measured on two cores, the same plans before and
    after: ``pcie.host_staged``'s first two runs on the eight-GPU machine
    took 6-8 s against 14-15 s, six runs of ``dsm.one_way`` 2.0 s against
    3.2 s, and 20 ``mesh.round_trip`` runs 12-13 s against 16-19 s (with
    the mesh clock's reset staged too, in
    :class:`~hdl.etsoc.mesh.EtSocMesh`).  Every DSM and ET-SoC-1 result
    came out the same; PCIe bandwidths moved by up to 0.4 %, as the
    links' free-running timers (SKP ordered sets, flow-control updates)
    start a cycle later against the copies.

    Raises
    ------
    amaranth.back.verilog.YosysError
        If Yosys fails to convert the design.
    """
    from amaranth.back import verilog
    from amaranth.hdl import ClockDomain, DomainRenamer, Fragment, Signal
    from amaranth.hdl._ir import PortDirection

    ports = _signature_ports(component)
    fragment = Fragment.get(DomainRenamer({"sync": STAGED_DOMAIN})(component), None)
    sync, staged = ClockDomain("sync"), ClockDomain(STAGED_DOMAIN)
    fragment.add_domains(sync, staged)
    rst_staged = Signal(init=1, reset_less=True, name="rst_staged")
    fragment.add_statements("sync", rst_staged.eq(sync.rst))
    fragment.add_statements("comb", staged.clk.eq(sync.clk), staged.rst.eq(rst_staged))
    ports["clk"] = (sync.clk, PortDirection.Input)
    ports["rst"] = (sync.rst, PortDirection.Input)
    return verilog.convert(fragment, name=name, ports=ports, emit_src=False)


def _convert_with_domains(block: Any, name: str, domains: tuple) -> str:
    """Verilog of ``block`` as module ``name``, its clock domains defined
    here, in the order ``domains`` gives, each adding ``clk`` and ``rst``
    ports (``<domain>_clk`` and ``<domain>_rst`` but for ``sync``) after the
    signature's.  Left to Amaranth, the domains a block uses but does not
    define are created in the order of a set of their names, which changes
    with Python's string hashing, and so did the Verilog's port order."""
    from amaranth.back import verilog
    from amaranth.hdl import ClockDomain, Fragment
    from amaranth.hdl._ir import PortDirection

    ports = _signature_ports(block)
    fragment = Fragment.get(block, None)
    for domain in domains:
        clock_domain = ClockDomain(domain)
        fragment.add_domains(clock_domain)
        ports[clock_domain.clk.name] = (clock_domain.clk, PortDirection.Input)
        ports[clock_domain.rst.name] = (clock_domain.rst, PortDirection.Input)
    return verilog.convert(fragment, name=name, ports=ports, emit_src=False)


#: Tops that Verilator builds flat, their shared modules not marked as
#: hierarchical blocks: flat, they build as fast and simulate faster.
#: Measured on two cores, each build cold and the same plan after it
#: (identical counters either way): the 18-SM GPC's ``dsm.one_way`` ran in
#: 49 s against 76 s hierarchical, building in about 80 s against about 70;
#: the eight-GPU PCIe machine's first two ``pcie.host_staged`` runs in 40 s
#: against 47, building in 77 s against 79 (both before the top's reset
#: was staged, :func:`_convert_top`).  The ET-SoC-1 mesh stays
#: hierarchical: its 128-minion build took 150 s flat against 12 s.
FLAT_TOPS = frozenset({"dsm_gpc", "pcie_system"})

#: Shared modules never marked as hierarchical blocks: Verilator builds them
#: flat inside the block or top that instantiates them.  A hierarchical
#: block is called through a DPI wrapper that evaluates all of its logic
#: again whenever any input changes, clock edges included; the minion
#: engine, 32 to a shire, paid that call from inside the shire.  Measured on
#: two cores, the ET-SoC-1 mesh with the engines flat inside the
#: (hierarchical) shire against every shared module a hierarchical block:
#: the bare C++ harness of ``make bench`` ran one 33,680-cycle run of the
#: 1,024-minion chip in 289 s against 336 s; ``mesh.allreduce``,
#: ``mesh.credit`` and ``mesh.ring_bandwidth`` with their builds warm
#: (``--fresh``, two at a time) in 27, 70 and 47 s against 31, 99 and 68 s,
#: with identical counters; cold, builds included, the three took 5 min 41 s
#: against 6 min 19 s.  Routers and mesh stops flat in the top as well ran
#: the chip in 209 s but built it in 128 s against 85, which cost more in
#: ``make report`` than it saved.
#: (Those figures are from before :mod:`sim.hier_verilator`, which has a
#: block's wrapper evaluate it only when an input changed, and see its
#: clock fall in that evaluation.)
#:
#: A shared module the Verilog holds only once is not marked either: as a
#: block it would be compiled once all the same, behind the wrapper.  The
#: one-shire ET-SoC-1 build (a 1x1 mesh: one shire, router and mesh stop)
#: built flat ran ``mesh.barrier`` cold, build included, in 61 s against
#: 78 s, and ``mesh.barrier``, ``mesh.allreduce`` and ``mesh.ring_bandwidth``
#: cold in 310 s against 334 s; with the builds warm (``--fresh``, three
#: runs each) the medians were the same within a second, and so were the
#: counters.
FLAT_MODULES = frozenset({"etsoc_minion_engine"})

#: Verilator metacomment that makes a module a hierarchical block: under
#: ``verilator --hierarchical`` it is verilated and compiled once, however
#: many instances there are; other tools read a comment.
HIER_BLOCK = "/*verilator hier_block*/"


def mark_hier_block(text: str, module_name: str) -> str:
    """``text`` with :data:`HIER_BLOCK` in the body of module ``module_name``.

    Raises
    ------
    ValueError
        If ``text`` defines no module ``module_name``.
    """
    head = re.search(rf"^module {re.escape(module_name)}\([^;]*\);\n", text, re.MULTILINE)
    if head is None:
        raise ValueError(f"module_name {module_name!r} is not defined in the Verilog")
    return f"{text[:head.end()]}  {HIER_BLOCK}\n{text[head.end():]}"


def _generate(component_factory, config, name):
    """The Verilog text of ``component_factory(config)`` as top ``name``."""
    # Imported late: loading Amaranth is not needed on a cache hit.
    from amaranth.lib import wiring

    component = component_factory(config)
    if not isinstance(component, wiring.Component):
        raise TypeError(
            f"component_factory must return an amaranth.lib.wiring.Component, "
            f"not {type(component).__qualname__}"
        )
    return drop_zero_memory_init(settle_constant_processes(
        convert_hierarchy(component, name)))
