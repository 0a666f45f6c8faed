"""Configuration files: a what-if written down once, as TOML tables of
configuration fields, one table per fabric.

.. code-block:: toml

    [dsm]           # the injection shaper at 3 flits per 4 cycles (seed 000: 2 per 3)
    shaper_flits = 3
    shaper_cycles = 4

    [mesh]          # 5 mesh cycles a hop each way (seed 002: 4)
    router_hop_mesh_cycles = 5

``fabricsim run``, ``fabricsim sweep``, ``fabricsim synth`` and
``python -m sim.board`` take one with ``--config FILE`` (the last two only
structural fields, which shape the hardware).  A field's value
has the TOML type of its default (an integer, a number, ``true``/``false``,
a string, or an array of integers, nested arrays flattened:
``placement = [[0, 0], [1, 0]]``); the fields and their defaults are
``fabricsim list``'s.  A ``--set`` or ``--grid`` of the same field wins over
the file's value.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

__all__ = ["load_config_file", "set_item", "with_config_items"]


def _flatten(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def set_item(field, value):
    """``FIELD=VALUE`` as ``--set`` takes it: a list or tuple comma-separated,
    nested ones flattened (a TOML ``placement = [[0, 0], [1, 0]]`` becomes
    ``placement=0,0,1,0``), a boolean ``true``/``false``."""
    if isinstance(value, (list, tuple)):
        text = ",".join(map(str, _flatten(value)))
    else:
        text = str(value).lower() if isinstance(value, bool) else value
    return f"{field}={text}"


def _toml_kind_error(default, value):
    """What a TOML ``value`` for a field whose default is ``default`` must be,
    or ``None`` when its type fits (a string is no number, nor a number a
    flag: the file's types are kept, not read as ``--set`` text)."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else "an integer"
    if isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else "a number"
    if isinstance(default, tuple):
        items = list(_flatten(value)) if isinstance(value, list) else None
        numbers = all(isinstance(d, int) for d in _flatten(default))
        if items is None or numbers and not all(isinstance(i, int) and not isinstance(i, bool)
                                                for i in items):
            return "an array of integers" if numbers else "an array"
        return None
    return None if isinstance(value, str) else "a string"


def load_config_file(path, *, structural_only=False):
    """``{fabric: [FIELD=VALUE, ...]}`` from a TOML file of ``[dsm]``,
    ``[mesh]`` and ``[pcie]`` tables, in the file's order.

    Parameters
    ----------
    path : str or Path
        The file.
    structural_only : bool
        Accept only the fields that shape the hardware (synthesis: a
        run-time field, such as ``cluster_size``, changes no hardware).

    Raises
    ------
    UsageError
        If the file cannot be read, is not UTF-8 or not TOML, or has a table
        that is not a fabric's, a field that is not one of its fabric's
        (structural ones, with ``structural_only``), or a value of the wrong
        TOML type (a string for a number, say).  Values are checked against
        the configuration where they are used, with the other fields given.
    """
    from sim.cli import FABRICS, UsageError, _fabric, unknown_field

    try:
        # utf-8-sig: a byte-order mark, which some editors write, is not TOML
        data = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
    except OSError as error:
        raise UsageError(f"--config must be a readable TOML file, not {str(path)!r} "
                         f"({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"--config must be a TOML file in UTF-8, not {str(path)!r} "
                         f"(byte {error.start}: {error.reason})") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"--config {path}: not valid TOML ({error})") from None
    out = {}
    for fabric, table in data.items():
        if fabric not in FABRICS:
            raise UsageError(f"--config {path}: tables must be among {', '.join(FABRICS)}, "
                             f"not {fabric!r}")
        if not isinstance(table, dict):
            raise UsageError(f"--config {path}: {fabric} must be one table, [{fabric}], "
                             f"not {type(table).__name__} {table!r}")
        config_cls = _fabric(fabric).config
        defaults = config_cls()
        structural = [name for name, _ in defaults.structural()]
        fields = {f.name for f in dataclasses.fields(config_cls)}
        for name, value in table.items():
            if not structural_only and name not in fields:
                raise unknown_field(f"--config {path}: [{fabric}]", config_cls, name)
            if structural_only and name not in structural:
                # run-time fields (cluster_size, say) change no hardware
                raise UsageError(f"--config {path}: [{fabric}] fields must be among its "
                                 f"structural ones, {', '.join(structural)}, not {name!r}")
            kind = _toml_kind_error(getattr(defaults, name), value)
            if kind is not None:
                raise UsageError(f"--config {path}: [{fabric}] {name} must be {kind}, "
                                 f"not {value!r}")
        out[fabric] = [set_item(k, v) for k, v in table.items()]
    return out


def with_config_items(file_items, items, held=()):
    """``items`` (``FIELD=VALUE`` strings from ``--set``) after the file's
    ``file_items`` for the fields neither they nor ``held`` (field names
    given elsewhere, such as a sweep's ``--grid``) give: the command line
    wins over the file."""
    given = {i.partition("=")[0] for i in items} | set(held)
    return [i for i in file_items if i.partition("=")[0] not in given] + list(items)
