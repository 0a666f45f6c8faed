"""Typed configuration of the PCIe GPU-to-GPU copy model.

One frozen dataclass holds every parameter.  Each default cites seed 001
(``001_fc1e3585d4842369.txt``) or the PCIe rule it comes from.  Fields marked
structural shape the RTL and key the Verilog build cache; the others are
written into the running model's registers.

Time is counted in cycles of one 1 GHz clock (1 ns), the clock of a 32 B
datapath that a Gen4 x16 port needs: 16 lanes x 16 GT/s = 32 B of symbols per
ns.  Bandwidths are bytes per cycle, which at 1 GHz are GB/s (1e9 B/s).
"""

from dataclasses import dataclass

from ..common.params import ConfigBase, runtime_field, structural_field

__all__ = ["PcieConfig", "SEED", "GT_PER_S", "CLOCK_MHZ", "gpu_switch", "gpu_socket"]

SEED = "001_fc1e3585d4842369.txt"
#: Transfer rate per lane of each supported generation, GT/s (PCIe Base
#: Specification: Gen3 8, Gen4 16, Gen5 32; all use 128b/130b encoding).
GT_PER_S = {3: 8, 4: 16, 5: 32}
#: The model's clock, MHz (one cycle = 1 ns).
CLOCK_MHZ = 1000.0

_hw = structural_field
_run = runtime_field


def gpu_switch(cfg, gpu):
    """Index of the PCIe switch GPU ``gpu`` hangs off (``gpus_per_switch`` per switch)."""
    return gpu // cfg.gpus_per_switch


def gpu_socket(cfg, gpu):
    """Socket (CPU) whose root complex GPU ``gpu``'s switch connects to."""
    return gpu_switch(cfg, gpu) // cfg.switches_per_socket


@dataclass(frozen=True)
class PcieConfig(ConfigBase):
    """Every parameter of the PCIe copy model.

    Units are in the names: ``_bytes`` bytes, ``_cycles`` cycles of the 1 GHz
    model clock (ns), ``_credits`` PCIe flow-control credits (a header credit
    is one TLP, a data credit 16 B).  Invalid values raise :class:`ValueError`
    naming the field and the allowed values.
    """

    # --- topology (seed 001, "1. Introduction", "3. Experimental Setup") -------
    sockets: int = _hw(2, f"{SEED}: 'Two machines, both dual-socket with eight GPUs'")
    switches_per_socket: int = _hw(1, f"{SEED}: 'four per side, each group reaching a single "
                                      "CPU through a PCIe switch'")
    gpus_per_switch: int = _hw(4, f"{SEED}: 'eight GPUs on a host, four per side'")
    # --- links (seed 001, "1. Introduction": 'PCIe 4.0 ... 16 lanes give 32 GB/s') ---
    generation: int = _run(4, f"{SEED}: 'PCIe 4.0 carries 16 GT/s per lane'")
    lanes: int = _run(16, f"{SEED}: 'GPUs on PCIe 4.0 x16'")
    # --- a fault the hardware tolerates: one GPU's link trained below the rest ----
    retrained_gpu: int = _run(-1, "GPU whose link to its switch trained narrower or at a "
                                  "lower generation than the others; -1: none (not in the "
                                  "seed)")
    retrained_lanes: int = _run(8, "lanes of retrained_gpu's link, at most lanes (not in "
                                   "the seed)")
    retrained_generation: int = _run(4, "PCIe generation of retrained_gpu's link, at most "
                                        "generation (not in the seed)")
    datapath_bytes: int = _hw(32, "bytes per cycle inside ports and switches: a Gen4 x16 "
                                  "port's 32 B per ns. The model's transmit datapath starts "
                                  "one TLP per beat, its framing and header in a beat of "
                                  "their own (a choice of the model, not a PCIe rule: "
                                  "byte-packed, a 128 B write is 152 B on the wire). With "
                                  "64 B beats that header beat takes 32 B of the link's time "
                                  "but a whole 1 ns cycle of the datapath, so a 128 B write "
                                  "needs 3 ns: Gen5 x16 copies are bound by the datapath at "
                                  "about 42 GB/s (128 B per 3 ns, less the sync headers and "
                                  "SKP ordered sets), not by the link")
    max_payload_bytes: int = _hw(128, "PCIe max payload size (MPS), bytes; 128 B, the "
                                      "smallest, as set when any device on the path "
                                      "supports no more (not in the seed); sizes the "
                                      "transmit queues, so structural")
    read_completion_boundary_bytes: int = _hw(128, "the root complexes' read completion "
                                                   "boundary (RCB), bytes: host memory "
                                                   "answers a read in completions of this "
                                                   "size (PCIe Base Specification: 64 or 128 B "
                                                   "at a root complex; not in the seed: 128 B "
                                                   "keeps them at max_payload_bytes). GPUs "
                                                   "answer in completions of max_payload_bytes, "
                                                   "a multiple of their 128 B RCB")
    link_latency_cycles: int = _run(20, "wire, PHY and data-link pipeline of a link, each "
                                        "way, ns (not in the seed)")
    switch_latency_cycles: int = _run(100, "PCIe switch cut-through latency, ns (typical "
                                           "data-sheet value; not in the seed)")
    ack_every_tlps: int = _run(4, "TLPs a receiver takes in per Ack DLLP (the PCIe AckNak "
                                  "latency timer's coalescing; not in the seed); every "
                                  "64 ns the link's sweep makes an Ack due for what came "
                                  "in, whatever the count, so a value above the TLPs a "
                                  "link takes in per 64 ns changes nothing")
    update_fc_every_credits: int = _run(8, "credits a receiver frees per UpdateFC DLLP "
                                           "(not in the seed); every 64 ns the link's sweep "
                                           "makes an UpdateFC due for what was freed, "
                                           "whatever the count")
    rx_header_credits: int = _hw(64, "header credits a link receiver advertises per class "
                                     "(posted, non-posted, completion), TLPs (PCIe flow "
                                     "control; not in the seed)")
    rx_data_credits: int = _hw(512, "data credits a link receiver advertises per class, 16 B "
                                    "each (8 KiB; not in the seed)")
    replay_tlps: int = _hw(64, "TLPs a link transmitter may have sent and not yet had "
                               "acknowledged (its replay buffer; not in the seed)")
    switch_buffer_beats: int = _hw(200, "beats per class a switch or root-complex input "
                                        "holds: enough to cover its latency (and the socket "
                                        "link's) at full rate, and a whole TLP where a slower "
                                        "link's port stores and forwards (not in the seed)")
    skp_interval_blocks: int = _run(372, "128b/130b blocks between SKP ordered sets (PCIe Base "
                                         "Specification: 370 to 375)")
    # --- the link between the sockets (seed 001, "3.2.3": cross-socket peer copies
    #     run at 18.5 GB/s with the copy engine, 12.5 with a push kernel) --------------
    socket_bytes_per_cycle: int = _run(36, f"{SEED}: peer-to-peer bandwidth of the socket "
                                           "link, B/ns; with socket_tlp_overhead_bytes "
                                           "calibrated on the cross-socket copy-engine (18.5 "
                                           "GB/s, 128 B writes) and push-kernel (12.5 GB/s, "
                                           "64 B writes) rows")
    socket_tlp_overhead_bytes: int = _run(121, f"{SEED}: link time per peer-to-peer TLP on "
                                               "the socket link on top of its payload, bytes "
                                               "(calibrated with socket_bytes_per_cycle: a "
                                               "128 B write then takes 249 / 36 = 6.92 "
                                               "cycles, 18.5 GB/s; a 64 B write 5.14, 12.45 "
                                               "GB/s)")
    socket_latency_cycles: int = _run(50, "socket link latency, ns (not in the seed)")
    socket_return_bytes: int = _run(15, f"{SEED}: link time each peer-to-peer TLP costs "
                                        "the socket link's other direction, bytes (its "
                                        "link-layer acknowledgement and credit return). "
                                        "Not in the seed: set on '3.2.3 ... Cross socket, "
                                        "8-GPU ring ... 17.4 ... 17.5', where the link "
                                        "carries peer-to-peer writes both ways (15 B gives "
                                        "17.45 GB/s, 16 B 17.39)")
    socket_read_bytes: int = _run(13312, f"{SEED}: bytes of peer-to-peer read each root "
                                         "complex may have outstanding across the socket "
                                         "link, reads sent and received together (its read "
                                         "trackers: 104 reads of 128 B). Not in the seed: "
                                         "sized on the one row it binds, '3.2.4 ... Cross "
                                         "socket, 8-GPU ring 22, 21, 22, 11' (pull), where "
                                         "each root complex carries one pull each way "
                                         "(12 KiB gives 10.1 GB/s, 13.5 KiB 11.3)")
    # --- host memory and copies staged through it (seed 001, "3.2.2 Optimization 1:
    #     double-buffered streaming through the CPU") ------------------------------
    root_host_bytes_per_cycle: int = _run(41, f"{SEED}: bytes per ns a root port moves "
                                              "between its PCIe link and host memory, "
                                              "writes in and read data out together; "
                                              "calibrated on the double-buffered same-socket "
                                              "pair (20.34 GB/s: each byte is written to "
                                              "and read from host memory through one root "
                                              "complex)")
    staging_chunk_bytes: int = _run(1 << 20, f"{SEED}: '3.2.2 ... 256 MB 1 MB 17.81': the "
                                             "chunk of a double-buffered copy, bytes; two "
                                             "pinned host buffers of one chunk each")
    pageable_chunk_bytes: int = _run(1 << 17, f"{SEED}: '3.2.1 Naive CUDA API call': "
                                              "cudaMemcpyAsync with peer access off stages "
                                              "through pageable host memory, which the "
                                              "driver copies through two pinned buffers of "
                                              "its own, of this many bytes each (not in the "
                                              "seed: calibrated on the same-socket row, 17.8 "
                                              "GB/s)")
    host_event_cycles: int = _run(1000, "ns from a chunk's copy finishing to the other "
                                        "GPU's copy engine seeing it (the host thread's "
                                        "CUDA event; not in the seed)")
    max_read_request_bytes: int = _run(512, "PCIe max read request size (MRRS), bytes: the "
                                            "copy engine's reads of host memory (the PCIe "
                                            "default, 512 B; not in the seed)")
    # --- copies ----------------------------------------------------------------
    kernel_write_bytes: int = _run(64, f"{SEED}: '3.2.4 ... int4 loads and stores': a "
                                       "warp's stores leave the SM as 64 B writes (not in the "
                                       "seed)")
    kernel_read_bytes: int = _run(128, f"{SEED}: '3.2.4 ... int4 loads and stores': a pull "
                                       "kernel's loads leave the SM as one read request per "
                                       "128 B line (not in the seed)")
    read_tags: int = _run(256, "reads a GPU keeps outstanding: every 8-bit tag (PCIe "
                               "Extended Tag Field; not in the seed)")
    watchdog_cycles: int = _hw(20000, "no TLP moved for this many cycles (1 ns each) "
                                                "ends a run (a model setting, not in the seed)")

    def __post_init__(self):
        def need(name, ok, allowed):
            if not ok:
                raise ValueError(f"{name} must be {allowed}, not {getattr(self, name)!r}")

        def integer(name, lo, hi):
            v = getattr(self, name)
            need(name, isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi,
                 f"an integer from {lo} to {hi}")

        def one_of(name, allowed):
            v = getattr(self, name)
            need(name, isinstance(v, int) and not isinstance(v, bool) and v in allowed,
                 "one of " + ", ".join(map(str, allowed)))

        integer("sockets", 1, 2)
        integer("switches_per_socket", 1, 2)
        integer("gpus_per_switch", 1, 4)
        one_of("generation", tuple(GT_PER_S))
        one_of("lanes", (1, 2, 4, 8, 16))
        one_of("datapath_bytes", (32, 64))
        integer("retrained_gpu", -1, self.gpus - 1)
        one_of("retrained_generation", tuple(GT_PER_S))
        one_of("retrained_lanes", (1, 2, 4, 8, 16))
        need("retrained_lanes", self.retrained_lanes * GT_PER_S[self.retrained_generation] // 8
             <= self.datapath_bytes, "a link no faster than the datapath")
        # a retrained link trains below the others (or as they do), never above
        need("retrained_lanes", self.retrained_gpu < 0 or self.retrained_lanes <= self.lanes,
             f"at most lanes ({self.lanes}) while retrained_gpu names a GPU (its link trains "
             "narrower than the others, not wider; retrained_lanes defaults to 8)")
        need("retrained_generation",
             self.retrained_gpu < 0 or self.retrained_generation <= self.generation,
             f"at most generation ({self.generation}) while retrained_gpu names a GPU (its "
             "link trains at a lower generation than the others, not a higher one; "
             "retrained_generation defaults to 4)")
        need("lanes", self.link_bytes_per_cycle <= self.datapath_bytes,
             f"at most {self.datapath_bytes * 8 // GT_PER_S[self.generation]} at Gen"
             f"{self.generation} with datapath_bytes={self.datapath_bytes} (the link may "
             "not outrun the datapath; Gen5 x16 needs datapath_bytes=64)")
        one_of("max_payload_bytes", (128, 256, 512, 1024, 2048, 4096))
        need("max_payload_bytes", self.max_payload_bytes >= self.datapath_bytes,
             f"at least datapath_bytes ({self.datapath_bytes})")
        one_of("read_completion_boundary_bytes", (64, 128))
        need("read_completion_boundary_bytes",
             self.read_completion_boundary_bytes >= self.datapath_bytes,
             f"at least datapath_bytes ({self.datapath_bytes})")
        integer("link_latency_cycles", 0, 60)
        integer("switch_latency_cycles", 0, 255)
        integer("ack_every_tlps", 1, 64)
        integer("update_fc_every_credits", 1, 255)
        integer("rx_header_credits", 1, 127)
        integer("rx_data_credits", 2, 2047)
        integer("replay_tlps", 1, 2047)
        integer("switch_buffer_beats", 8, 1024)
        integer("socket_bytes_per_cycle", 1, 255)
        integer("socket_tlp_overhead_bytes", 0, 255)
        integer("socket_latency_cycles", 0, 255)
        integer("socket_return_bytes", 0, 255)
        integer("socket_read_bytes", 32, 65535)
        loop = self.switch_latency_cycles + self.socket_latency_cycles + 16
        need("switch_buffer_beats", self.switch_buffer_beats >= loop,
             f"at least switch_latency_cycles + socket_latency_cycles + 16 ({loop}), to "
             "cover the credit loop into a root complex")
        # a slower retrained link's switch port stores and forwards whole TLPs
        tlp_beats = 1 + self.max_payload_bytes // self.datapath_bytes
        need("switch_buffer_beats", not self.retrained_slower
             or self.switch_buffer_beats >= tlp_beats,
             f"at least a whole TLP ({tlp_beats} beats of max_payload_bytes and its header) "
             "while retrained_gpu's link is slower than the others: its switch port stores "
             "and forwards")
        need("rx_data_credits",
             self.rx_data_credits * 16 >= self.max_payload_bytes,
             f"enough for one max_payload_bytes TLP ({self.max_payload_bytes // 16} or more)")
        # The link pays at most one SKP ordered set per 65-cycle period
        # (hdl/pcie/link.py), which holds up to 16 blocks (Gen5): a shorter
        # interval would be paid only in part.
        integer("skp_interval_blocks", 16, 4095)
        one_of("kernel_write_bytes", (32, 64, 128, 256))
        need("kernel_write_bytes", self.kernel_write_bytes <= self.max_payload_bytes
             and self.kernel_write_bytes >= self.datapath_bytes,
             f"from datapath_bytes ({self.datapath_bytes}) to max_payload_bytes "
             f"({self.max_payload_bytes})")
        one_of("kernel_read_bytes", (32, 64, 128, 256, 512, 1024, 2048, 4096))
        need("kernel_read_bytes", self.kernel_read_bytes >= self.datapath_bytes,
             f"at least datapath_bytes ({self.datapath_bytes})")
        need("socket_read_bytes", self.socket_read_bytes >= self.kernel_read_bytes,
             f"at least kernel_read_bytes ({self.kernel_read_bytes}): a read larger than "
             "the trackers never starts")
        integer("read_tags", 1, 256)
        integer("root_host_bytes_per_cycle", 1, 255)
        for name in ("staging_chunk_bytes", "pageable_chunk_bytes"):
            chunk = getattr(self, name)
            need(name, isinstance(chunk, int) and not isinstance(chunk, bool)
                 and chunk in {1 << k for k in range(12, 26)},
                 "a power of two from 4096 to 33554432 (32 MiB: a staged copy of four "
                 "chunks stays under 256 MiB)")
        integer("watchdog_cycles", 101, 1 << 30)
        integer("host_event_cycles", 0, 1 << 20)
        one_of("max_read_request_bytes", (128, 256, 512, 1024, 2048, 4096))
        need("max_read_request_bytes", self.max_read_request_bytes >= self.datapath_bytes,
             f"at least datapath_bytes ({self.datapath_bytes})")

    # --- derived ----------------------------------------------------------------
    @property
    def gpus(self):
        """GPUs in the machine (8 on the seed's)."""
        return self.sockets * self.switches_per_socket * self.gpus_per_switch

    @property
    def switches(self):
        """PCIe switches in the machine."""
        return self.sockets * self.switches_per_socket

    @property
    def tx_queue_beats(self):
        """Beats per class a link transmitter queues: two whole TLPs of
        ``max_payload_bytes``, since a TLP starts only once all of it is there."""
        return 2 * (self.max_payload_bytes // self.datapath_bytes + 1)

    @property
    def link_bytes_per_cycle(self):
        """Symbol bytes a link moves per 1 GHz cycle before 128b/130b (lanes x GT/s / 8)."""
        return self.lanes * GT_PER_S[self.generation] // 8

    @property
    def retrained_slower(self):
        """True when ``retrained_gpu`` names a GPU whose link moves fewer
        symbol bytes per cycle than the others: its switch port stores and
        forwards whole TLPs."""
        return (self.retrained_gpu >= 0 and self.retrained_lanes
                * GT_PER_S[self.retrained_generation] // 8 < self.link_bytes_per_cycle)
