"""Transaction-layer packets as beats of the model's datapath (seed 001; the
PCIe Base Specification's TLP, DLLP and flow-control rules).

A TLP travels as one header beat, which holds its framing, header and
length, followed by ``ceil(length / datapath_bytes)`` data beats.  One TLP
starts per beat, so a TLP of ``n`` payload bytes occupies ``1 + n / 32``
beats of a 32 B datapath whatever its header size: with 128 B writes, four
beats in five carry data.  That is the model's transmit datapath, not a PCIe
rule: packed byte by byte, a 128 B write with a 4 DW header is
``8 + 16 + 128 = 152`` B on the wire.
"""

import enum

from amaranth import Cat, Const
from amaranth.lib import data

__all__ = ["TlpType", "FcClass", "DATA_CREDIT_BYTES", "NODE_BITS", "HOST_NODE", "STAGE_SHIFT",
           "tlp_layout", "wire_layout", "payload_beat", "staged_beat"]


class TlpType(enum.IntEnum):
    """TLP kind (the beat's 2-bit ``kind``)."""

    MWR = 0    #: memory write, posted
    MRD = 1    #: memory read request, non-posted
    CPLD = 2   #: completion with data


class FcClass(enum.IntEnum):
    """Flow-control class, also the beat's virtual channel (``vc``)."""

    P = 0      #: posted requests
    NP = 1     #: non-posted requests
    CPL = 2    #: completions


#: Bytes per flow-control data credit.
DATA_CREDIT_BYTES = 16
#: Width of node indices: GPUs 0..15, host memories from :data:`HOST_NODE`.
NODE_BITS = 5
#: Node of socket 0's host memory; socket ``k``'s is ``HOST_NODE + k``.
HOST_NODE = 16
#: A copy staged through host memory puts source GPU ``s``'s byte ``x`` at host
#: address ``s << STAGE_SHIFT | x`` (so a staged copy is under 256 MiB).
STAGE_SHIFT = 28


def tlp_layout(cfg):
    """Layout of one beat.

    Fields, low bits first: ``data`` (``8 * datapath_bytes``), ``kind`` (2,
    :class:`TlpType`), ``vc`` (2, :class:`FcClass`), ``src`` and ``dst``
    (``NODE_BITS`` each, requester and target node: GPUs from 0, host memories
    from :data:`HOST_NODE`), ``addr`` (32: the byte
    address in the target's memory of the TLP's first byte, on the header
    beat, or of this beat's first byte), ``length`` (13: payload bytes, on
    every beat), ``tag`` (8), ``head`` (1: header beat), ``last`` (1: last
    beat of the TLP).
    """
    return data.StructLayout({
        "data": 8 * cfg.datapath_bytes, "kind": 2, "vc": 2,
        "src": NODE_BITS, "dst": NODE_BITS, "addr": 32, "length": 13, "tag": 8,
        "head": 1, "last": 1,
    })


def wire_layout(cfg):
    """What one direction of a link carries per slot: at most one beat and the
    DLLPs sent in that slot.

    ``ack`` / ``ack_seq`` (12): an Ack DLLP naming the TLPs taken in so far
    (modulo 4096); ``fc`` (3, one per :class:`FcClass`) with ``fc_hdr`` (3 x 8)
    and ``fc_data`` (3 x 12): UpdateFC DLLPs carrying each class's credit
    limit (the receiver's credits allocated so far, modulo 2**8 and 2**12).
    """
    return data.StructLayout({
        "beat_valid": 1, "beat": tlp_layout(cfg),
        "ack": 1, "ack_seq": 12,
        "fc": 3, "fc_hdr": 24, "fc_data": 36,
    })


def payload_beat(src, addr, datapath_bytes=32):
    """Payload of the beat at byte address ``addr`` of a copy from node ``src``.

    Lane ``i`` (32 bits) is ``{src[3:0], word[27:0]}`` with ``word = addr / 4
    + i``, so every lane of every source is distinct and a beat delivered to
    the wrong address or from the wrong source fails the check.  Works on
    ints (returns an int) and Amaranth values.
    """
    lanes = datapath_bytes // 4
    if isinstance(src, int) and isinstance(addr, int):
        out = 0
        for i in range(lanes):
            word = ((addr >> 2) + i) & 0xFFFFFFF
            out |= (word | (src & 0xF) << 28) << (32 * i)
        return out
    src4 = Cat(Const(src, 4) if isinstance(src, int) else src, Const(0, 4))[:4]
    return Cat(*(Cat(((addr >> 2) + i)[:28], src4) for i in range(lanes)))


def staged_beat(addr, datapath_bytes=32):
    """Payload of the beat at host address ``addr`` of a staging buffer: source
    GPU ``addr >> STAGE_SHIFT``'s data at byte ``addr % 2**STAGE_SHIFT`` of its copy
    (an Amaranth value)."""
    return payload_beat(addr[STAGE_SHIFT:STAGE_SHIFT + 4], addr[:STAGE_SHIFT], datapath_bytes)
