"""Switching blocks of the GPC DSM network (seed 000, "What NVIDIA's Patent Tells
Us" and "Ingress and Egress Are Organized Differently", redrawn from Patent
US12248788B2 Figures 21A-21D).

Path of every packet an SM sends, request or response:
SM -> injection shaper -> TPCARB -> GPCMMU (route hash) -> GPCARB ingress
-> GX0 or GX1 -> GPCARB egress -> destination SM.  An arriving packet goes
from the egress block straight to the SM.  Each switching block is a
:class:`~hdl.common.switch.CreditSwitch`; the classes here fix its port counts
and route function and say what they model.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.credit import CreditLink
from ..common.switch import CreditSwitch
from .config import cpc_of, eg_of, tpc_of

__all__ = ["TpcArb", "RouteHash", "Gpcmmu", "GpcarbIngress", "GxPlane", "GpcarbEgress"]


class TpcArb(CreditSwitch):
    """TPC arbiter: the two SMs of a TPC (2 inputs, 2 outputs, one hop).

    The patent has TPCARB arbitrate the TPC's traffic, yet the link out of
    GPCMMU is labelled ``6 mmu2gpcarb``: the six SM paths of a CPC stay
    distinct until GPCARB ingress.  So each SM keeps its own output here; the
    block adds a hop with its own buffers and credits.  Clock: SM clock.

    Members are those of :class:`CreditSwitch` with ``n_in = n_out = 2``:
    input ``k`` is the TPC's SM ``k`` and leaves on output ``k``.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Input buffer per VC and credits per output VC, in flits.

    Raises
    ------
    ValueError
        If ``depth`` is below 1 (from :class:`CreditSwitch`).
    """

    def __init__(self, *, flit_layout, depth):
        super().__init__(flit_layout=flit_layout, n_in=2, n_out=2, depth=depth,
                         out_credits=depth, route=lambda m, flit, i: i)


class RouteHash(wiring.Component):
    """GPCMMU / uTLB route hash: picks one of the four equivalent routes of a CPC.

    For DSM the uTLB hashes the address instead of translating it,
    "distributing requests across GXBAR paths to avoid camping" (seed 000,
    "What NVIDIA's Patent Tells Us").  The seed leaves the hash open and
    suggests "a simple deterministic cache-line or packet interleave" ("How
    Much Topology Can We Recover?").  Here consecutive 128 B lines of a flow
    rotate through the four routes, offset by the source and destination
    slots so that flows moving in step start on different routes:
    ``route = (line + src + dst) mod 4``; bit 1 picks the GX plane, bit 0 one
    of that plane's two ingress lanes of the CPC.  A plane switched off by
    firmware is never chosen: its half of the routes goes to the other plane.

    Parameters
    ----------
    addr_bits, node_bits : int
        Widths of the address and the destination slot.
    line_words : int
        Words per hashed line (128 B / 32 B = 4), rounded up to a power of two
        (3 words hash as lines of 4).

    Members
    -------
    i_addr : In(addr_bits)
        Word address carried by the flit.
    i_src, i_dst : In(node_bits), In(node_bits)
        Source and destination slots.
    i_plane_enable : In(2)
        Bit p: GXp is on.  At least one must be set.
    o_route : Out(2)
        ``{plane, lane}``.

    Raises
    ------
    ValueError
        If a width or ``line_words`` is not a positive integer.
    """

    def __init__(self, *, addr_bits, node_bits, line_words):
        for name, value in (("addr_bits", addr_bits), ("node_bits", node_bits),
                            ("line_words", line_words)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.line_shift = max(line_words - 1, 0).bit_length()
        self.addr_bits, self.node_bits = addr_bits, node_bits
        super().__init__({"i_addr": In(addr_bits), "i_src": In(node_bits),
                          "i_dst": In(node_bits),
                          "i_plane_enable": In(2), "o_route": Out(2)})

    def elaborate(self, platform):
        m = Module()
        folded = Signal(2)
        m.d.comb += folded.eq(self.i_addr[self.line_shift:] + self.i_src + self.i_dst)
        hashed = Signal()
        m.d.comb += hashed.eq(folded[1])
        plane = Mux(self.i_plane_enable.bit_select(hashed, 1), hashed, ~hashed)
        m.d.comb += self.o_route.eq(Cat(folded[0], plane))
        return m


class Gpcmmu(wiring.Component):
    """GPCMMU stage of one SM path: stamps each flit with its route, no delay.

    Responses leaving a target SM go through it too (the patent's fold path,
    Figure 21D; seed 000, "Ingress and Egress Are Organized Differently"), so
    their routes are hashed like requests.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    addr_bits, node_bits : int
        Widths of the flit's address and slot fields.
    line_words : int
        Words per hashed line (see :class:`RouteHash`).

    Members
    -------
    i : In(CreditLink(flit_layout))
        From the TPC arbiter.
    o : Out(CreditLink(flit_layout))
        To GPCARB ingress; ``o.flit.route`` set by :class:`RouteHash`.
    i_plane_enable : In(2)
        Planes on (firmware setting).

    Raises
    ------
    ValueError
        On widths :class:`RouteHash` refuses.
    """

    def __init__(self, *, flit_layout, addr_bits, node_bits, line_words):
        self.hash = RouteHash(addr_bits=addr_bits, node_bits=node_bits, line_words=line_words)
        super().__init__({"i": In(CreditLink(flit_layout)), "o": Out(CreditLink(flit_layout)),
                          "i_plane_enable": In(2)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.hash = h = self.hash
        m.d.comb += [
            h.i_addr.eq(self.i.flit.addr), h.i_src.eq(self.i.flit.src),
            h.i_dst.eq(self.i.flit.dst),
            h.i_plane_enable.eq(self.i_plane_enable),
            self.o.valid.eq(self.i.valid), self.o.flit.eq(self.i.flit),
            self.o.flit.route.eq(h.o_route),
            self.i.credit.eq(self.o.credit),
        ]
        return m


class GpcarbIngress(CreditSwitch):
    """GPCARB ingress of one CPC: six SM paths onto four 32 B lanes (SM2SM4).

    "GPCARB simply selects up to four of six ready input flits each cycle"
    (seed 000, "What NVIDIA's Patent Tells Us").  Input ``2 * tpc + sm``.  Output lane
    ``2 * plane + k`` feeds GX``plane`` input port ``2 * cpc + k``; a flit
    leaves on the lane its route names.  Clock: SM clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Input buffer per VC and credits per output VC, in flits.
    lanes, inputs : int
        Output lanes (4) and SM paths in (6).

    Raises
    ------
    ValueError
        If ``depth``, ``lanes`` or ``inputs`` is below 1 (from :class:`CreditSwitch`).
    """

    def __init__(self, *, flit_layout, depth, lanes=4, inputs=6):
        super().__init__(flit_layout=flit_layout, n_in=inputs, n_out=lanes, depth=depth,
                         out_credits=depth, route=lambda m, flit, i: flit.route, voq=True)


class GxPlane(CreditSwitch):
    """One GX switch plane: a 6x6 crossbar (GX0 and GX1 are independent planes).

    Input port ``2 * cpc + k`` comes from lane ``k`` of that CPC's ingress on
    this plane; output port ``2 * cpc + e`` goes to egress block ``e`` of CPC
    ``cpc``.  Seed 000, "Ingress and Egress Are Organized Differently": "GX0
    and GX1 are separate 6x6 switch planes, not one ordinary 12x12
    crossbar".  Clock: SM clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Input buffer per VC and credits per output VC, in flits.
    cfg : DsmConfig
        The GPC's shape: ``2 * cpcs`` ports; routes by destination slot.

    Raises
    ------
    ValueError
        If ``depth`` is below 1 (from :class:`CreditSwitch`).
    """

    def __init__(self, *, flit_layout, depth, cfg):
        table = Array(cpc_of(s, cfg) * cfg.sms_per_tpc + eg_of(s, cfg) for s in range(cfg.n_slots))
        super().__init__(flit_layout=flit_layout, n_in=2 * cfg.cpcs, n_out=2 * cfg.cpcs,
                         depth=depth, out_credits=depth,
                         route=lambda m, flit, i: table[flit.dst], voq=True)


class GpcarbEgress(CreditSwitch):
    """GPCARB egress block: one GX0 output and one GX1 output fanned out to three SMs.

    Each CPC has two; block ``e`` serves SM ``e`` of every TPC, so the two SMs
    of a TPC land on different blocks (seed 000: "SM0 on EG0, SM1 on EG1").
    Input ``p`` comes from GX``p``; output ``t`` goes to the SM of TPC ``t``.
    Clock: SM clock.

    Parameters
    ----------
    flit_layout : StructLayout
        Flit layout.
    depth : int
        Input buffer per VC, in flits.
    sm_depth : int
        Credits per output VC: the SM's input buffer, in flits.
    cfg : DsmConfig
        The GPC's shape: ``tpcs_per_cpc`` outputs.

    Raises
    ------
    ValueError
        If ``depth`` or ``sm_depth`` is below 1 (from :class:`CreditSwitch`).
    """

    def __init__(self, *, flit_layout, depth, sm_depth, cfg):
        table = Array(tpc_of(s, cfg) for s in range(cfg.n_slots))
        super().__init__(flit_layout=flit_layout, n_in=2, n_out=cfg.tpcs_per_cpc,
                         depth=depth, out_credits=sm_depth,
                         route=lambda m, flit, i: table[flit.dst], voq=True)
