"""Typed configuration of the ET-SoC-1 on-chip network model.

One frozen dataclass holds every parameter.  Each default cites its section
of seed 002 (``002_ef78cf597185d0e6.txt``).  Fields marked structural shape
the RTL and key the Verilog build cache; the others are written into the
running model's registers.

Stage latencies the seed does not disclose (the engines' and the shire's) are
run-time registers whose defaults were chosen so that the seed's three message
speeds come out of the RTL; every latency is still counted in simulated
cycles, and the mesh's per-hop cost comes from the routers alone.
"""

from dataclasses import dataclass

from ..common.params import ConfigBase, runtime_field, structural_field

__all__ = ["MeshConfig", "SEED", "COMBINE_OPS", "DEFAULT_PLACEMENT", "hops", "tree_edge"]

SEED = "002_ef78cf597185d0e6.txt"

#: Combine operations a TensorRecv applies on arrival (seed 002, "What the numbers
#: say", item 4: "A receive that adds or maxes into its registers takes the same
#: time as a plain copy"); register value = index.
COMBINE_OPS = ("copy", "add", "max", "min")

#: Logical (x, y) mesh cell of compute shires 0..31, found by
#: ``python -m sim.etsoc_placement`` (the first placement of its search): the
#: seed's 32-shire ring moves one hop per step, and walking shires 0..31
#: averages 3.3 hops (max 8), 3.5 (max 10) when it closes back to 0.
DEFAULT_PLACEMENT = (
    (0, 0), (0, 3), (2, 0), (0, 2), (1, 2), (2, 5), (4, 4), (4, 5), (0, 1), (1, 1), (3, 2),
    (3, 0), (1, 5), (0, 4), (2, 3), (5, 3), (1, 3), (2, 2), (4, 2), (3, 1), (1, 4), (0, 5),
    (3, 3), (5, 4), (1, 0), (2, 1), (4, 3), (4, 1), (2, 4), (3, 5), (3, 4), (5, 5))


_hw = structural_field
_run = runtime_field


def hops(a, b):
    """Mesh hops (Manhattan distance) between cells ``a`` and ``b`` (``(x, y)`` tuples)."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def tree_edge(a, b, levels=3):
    """True when minions ``a`` and ``b`` of one shire are joined by a reduction-tree
    edge of level 0..``levels``-1.

    At level L the tree pairs minion ``i`` (low L bits zero) with ``i ^ (1 << L)``
    (seed 002, "Reduction trees": levels 0-2 on the fast network inside a
    neighbourhood of eight).
    """
    d = a ^ b
    if d == 0 or d & (d - 1):
        return False
    level = d.bit_length() - 1
    return level < levels and (a & (d - 1)) == 0 and (b & (d - 1)) == 0


@dataclass(frozen=True)
class MeshConfig(ConfigBase):
    """Every parameter of the ET-SoC-1 network model.

    Units are in the names: ``_cycles`` minion clock cycles (600 MHz) unless
    ``_mesh_cycles`` (mesh clock, 400 MHz), ``_flits`` flits of
    ``flit_bytes``.  Invalid values raise :class:`ValueError` naming the field
    and the allowed values.  An empty ``placement`` is filled in from
    ``compute_shires`` (:meth:`~hdl.common.params.ConfigBase.replace` fills it
    in again when ``compute_shires`` changes).
    """

    DERIVED = ("placement",)

    # --- mesh (seed 002, "Where the shires are: a 6x6 mesh") -------------------
    mesh_cols: int = _hw(6, f"{SEED}: 'Where the shires are: a 6x6 mesh'")
    mesh_rows: int = _hw(6, f"{SEED}: 'Where the shires are: a 6x6 mesh'")
    compute_shires: int = _hw(32, f"{SEED}: '32 shires' (fewer: a what-if, or a small "
                                  "build of whole shires)")
    placement: tuple = _hw((), f"{SEED}: logical shire map; empty: the searched default "
                               "(sim/etsoc_placement.py), its first compute_shires cells")
    router_hop_mesh_cycles: int = _hw(4, f"{SEED}: 'What the numbers say' 2: '4 mesh cycles "
                                         "each way at 400 MHz'")
    minion_mhz: float = _run(600.0, f"{SEED}: 'minion clock 600 MHz' (the testbench's clock)")
    mesh_mhz: float = _run(400.0, f"{SEED}: 'mesh clock 400 MHz' (the testbench's clock)")

    # --- shire (seed 002, "Inside a shire, only the tree edges are fast") ------
    neighbourhoods: int = _hw(4, f"{SEED}: 32 minions per shire in neighbourhoods of eight")
    minions_per_neighbourhood: int = _hw(8, f"{SEED}: neighbourhood of eight minions")
    registers: int = _hw(32, f"{SEED}: 'cycling through its 32 vector registers'")
    register_bytes: int = _hw(32, f"{SEED}: 'up to 127 x 32 B'")
    flit_bytes: int = _hw(16, "link width: a 32 B register is two flits (not in the seed)")

    # --- pipeline depths (chosen so the seed's three speeds come out) ----------
    engine_send_cycles: int = _run(10, f"{SEED}: TensorSend issue to first flit (not disclosed)")
    engine_recv_cycles: int = _run(9, f"{SEED}: last flit to TensorRecv completion "
                                      "(not disclosed)")
    tree_edge_cycles: int = _run(4, f"{SEED}: neighbourhood-to-minion stage, on every "
                                   "arrival ('68 cycles on a reduction-tree edge' round trip)")
    crossbar_cycles: int = _run(19, f"{SEED}: shire crossbar stage ('114 anywhere else in "
                                   "the shire' round trip)")
    mesh_port_cycles: int = _run(0, f"{SEED}: shire-to-mesh stage, each way at both ends "
                                   "('150 + 12 per hop between shires' round trip)")
    mesh_window_flits: int = _run(51, f"{SEED}: 'Message size and bandwidth': 'the sender "
                                      "seems to have a limited number of packets in flight' "
                                      "(request flits a shire's mesh stop may have on the mesh "
                                      "unacknowledged by the destination shire's mesh stop; 0: no "
                                      "window; chosen, with ack_flits, so 1 KB round trips steepen "
                                      "beyond 5 hops)")
    send_window_flits: int = _run(0, "message flits a TensorSend may have unacknowledged by the "
                                     "receiving minion (0: no window; a what-if, not in the seed)")
    ack_flits: int = _run(2, "flits taken in per ACK, by a mesh stop from a source shire and by a "
                             "TensorRecv from its sender (not in the seed; chosen with "
                             "mesh_window_flits)")
    link_buffer_flits: int = _hw(8, "credits per VC on every link (not in the seed)")
    crossbar_buffer_flits: int = _hw(24, "credits per VC from the shire crossbar into a "
                                         "neighbourhood, enough to cover the credit round trip "
                                         "of the default crossbar stage (crossbar_cycles 19) at "
                                         "one flit per cycle (not in the seed)")
    watchdog_cycles: int = _hw(20000, "no engine or router moving a flit for this many minion "
                                      "cycles ends a run (a model setting, not in the seed)")

    def __post_init__(self):
        def need(name, ok, allowed):
            if not ok:
                raise ValueError(f"{name} must be {allowed}, not {getattr(self, name)!r}")

        def posint(name, hi=None):
            v = getattr(self, name)
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1 and (hi is None or v <= hi)
            need(name, ok, "a positive integer" if hi is None else f"an integer from 1 to {hi}")

        def exact(name, allowed):
            v = getattr(self, name)
            need(name, isinstance(v, int) and not isinstance(v, bool) and v in allowed,
                 "one of " + ", ".join(map(str, allowed)))

        posint("mesh_cols", 16)
        posint("mesh_rows", 16)
        posint("compute_shires", 32)
        need("mesh_cols", self.mesh_cols * self.mesh_rows >= self.compute_shires,
             f"large enough with mesh_rows ({self.mesh_rows}) to hold the "
             f"{self.compute_shires} compute shires")
        posint("link_buffer_flits", 64)
        posint("crossbar_buffer_flits", 255)
        posint("watchdog_cycles", 1 << 30)
        for name in ("engine_send_cycles", "engine_recv_cycles", "tree_edge_cycles",
                     "crossbar_cycles", "mesh_port_cycles"):
            v = getattr(self, name)
            need(name, isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255,
                 "an integer from 0 to 255")
        for name in ("send_window_flits", "mesh_window_flits"):
            v = getattr(self, name)
            need(name, isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255,
                 "0 (no window) or an integer from 1 to 255")
        v = self.ack_flits
        need("ack_flits", isinstance(v, int) and not isinstance(v, bool)
             and 1 <= v <= 255, "an integer from 1 to 255")
        window, others = self.mesh_window_flits, self.compute_shires - 1
        if window and others:
            # counts below ack_flits wait for a message's last flit: those every
            # other shire may hold back must not fill a source's window
            most = (window - 1) // others + 1
            need("ack_flits", v <= most,
                 f"at most {most} with mesh_window_flits {window} and {others + 1} compute "
                 "shires, so the counts below it that every other shire may hold back "
                 "cannot fill the window")
        v = self.router_hop_mesh_cycles
        need("router_hop_mesh_cycles", isinstance(v, int) and not isinstance(v, bool)
             and 2 <= v <= 16, "an integer from 2 to 16 (a router hop has at least its "
             "output register and the next input buffer)")
        exact("minions_per_neighbourhood", (1, 2, 4, 8))
        exact("neighbourhoods", (1, 2, 4))
        exact("registers", (32,))
        exact("register_bytes", (32,))
        exact("flit_bytes", (8, 16, 32))
        for name in ("minion_mhz", "mesh_mhz"):
            v = getattr(self, name)
            need(name, isinstance(v, (int, float)) and not isinstance(v, bool)
                 and 10 <= v <= 5000, "a clock in MHz from 10 to 5000")
        try:
            placement = tuple(self.placement)
        except TypeError:
            placement = None
        need("placement", placement is not None, "a sequence of (x, y) cells")
        if placement and all(isinstance(v, int) for v in placement):
            # --set placement=x0,y0,x1,y1,...: a flat list of coordinates
            need("placement", len(placement) % 2 == 0, "pairs of x, y coordinates")
            placement = tuple(zip(placement[::2], placement[1::2]))
        need("placement", all(isinstance(c, (tuple, list)) for c in placement),
             "(x, y) cells, one per compute shire")
        defaulted = not placement
        placement = (tuple(tuple(c) for c in placement)
                     or DEFAULT_PLACEMENT[:self.compute_shires])
        object.__setattr__(self, "placement", placement)
        need("placement", len(placement) == self.compute_shires,
             f"{self.compute_shires} (x, y) cells, one per compute shire (compute_shires)")
        need("placement", all(len(c) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                  for v in c)
                              and 0 <= c[0] < self.mesh_cols and 0 <= c[1] < self.mesh_rows
                              for c in placement),
             f"cells inside the {self.mesh_cols}x{self.mesh_rows} mesh (mesh_cols x mesh_rows)"
             + ("; the default, the first compute_shires cells of the seed's 6x6 map, is "
                "not: give placement=x0,y0,x1,y1,..." if defaulted else ""))
        need("placement", len(set(placement)) == len(placement),
             "distinct cells (one shire per cell)")

    # --- derived ----------------------------------------------------------
    @property
    def minions_per_shire(self):
        """Minions built per shire (32 on the chip)."""
        return self.neighbourhoods * self.minions_per_neighbourhood

    @property
    def flits_per_register(self):
        """Flits per 32 B register."""
        return self.register_bytes // self.flit_bytes

    @property
    def non_compute_cells(self):
        """Mesh cells that hold no compute shire (master, spare, PCIe, I/O shires)."""
        used = set(self.placement)
        return tuple((x, y) for y in range(self.mesh_rows) for x in range(self.mesh_cols)
                     if (x, y) not in used)

    def minion_id(self, shire, minion):
        """Global minion index ``shire << 5 | minion`` (10 bits) used as flit address."""
        return shire << 5 | minion
