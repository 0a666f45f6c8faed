"""Configuration files: a what-if written down once, as TOML tables of
configuration fields, one table per fabric.

.. code-block:: toml

    [dsm]           # the injection shaper at 3 flits per 4 cycles (seed 000: 2 per 3)
    shaper_flits = 3
    shaper_cycles = 4

    [mesh]          # 5 mesh cycles a hop each way (seed 002: 4)
    router_hop_mesh_cycles = 5

``fabricsim run``, ``fabricsim sweep``, ``fabricsim synth`` and
``python -m sim.board`` take one with ``--config FILE``; synthesis (``synth``,
``sweep synth.BLOCK``, the board build) takes only structural fields, which
shape the hardware, in the tables of the blocks it builds.  A field's value
has the TOML type of its default (an integer, a number, ``true``/``false``,
a string, or for a list field an array of numbers or of ``[x, y]`` pairs,
flattened: ``placement = [[0, 0], [1, 0]]`` is ``--set placement=0,0,1,0``);
the fields and their defaults are ``fabricsim list``'s.  A ``--set`` or
``--grid`` of the same field wins over the file's value.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

__all__ = ["check_structural", "load_config_file", "refused_with_file", "set_item",
           "with_config_items"]


def _flatten(value):
    # arrays are at most two deep (_toml_kind_error), so this recursion is short
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


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _toml_kind_error(default, value):
    """What a TOML ``value`` for a field whose default is ``default`` must be,
    or ``None`` when its type fits (a string is no number, nor a number a
    flag: the file's types are kept, not read as ``--set`` text).  A tuple
    field takes an array of numbers or of ``[x, y]`` pairs (a mesh
    placement's cells), as ``--set`` takes numbers; the configuration then
    judges them."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int):
        return None if _is_number(value) and isinstance(value, int) else "an integer"
    if isinstance(default, float):
        return None if _is_number(value) else "a number"
    if isinstance(default, tuple):
        flat = isinstance(value, list) and all(_is_number(v) for v in value)
        pairs = isinstance(value, list) and all(
            isinstance(v, list) and len(v) == 2 and all(_is_number(n) for n in v) for v in value)
        return None if flat or pairs else "an array of numbers or of [x, y] pairs"
    return None if isinstance(value, str) else "a string"


def _toml_text(value):
    """``value`` as TOML writes it (``true``, ``"16"``, ``[1, 2]``), for messages."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)        # a date or time


def load_config_file(path):
    """``{fabric: [FIELD=VALUE, ...]}`` from a TOML file of ``[dsm]``,
    ``[mesh]`` and ``[pcie]`` tables, in the file's order.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    dict
        Each table's fields as ``--set`` items (:func:`set_item`).  Their
        values are checked where they are used, with the other fields given
        (:func:`refused_with_file`); a tool that takes only structural fields
        checks those of the tables it uses (:func:`check_structural`).

    Raises
    ------
    UsageError
        If ``path`` is empty, the file cannot be read, is not UTF-8 or not
        TOML, or has a table that is not a fabric's, a field that is not one
        of its fabric's, or a value of the wrong TOML type (a string for a
        number, say).
    """
    from sim.cli import FABRICS, UsageError, _fabric, path_too_long, unknown_field

    if not str(path):
        raise UsageError("--config must name a TOML file, not ''")
    if too_long := path_too_long(path):
        raise UsageError(f"--config must be a file the file system can name, not one {too_long}")
    if Path(path).exists() and not Path(path).is_file():
        # a folder, or a device or pipe that could be read without end
        raise UsageError(f"--config must be a readable TOML file, not {str(path)!r} "
                         f"(not a regular file)")
    try:
        # utf-8-sig: a byte-order mark, which some editors write, is not TOML
        data = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
    except OSError as error:
        raise UsageError(f"--config must be a readable TOML file, not {str(path)!r} "
                         f"({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"--config must be a TOML file in UTF-8, not {str(path)!r} "
                         f"(byte {error.start}: {error.reason})") from None
    except (ValueError, RecursionError) as error:
        # TOMLDecodeError, an integer of thousands of digits, arrays nested
        # hundreds deep
        reason = str(error) or type(error).__name__
        raise UsageError(f"--config {path}: not valid TOML ({reason})") from None
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
        fields = {f.name for f in dataclasses.fields(config_cls)}
        for name, value in table.items():
            if name not in fields:
                raise unknown_field(f"--config {path}: [{fabric}]", config_cls, name)
            kind = _toml_kind_error(getattr(defaults, name), value)
            if kind is not None:
                raise UsageError(f"--config {path}: [{fabric}] {name} must be {kind}, "
                                 f"not {_toml_text(value)}")
        out[fabric] = [set_item(k, v) for k, v in table.items()]
    return out


def check_structural(from_file, fabrics, source):
    """Refuse a field of ``from_file`` (as :func:`load_config_file` returns
    it, read from ``source``) that does not shape the hardware, in the
    tables of ``fabrics``: synthesis takes only structural fields (a
    run-time one, such as ``cluster_size``, changes no hardware).

    Raises
    ------
    UsageError
        Naming the file, the table, the field and the structural fields.
    """
    from sim.cli import UsageError, _fabric

    for fabric in fabrics:
        structural = [name for name, _ in _fabric(fabric).config().structural()]
        for item in from_file.get(fabric, ()):
            name = item.partition("=")[0]
            if name not in structural:
                raise UsageError(f"--config {source}: [{fabric}] fields must be among its "
                                 f"structural ones, {', '.join(structural)}, not {name!r}")


def with_config_items(file_items, items, held=()):
    """``items`` (``FIELD=VALUE`` strings from ``--set``) after the file's
    ``file_items`` for the fields neither they nor ``held`` (field names
    given elsewhere, such as a sweep's ``--grid``) give: the command line
    wins over the file."""
    given = {i.partition("=")[0] for i in items} | set(held)
    return [i for i in file_items if i.partition("=")[0] not in given] + list(items)


def refused_with_file(error, source, fabric, check, items, with_file):
    """The refusal to report when ``check(with_file)`` (a request with the
    ``--config`` file ``source``'s ``[fabric]`` items, as
    :func:`with_config_items` gives them) raised ``error``, a ``UsageError``:
    ``error`` itself when the file added nothing to the command line's
    ``items`` or when ``check(items)`` is refused with the same message (the
    command line's own mistake), otherwise the same message naming the file
    and its table, as the same class (``check(items)`` accepted, or refused
    for another field, which the file's came before).
    """
    from sim.cli import UsageError

    if list(with_file) == list(items):
        return error
    try:
        check(items)
    except UsageError as alone:
        if str(alone) == str(error):
            return error
    return type(error)(f"--config {source}: [{fabric}] {error}")
