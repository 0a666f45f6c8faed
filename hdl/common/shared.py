"""One Verilog module for every instance of a block that is built many times.

Amaranth elaborates each instance of a component on its own and emits it as
its own Verilog module, so 32 identical shires become 32 copies of the same
text: elaboration, Yosys and the Verilator build all pay 32 times (the
Verilator build still does for a top that :data:`sim.build.FLAT_TOPS`
builds flat, and for a module of :data:`sim.build.FLAT_MODULES`, where that
simulates faster; a module with one instance is built flat as well).  A
:class:`SharedModule` stands where the block would be.  Inside
:func:`collect_shared_modules` (which :func:`sim.build.generate_verilog`
uses) it elaborates to an ``Instance`` of one module generated once for all
instances; anywhere else (Amaranth's simulator, the formal proofs) it
elaborates to a fresh copy of the block, so the design behaves the same
either way.

A block is shareable when nothing differs between its instances but the
values on its ports: per-instance constants (a shire's ID, a router's cell)
become input ports the parent ties to constants.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from amaranth.hdl import ClockSignal, Instance, Module, ResetInserter, ResetSignal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["SharedModule", "collect_shared_modules", "port_name"]

_COLLECTOR: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "fabricsim_shared_modules", default=None)


def port_name(path) -> str:
    """Verilog port name of a flattened signature member (``("o", 2, "payload")``
    becomes ``o__2__payload``), as Amaranth's Verilog back end names a top
    level's ports."""
    return "__".join(str(part) for part in path)


@contextlib.contextmanager
def collect_shared_modules() -> Iterator[dict]:
    """While active, every :class:`SharedModule` elaborates to an ``Instance``
    and registers its block in the yielded dict ``{module name: pending}``;
    the caller converts ``pending.take()`` (a block) once per name, with clock
    domains ``pending.domains``.

    Raises
    ------
    RuntimeError
        On entering a ``with`` nested in an active one (not supported).
    """
    if _COLLECTOR.get() is not None:
        raise RuntimeError("collect_shared_modules() is already active")
    modules: dict = {}
    token = _COLLECTOR.set(modules)
    try:
        yield modules
    finally:
        _COLLECTOR.reset(token)
        for entry in modules.values():
            if entry.block is not None:         # never converted: an error cut it short
                entry.block._MustUse__silence = True


class SharedModule(wiring.Component):
    """Stand-in for one instance of ``cls(**kwargs)`` with the same signature.

    Parameters
    ----------
    cls : type of wiring.Component
        The block; built as ``cls(**kwargs)``.
    module_name : str
        Verilog module name of the shared module (a plain identifier, unique
        in the design for this ``cls`` and ``kwargs``).
    domains : tuple of str
        Clock domains of the block, as the block names them; each adds the
        ports ``clk``/``rst`` (``sync``) or ``<domain>_clk``/``<domain>_rst``
        (any other), as Amaranth's Verilog back end names them.
    resets : Value or dict of str to Value, optional
        Synchronous resets added to the block's own, as Amaranth's
        ``ResetInserter`` takes them (a 1-bit value for ``sync``, or one per
        domain): while one is high the block's registers of that domain take
        their ``init`` values (memories keep their contents).  Shared, the
        value is ORed into the instance's ``rst`` port; flat, the block is
        wrapped in ``ResetInserter``.  Per instance: it does not change the
        shared module.
    **kwargs
        Construction arguments; their ``repr`` must tell apart every two
        blocks that elaborate differently.

    Members
    -------
    Those of ``cls(**kwargs).signature``, port for port.

    Raises
    ------
    ValueError
        If ``module_name`` is not a Verilog identifier, or ``resets`` names
        a domain not in ``domains`` or holds a value wider than 1 bit; at
        elaboration, when ``module_name`` is already registered with other
        construction arguments.
    """

    def __init__(self, cls, module_name, *, domains=("sync",), resets=None, **kwargs):
        if not (module_name.isidentifier() and module_name.isascii()):
            self._MustUse__silence = True     # never built: nothing to warn about
            raise ValueError(f"module_name must be a Verilog identifier, not {module_name!r}")
        self._cls, self._kwargs = cls, kwargs
        self.module_name = module_name
        self.domains = tuple(domains)
        if resets is not None and not isinstance(resets, dict):
            resets = {"sync": resets}
        self.resets = {domain: Value.cast(value) for domain, value in (resets or {}).items()}
        if unknown := sorted(set(self.resets) - set(self.domains)):
            self._MustUse__silence = True
            raise ValueError(f"resets must name domains of the block {self.domains}, not "
                             f"{', '.join(unknown)}")
        # ResetInserter resets on a value of 1, an ORed rst port on bit 0
        if wide := [d for d, value in self.resets.items() if len(value) != 1]:
            self._MustUse__silence = True
            raise ValueError(f"resets must be 1-bit values, not {len(self.resets[wide[0]])} "
                             f"bits for {wide[0]}")
        self.key = f"{cls.__module__}.{cls.__qualname__}({sorted(kwargs.items())!r})"
        # The first stand-in for a block builds one to learn its signature and
        # keeps it, to be elaborated in its place or converted as the shared
        # module; the others build nothing until a flat elaboration needs a
        # copy.  So no block is ever built and left unused.
        self._block = None
        signature = _SIGNATURES.get(self.key)
        if signature is None:
            self._block = self.build()
            signature = _SIGNATURES[self.key] = self._block.signature
        super().__init__(signature)

    def build(self):
        """A fresh ``cls(**kwargs)``."""
        return self._cls(**self._kwargs)

    def elaborate(self, platform):
        modules = _COLLECTOR.get()
        if modules is None:
            m = Module()
            block, self._block = self._block or self.build(), None
            m.submodules.block = ResetInserter(self.resets)(block) if self.resets else block
            inner = dict((path, value) for path, _, value in block.signature.flatten(block))
            for path, member, value in self.signature.flatten(self):
                if member.flow == In:
                    m.d.comb += inner[path].eq(value)
                else:
                    m.d.comb += value.eq(inner[path])
            return m
        entry = modules.setdefault(self.module_name,
                                   _Pending(self.key, self.build, self.domains))
        if entry.key != self.key:
            if self._block is not None:
                self._block._MustUse__silence = True
            raise ValueError(f"module_name {self.module_name!r} names two different blocks: "
                             f"{entry.key} and {self.key}")
        if self._block is not None and entry.block is None:
            entry.block, self._block = self._block, None
        entry.instances += 1
        ports = {}
        for domain in self.domains:
            prefix = "" if domain == "sync" else f"{domain}_"
            ports[f"i_{prefix}clk"] = ClockSignal(domain)
            reset = ResetSignal(domain)
            if domain in self.resets:
                reset = reset | self.resets[domain]
            ports[f"i_{prefix}rst"] = reset
        for path, member, value in self.signature.flatten(self):
            direction = "i" if member.flow == In else "o"
            ports[f"{direction}_{port_name(path)}"] = value
        return Instance(self.module_name, **ports)


#: Signature of each block seen, by :attr:`SharedModule.key`.
_SIGNATURES: dict[str, wiring.Signature] = {}


class _Pending:
    """A shared module to generate: its block's key, a way to get the block,
    its clock domains (their ports follow the block's, in this order) and
    ``instances``, how many instances of it the Verilog holds (each
    elaboration of a stand-in adds one: an instance inside another shared
    module counts once, however many instances that module has)."""

    def __init__(self, key, build, domains=("sync",)):
        self.key, self.build, self.block = key, build, None
        self.instances = 0
        self.domains = tuple(domains)

    def take(self):
        """The block to convert: the one a stand-in built, else a new one."""
        block, self.block = self.block or self.build(), None
        return block
