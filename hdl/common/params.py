"""Typed-configuration helpers shared by every fabric's configuration class.

A field is either structural (it shapes the RTL and keys the Verilog build
cache) or run-time (written into the running model's registers, so changing
it needs no rebuild); each carries the source of its default.
"""

import copy
import dataclasses
from dataclasses import field

__all__ = ["structural_field", "runtime_field", "ConfigBase"]


def structural_field(default, source):
    """A dataclass field that shapes the RTL; ``source`` cites where the default comes from."""
    return field(default=default, metadata={"structural": True, "source": source})


def runtime_field(default, source):
    """A dataclass field written into registers at run time; ``source`` cites its default."""
    return field(default=default, metadata={"structural": False, "source": source})


class ConfigBase:
    """Methods of a frozen configuration dataclass built from these fields."""

    #: Fields whose empty default the configuration fills in from its other
    #: fields (``MeshConfig.placement``, from ``compute_shires``); see
    #: :meth:`replace`.
    DERIVED = ()

    def replace(self, **changes):
        """A copy with ``changes`` applied, validated as the constructor does.

        A field of :attr:`DERIVED` that ``changes`` leaves alone, and that
        holds what the configuration would fill in anyway, is filled in again
        from the new values: changing ``compute_shires`` alone gives the
        default placement's first ``compute_shires`` cells, not its 32.

        Raises
        ------
        ValueError
            If the copy is not a valid configuration (the message names the
            field and the allowed values).
        """
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in self.DERIVED:
            if changes and name not in changes:
                try:
                    derived = dataclasses.replace(self, **{name: defaults[name]})
                except ValueError:
                    continue
                if getattr(derived, name) == getattr(self, name):
                    changes = {**changes, name: defaults[name]}
        return dataclasses.replace(self, **changes)

    def hardware(self):
        """This configuration with every run-time field at its default.

        Two configurations with equal ``hardware()`` share one Verilog build.
        The copy is not validated again: a run-time default need not suit a
        structural what-if, and the hardware configuration only shapes the RTL; the
        run-time values a run writes into it come from the validated
        configuration itself.
        """
        defaults = type(self)()
        hardware = copy.copy(self)
        for f in dataclasses.fields(self):
            if not f.metadata.get("structural"):
                object.__setattr__(hardware, f.name, getattr(defaults, f.name))
        return hardware

    def structural(self):
        """Tuple of (name, value) of the fields that shape the RTL (build-cache key)."""
        return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                     if f.metadata.get("structural"))
