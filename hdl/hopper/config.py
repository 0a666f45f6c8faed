"""Typed configuration of the Hopper DSM fabric and its experiments.

One frozen dataclass holds every parameter a user may set.  Each default is
the seed's model and cites its section of seed 000
(``000_8cf2435219a2167b.txt``).  Fields marked ``structural`` shape the RTL
and key the Verilog build cache; the others are written into the running
model's registers, so changing them needs no rebuild.
"""

import dataclasses
from dataclasses import dataclass

from ..common.params import ConfigBase, runtime_field, structural_field

__all__ = ["DsmConfig", "MAX_PAYLOAD_SIZES", "STRUCTURAL", "slot_of", "cpc_of", "tpc_of", "eg_of"]

SEED = "000_8cf2435219a2167b.txt"


_hw = structural_field
_run = runtime_field

#: Most sizes ``payload_kib`` may list: each is one run of every series of
#: an experiment (the seed's sweep has 11, 16 to 96 KiB in 8 KiB steps).
MAX_PAYLOAD_SIZES = 64

#: ``gx_planes`` spellings and the mask of GX planes each switches on (bit p:
#: GXp); the first spelling of a mask is the one a configuration keeps.
_GX_PLANES = {"gx0,gx1": 3, "gx1,gx0": 3, "gx0": 1, "gx1": 2}


@dataclass(frozen=True)
class DsmConfig(ConfigBase):
    """Every parameter of the GPC DSM model.

    Units are in the names: ``_bytes`` bytes, ``_cycles`` SM clock cycles,
    ``_flits`` flits of ``flit_bytes``.  Construct with keywords; invalid
    values raise :class:`ValueError` naming the field and the allowed values.
    """

    # --- structure (seed 000, "Ingress and Egress Are Organized Differently")
    cpcs: int = _hw(3, f"{SEED}: 3 CPC x 3 TPC x 2 SM hierarchy (Patent Fig. 21A-21D)")
    tpcs_per_cpc: int = _hw(3, f"{SEED}: 3 CPC x 3 TPC x 2 SM hierarchy")
    sms_per_tpc: int = _hw(2, f"{SEED}: 3 CPC x 3 TPC x 2 SM hierarchy")
    flit_bytes: int = _hw(32, f"{SEED}: 'A 32-Byte Lane with a 2/3 Per-SM Allocation'")
    # --- injection shaper (seed 000, "A 32-Byte Lane with a 2/3 Per-SM Allocation")
    shaper_flits: int = _run(2, f"{SEED}: hard limiter at 4/6 of a 32 B lane: 2 flits ...")
    shaper_cycles: int = _run(3, f"{SEED}: ... per 3 cycles (four lanes shared by six SMs)")
    vc_response_burst: int = _run(5, f"{SEED}: request and response VCs share each lane; the "
                                     "non-blocking response VC goes first, at most this many "
                                     "flits in a row while a request waits (0: round-robin). "
                                     "Calibrated on experiment B's load (15.37 B/cycle)")
    shared_vc: bool = _run(False, "unsafe test mode: responses ride the request VC, so the "
                                  "request/response protocol can deadlock (the chip keeps them "
                                  "apart; for testing the watchdog)")
    # --- packets (seed 000, "Why Bidirectional Reads Lose About One Quarter",
    #     "What NVIDIA's Patent Tells Us")
    read_response_bytes: int = _run(128, f"{SEED}: 128 B read-response quantum, four 32 B flits")
    store_packet_bytes: int = _run(256, f"{SEED}: long write = command flit + data flits; a "
                                        "warp-wide 8 B-per-thread store carries 256 B. "
                                        "Calibrated on experiment A's store (18.87 B/cycle)")
    tma_command_bytes: int = _run(16384, f"{SEED}: 'TMA divides a tile into commands of at most "
                                         "16 KiB'")
    # --- endpoint resources (seed 000: 'outstanding transaction counters'; depths, the
    #     read turnaround and the ACK threshold are not disclosed)
    max_outstanding_reads: int = _run(6, f"{SEED}: outstanding-transaction counters; with "
                                         "read_turnaround_cycles calibrated on experiment A's "
                                         "load (19.87 B/cycle)")
    max_unacked_store_flits: int = _run(64, f"{SEED}: outstanding-transaction counters (deep "
                                            "enough not to limit one SM)")
    ack_threshold_flits: int = _run(40, f"{SEED}: ACKs coalesced until a threshold or idle bus. "
                                        "Calibrated between experiment B's TMA (20.29 B/cycle) "
                                        "and the 2-SM ring of D (21.3), which both cover")
    read_turnaround_cycles: int = _run(9, f"{SEED}: cycles from a read command's arrival at "
                                          "the target SM to its first shared-memory read "
                                          "(calibrated with max_outstanding_reads on "
                                          "experiment A's and B's loads)")
    request_queue_flits: int = _hw(10, f"{SEED}: 'Read commands use a blocking request VC' "
                                       "shared with write commands and data: one FIFO of this "
                                       "many flits holds the SM's request-VC flits in issue order "
                                       "before the shaper, so a read command waits behind the "
                                       "write data queued ahead of it. Depth not disclosed; "
                                       "calibrated on experiment C's load plus TMA, opposite "
                                       "directions (29.26 B/cycle)")
    responder_queue: int = _hw(16, f"{SEED}: read commands queued at the target SM (depth "
                                   "inferred)")
    link_buffer_flits: int = _hw(10, f"{SEED}: per-hop credit depth is not disclosed; set on "
                                     "D's TMA rings, which the seed has scaling linearly from "
                                     "2 to 16 SMs. At 8 and 16 SMs the lanes run full; 10 per "
                                     "VC is where the 16-SM ring stops gaining (20.657, "
                                     "20.681, 20.717 B/SM-cycle at 8, 9, 10; 20.713 to 20.718 "
                                     "at 11, 12, 16, 32) and past which the 8-SM ring gains "
                                     "at most 0.05 % (20.650, 20.686, 20.699; 20.703 to "
                                     "20.709)")
    smem_bytes: int = _hw(200 * 1024, f"{SEED}: 'Each CTA allocates 200 KiB of dynamic shared memory'")
    watchdog_cycles: int = _hw(20000, "no progress for this many SM cycles ends a run "
                                                "as stuck (a model setting, not in the seed)")
    # --- run-time settings
    cluster_size: int = _run(2, f"{SEED}: one thread-block cluster of 1..16 CTAs")
    placement: tuple = _run((), "rank r on SM slot placement[r]; empty: rank r on slot r "
                                 "(CPC-major, then TPC, then SM)")
    gx_planes: str = _run("gx0,gx1", f"{SEED}: 'firmware may shut down one plane'")
    payload_kib: tuple = _run((16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96),
                              f"{SEED}: 'sweeps a single unique-address tile from 16 to 96 KiB' "
                              f"(2 to {MAX_PAYLOAD_SIZES} sizes)")
    sm_clock_ghz: float = _run(1.785, f"{SEED}: 'approximately 1.785-GHz maximum SM clock'")
    data_seed: int = _hw(0x1A5, "pattern seed of the payload data (9 bits; a "
                                     "model setting, not in the seed)")

    def __post_init__(self):
        def need(name, ok, allowed):
            if not ok:
                raise ValueError(f"{name} must be {allowed}, not {getattr(self, name)!r}")

        for name in ("cpcs", "tpcs_per_cpc", "sms_per_tpc", "shaper_flits", "shaper_cycles",
                     "max_outstanding_reads", "max_unacked_store_flits", "ack_threshold_flits",
                     "request_queue_flits", "responder_queue", "link_buffer_flits",
                     "watchdog_cycles"):
            value = getattr(self, name)
            need(name, isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                 "a positive integer")
        need("cpcs", self.cpcs == 3, "3 (the GPC has three CPCs)")
        need("sms_per_tpc", self.sms_per_tpc == 2, "2 (one SM per egress block of a CPC)")
        need("tpcs_per_cpc", self.tpcs_per_cpc == 3,
             "3 (a GPCARB egress block fans out to three SMs)")
        need("flit_bytes", self.flit_bytes in (16, 32, 64), "one of 16, 32, 64")
        need("shaper_flits", self.shaper_flits <= self.shaper_cycles,
             f"at most shaper_cycles ({self.shaper_cycles})")
        need("shaper_cycles", self.shaper_cycles <= 15, "an integer from 1 to 15")
        need("max_outstanding_reads", self.max_outstanding_reads <= 255, "an integer from 1 to 255")
        need("max_unacked_store_flits", self.max_unacked_store_flits <= 65535,
             "an integer from 1 to 65535")
        need("ack_threshold_flits", self.ack_threshold_flits <= 65535, "an integer from 1 to 65535")
        for name in ("request_queue_flits", "responder_queue", "link_buffer_flits"):
            need(name, getattr(self, name) <= 256, "an integer from 1 to 256")
        need("watchdog_cycles", self.watchdog_cycles <= 1 << 30, "an integer from 1 to 1073741824")
        need("read_turnaround_cycles", isinstance(self.read_turnaround_cycles, int)
             and 0 <= self.read_turnaround_cycles <= 255, "an integer from 0 to 255")
        for name in ("read_response_bytes", "store_packet_bytes", "tma_command_bytes"):
            value = getattr(self, name)
            need(name, isinstance(value, int) and value >= self.flit_bytes
                 and value % self.flit_bytes == 0,
                 f"a positive multiple of flit_bytes ({self.flit_bytes})")
        need("read_response_bytes", self.read_response_flits <= 8,
             f"at most 8 flits ({8 * self.flit_bytes} B)")
        for name in ("store_packet_bytes", "tma_command_bytes"):
            need(name, getattr(self, name) // self.flit_bytes <= 2048,
                 f"at most 2048 flits ({2048 * self.flit_bytes} B)")
        need("smem_bytes", isinstance(self.smem_bytes, int) and self.smem_bytes >= 1024
             and self.smem_bytes % self.flit_bytes == 0 and self.smem_bytes <= 256 * 1024,
             f"a multiple of flit_bytes ({self.flit_bytes}) from 1024 to 262144")
        need("cluster_size", isinstance(self.cluster_size, int)
             and 1 <= self.cluster_size <= 16, "an integer from 1 to 16")
        placement = tuple(self.placement)
        object.__setattr__(self, "placement", placement)
        if placement:
            hint = (f"; set cluster_size={len(placement)} with it to place a cluster of "
                    f"{len(placement)}" if 1 <= len(placement) <= 16 else "")
            need("placement", len(placement) == self.cluster_size,
                 f"{self.cluster_size} slots (one per rank of cluster_size{hint})")
            need("placement", all(isinstance(s, int) and 0 <= s < self.n_slots
                                  for s in placement), f"slots from 0 to {self.n_slots - 1}")
            need("placement", len(set(placement)) == len(placement),
                 "distinct slots (one CTA of 200 KiB per SM)")
        need("vc_response_burst", isinstance(self.vc_response_burst, int)
             and 0 <= self.vc_response_burst <= 15, "an integer from 0 to 15")
        need("shared_vc", isinstance(self.shared_vc, bool), "true or false")
        need("ack_threshold_flits", self.ack_threshold_flits <= self.max_unacked_store_flits,
             f"at most max_unacked_store_flits ({self.max_unacked_store_flits}), or stores "
             "stall until the target's injection path idles")
        planes = self.plane_enable
        need("gx_planes", planes != 0, "one of 'gx0,gx1', 'gx0', 'gx1' (at least one plane on)")
        # one spelling per setting (the first in _GX_PLANES), so "gx1,gx0" is
        # the same configuration as "gx0,gx1"
        object.__setattr__(self, "gx_planes",
                           next(k for k, v in _GX_PLANES.items() if v == planes))
        object.__setattr__(self, "payload_kib", tuple(self.payload_kib))
        if len(self.payload_kib) > MAX_PAYLOAD_SIZES:
            # each size is a run of every series: named by count, not listed
            raise ValueError(f"payload_kib must be at most {MAX_PAYLOAD_SIZES} sizes, "
                             f"not {len(self.payload_kib)}")
        need("payload_kib", len(self.payload_kib) >= 2
             and len(set(self.payload_kib)) == len(self.payload_kib),
             "at least two sizes, each given once")
        for kib in self.payload_kib:
            # Whether a size fits smem_bytes depends on how many regions an
            # experiment puts on one SM, so the experiment checks it.
            need("payload_kib", isinstance(kib, (int, float)) and kib > 0
                 and (kib * 1024) % 16 == 0,
                 "positive sizes in KiB, each a multiple of 16 B")
        # Sizes filling the same number of flits move the same data: no slope.
        need("payload_kib", len({-(-int(kib * 1024) // self.flit_bytes)
                                 for kib in self.payload_kib}) >= 2,
             f"at least two sizes that differ in flits of flit_bytes ({self.flit_bytes} B)")
        need("sm_clock_ghz", isinstance(self.sm_clock_ghz, (int, float))
             and 0.1 <= self.sm_clock_ghz <= 10, "a clock in GHz from 0.1 to 10")
        need("data_seed", isinstance(self.data_seed, int) and 0 <= self.data_seed < 512,
             "an integer from 0 to 511")

    # --- derived quantities -------------------------------------------------
    @property
    def n_slots(self):
        """SM slots in the GPC (18)."""
        return self.cpcs * self.tpcs_per_cpc * self.sms_per_tpc

    @property
    def ranks(self):
        """Tuple of SM slots, one per cluster rank."""
        return self.placement or tuple(range(self.cluster_size))

    @property
    def plane_enable(self):
        """Bit mask of enabled GX planes (bit p: GXp on)."""
        return _GX_PLANES.get(str(self.gx_planes).replace(" ", ""), 0)

    @property
    def read_response_flits(self):
        """Flits per read response (128 B / 32 B = 4); in the build's
        configuration also the line of the GPCMMU route hash, which rounds it
        up to a power of two (a 96 B response hashes lines of 4 flits)."""
        return self.read_response_bytes // self.flit_bytes

    @property
    def smem_words(self):
        """Shared memory per SM in flit-sized words."""
        return self.smem_bytes // self.flit_bytes


STRUCTURAL = tuple(f.name for f in dataclasses.fields(DsmConfig) if f.metadata.get("structural"))


def slot_of(cpc, tpc, sm, cfg=None):
    """SM slot index of (cpc, tpc, sm): CPC-major, then TPC, then SM (0..17)."""
    cfg = cfg or DsmConfig()
    return (cpc * cfg.tpcs_per_cpc + tpc) * cfg.sms_per_tpc + sm


def cpc_of(slot, cfg=None):
    """CPC of an SM slot."""
    cfg = cfg or DsmConfig()
    return slot // (cfg.tpcs_per_cpc * cfg.sms_per_tpc)


def tpc_of(slot, cfg=None):
    """TPC (within its CPC) of an SM slot."""
    cfg = cfg or DsmConfig()
    return (slot // cfg.sms_per_tpc) % cfg.tpcs_per_cpc


def eg_of(slot, cfg=None):
    """GPCARB egress block (0 or 1, within the CPC) that delivers to an SM slot.

    The two SMs of a TPC land on different egress blocks (seed 000, "Ingress
    and Egress Are Organized Differently": SM0 on EG0, SM1 on EG1).
    """
    cfg = cfg or DsmConfig()
    return slot % cfg.sms_per_tpc
