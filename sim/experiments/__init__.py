"""Experiment definitions, one module per fabric."""

import tomllib
from importlib import resources

__all__ = ["load_reference"]


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
