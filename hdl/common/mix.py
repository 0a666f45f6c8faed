"""A 32-bit mixing function for the testbench-only data checks.

A check that adds up data words modulo 2**32 misses errors that cancel: the
top bit of two words flipped together changes the sum by 2**32.  These
checks add up ``fmix32(word + position × GOLDEN)`` instead, where
``fmix32`` is MurmurHash3's finaliser: a bijection on 32-bit words whose
every output bit depends on every input bit.  One changed word always
changes the sum (the bijection); several change it unless their changes
happen to cancel, about one chance in 2**32 whatever the pattern of bits.
The position term makes a word that lands in the wrong place count as an
error too.  Two multiplications and three shifts a word keep it cheap to
simulate: a CRC-32, the other choice, took twice as long to simulate on the
1,024-minion mesh (one XOR tree per CRC bit in every engine).
"""

__all__ = ["GOLDEN", "fmix32", "fmix32_value", "mixed_sum"]

#: Added per position (2**32 / the golden ratio, odd): spreads the keys.
GOLDEN = 0x9E3779B9

_MASK = 0xFFFFFFFF


def fmix32(x):
    """MurmurHash3's 32-bit finaliser of int ``x`` (taken mod 2**32)."""
    x &= _MASK
    x ^= x >> 16
    x = x * 0x85EBCA6B & _MASK
    x ^= x >> 13
    x = x * 0xC2B2AE35 & _MASK
    return x ^ x >> 16


def fmix32_value(x):
    """Amaranth value (32 bits): :func:`fmix32` of the 32-bit value ``x``."""
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B)[:32]
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35)[:32]
    return x ^ (x >> 16)


def mixed_sum(words, first=0):
    """``sum(fmix32(word + (first + k) × GOLDEN)) mod 2**32`` over the 32-bit
    ints ``words``, ``k`` counting from 0: the check the RTL computes."""
    return sum(fmix32(w + (first + k) * GOLDEN) for k, w in enumerate(words)) & _MASK
