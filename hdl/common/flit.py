"""Flit layout and packet kinds shared by the fabrics.

A flit is one lane-width beat of a packet.  Besides its data it carries the
routing fields every hop reads (source, destination, virtual channel, route)
and the destination word address.  Carrying the address with every data flit
stands for the per-source write pointer a receiver keeps in hardware; it
costs no lane bandwidth in the model, so packets need not stay contiguous on
a lane and arbiters can switch between packets at any flit.
"""

import enum

from amaranth.lib import data

__all__ = ["Kind", "VC", "VC_OF_KIND", "flit_layout"]


class Kind(enum.IntEnum):
    """Packet kind carried in every flit (3 bits).

    The request/response split follows the packet table of NVIDIA patent
    US12248788B2 as read in seed 000 ("What NVIDIA's Patent Tells Us"):
    read commands, write commands and write data travel on the
    blocking request VC; read data and acknowledgements on the non-blocking
    response VC.  Barrier messages are responses so that they never wait
    behind blocked requests.
    """

    RD_CMD = 0       #: read command, one flit (request VC)
    WR_CMD = 1       #: write command, one flit heading a long write (request VC)
    WR_DATA = 2      #: write data flit (request VC)
    RD_DATA = 3      #: read response data flit (response VC)
    ACK = 4          #: coalesced write acknowledgement, carries a count (response VC)
    BAR_ARRIVE = 5   #: cluster barrier arrival, sent to the leader rank (response VC)
    BAR_RELEASE = 6  #: cluster barrier release, sent by the leader (response VC)


class VC(enum.IntEnum):
    """Virtual channel index (1 bit)."""

    REQ = 0  #: blocking request channel
    RSP = 1  #: non-blocking response channel


VC_OF_KIND = {
    Kind.RD_CMD: VC.REQ, Kind.WR_CMD: VC.REQ, Kind.WR_DATA: VC.REQ,
    Kind.RD_DATA: VC.RSP, Kind.ACK: VC.RSP,
    Kind.BAR_ARRIVE: VC.RSP, Kind.BAR_RELEASE: VC.RSP,
}


def flit_layout(*, data_bits, addr_bits, node_bits, route_bits=2, mask_bits=2):
    """Return the flit :class:`~amaranth.lib.data.StructLayout`.

    Parameters
    ----------
    data_bits : int
        Payload width in bits (a 32 B flit has 256).
    addr_bits : int
        Word-address width at an endpoint (one word = one flit of data).
    node_bits : int
        Width of the source and destination endpoint indices.
    route_bits : int
        Width of the route tag chosen at injection (plane and lane).
    mask_bits : int
        Number of valid-granule bits in a data flit (2 granules of 16 B).

    Returns
    -------
    StructLayout
        Fields, low bits first: ``data`` (data_bits), ``kind`` (3, :class:`Kind`),
        ``vc`` (1, :class:`VC`), ``src`` and ``dst`` (node_bits each),
        ``addr`` (addr_bits), ``mask`` (mask_bits), ``last`` (1: last flit of
        the packet), ``route`` (route_bits).

    Raises
    ------
    ValueError
        If any width is not a positive integer.
    """
    for name, value in (("data_bits", data_bits), ("addr_bits", addr_bits),
                        ("node_bits", node_bits), ("route_bits", route_bits),
                        ("mask_bits", mask_bits)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return data.StructLayout({
        "data": data_bits,
        "kind": 3,
        "vc": 1,
        "src": node_bits,
        "dst": node_bits,
        "addr": addr_bits,
        "mask": mask_bits,
        "last": 1,
        "route": route_bits,
    })
