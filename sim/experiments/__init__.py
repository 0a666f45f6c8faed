"""Experiment definitions, one module per fabric."""

import tomllib
from importlib import resources

__all__ = ["SetByExperiment", "load_reference"]


class SetByExperiment(ValueError):
    """A ``--set`` of a configuration field that the experiment sets itself,
    so the value would be recorded in the result without taking effect.  A
    run of one named experiment is refused; a run of a whole fabric skips the
    experiment and runs the others."""


def load_reference(name):
    """The seed values in ``sim/reference/<name>.toml`` as a nested dict.

    Raises
    ------
    FileNotFoundError
        If there is no such reference file.
    tomllib.TOMLDecodeError
        If the file is not valid TOML.
    """
    return tomllib.loads(resources.files("sim.reference").joinpath(f"{name}.toml").read_text())
