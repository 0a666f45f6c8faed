"""CRC-32 as a parallel XOR network, for the testbench-only data checks.

The polynomial, bit order, initial value and final inversion are zlib's
(IEEE 802.3, reflected: ``0xEDB88320``, bits shifted in least significant
first), so a checksum computed in the RTL over a byte string equals
:func:`zlib.crc32` of it.  Unlike a sum of words, a CRC is not fooled by
errors that cancel: every error of one or two bits in a message of up to
91,607 bits (a minion's register file is 8,192), and every burst of 32 bits
or fewer, changes it; a sum modulo 2**32 misses, for one, the top bit of two
words flipped together.
"""

import functools

from amaranth import Cat, Const

__all__ = ["CRC32_INIT", "crc32_step", "crc32_serial"]

#: The reflected CRC-32 polynomial (zlib, IEEE 802.3).
POLY = 0xEDB88320

#: Register value before the first bit; :func:`zlib.crc32` is the register
#: after the last bit, inverted.
CRC32_INIT = 0xFFFFFFFF


def crc32_serial(state, value, bits):
    """The CRC-32 register (32-bit int) after shifting in the ``bits`` low
    bits of int ``value``, least significant first, from register ``state``:
    the definition :func:`crc32_step` computes in parallel.  ``~result`` from
    ``state`` :data:`CRC32_INIT` is :func:`zlib.crc32` of ``value`` as
    ``bits // 8`` little-endian bytes."""
    for i in range(bits):
        low = (state ^ (value >> i)) & 1
        state = (state >> 1) ^ (POLY if low else 0)
    return state


@functools.cache
def _masks(bits):
    """``(state masks, data masks)``: bit ``i`` of the next register is the
    parity of ``state & state_masks[i]`` and ``data & data_masks[i]``
    (the step is linear over GF(2))."""
    state_cols = [crc32_serial(1 << j, 0, bits) for j in range(32)]
    data_cols = [crc32_serial(0, 1 << j, bits) for j in range(bits)]
    return (tuple(sum(1 << j for j in range(32) if state_cols[j] >> i & 1) for i in range(32)),
            tuple(sum(1 << j for j in range(bits) if data_cols[j] >> i & 1) for i in range(32)))


def crc32_step(state, data):
    """Amaranth value (32 bits): the CRC-32 register after shifting in every
    bit of ``data`` (any width, bit 0 first) from register ``state`` (a
    32-bit value, or an int such as :data:`CRC32_INIT`), as
    :func:`crc32_serial` defines it; one XOR tree per register bit.

    Raises
    ------
    ValueError
        If ``data`` has no bits.
    """
    bits = len(data)
    if bits == 0:
        raise ValueError("data must have at least one bit to shift into the CRC")
    state_masks, data_masks = _masks(bits)
    if isinstance(state, int):
        state = Const(state, 32)
    return Cat(*((state & state_masks[i]).xor() ^ (data & data_masks[i]).xor()
                 for i in range(32)))
