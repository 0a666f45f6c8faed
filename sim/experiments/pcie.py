"""Experiments of the PCIe copy machine (seed ``001_fc1e3585d4842369.txt``).

Every experiment runs copies between GPU pairs at once, sweeps the bytes each
pair copies, and fits ``cycles = alpha + beta * bytes`` per pair from the
RTL's own time stamps (the source's first write to the last payload beat at
the destination); ``1 / beta`` bytes per 1 GHz cycle is the pair's
unidirectional bandwidth in GB/s, as in the seed's tables.
"""

import dataclasses
from dataclasses import dataclass

from hdl.pcie.config import CLOCK_MHZ, GT_PER_S, PcieConfig, gpu_socket
from hdl.pcie.gpu import TAG_CLASH_BIT, GpuMode, GpuReg
from hdl.pcie.system import GLOBAL, counter_names, crossbars, system_registers
from hdl.pcie.tlp import HOST_NODE, STAGE_SHIFT, FcClass, TlpType
from sim import stall
from sim.experiments import (SetByExperiment, load_reference, miscounted_cycles, sticky_fault,
                             unfinished)
from sim.fit import error_pct, fit_affine

__all__ = ["EXPERIMENTS", "Experiment", "ExperimentError", "SIZE_FIELDS", "UNUSED_BY_MODE",
           "build_runs", "check_fabric_overrides", "check_overrides", "plan", "analyse",
           "check_run", "reference", "copy_run", "scenarios", "slowdown_bound"]

FABRIC = "pcie"
#: Bytes each pair copies in the sweep (steady state from the first).
SWEEP_BYTES = (65536, 131072, 262144)


class ExperimentError(RuntimeError):
    """A run did not finish cleanly or moved data wrongly."""


def reference():
    """The seed values in ``sim/reference/pcie.toml`` as a nested dict."""
    return load_reference("pcie")


#: Key of a scenario's sub-table in ``sim/reference/pcie.toml`` holding its
#: row as measured on the seed's second machine (section 3: eight RTX 4090
#: without peer access, the same two-socket PCIe 4.0 x16 layout), and the
#: label its result rows start with.
RTX4090_KEY = "rtx4090"
RTX4090_MACHINE = "RTX 4090 machine"


@dataclass(frozen=True)
class Experiment:
    """One experiment: copies over each scenario of the reference table
    ``name``, by ``mode`` (:class:`~hdl.pcie.gpu.GpuMode`) in TLPs of
    ``tlp`` (a field of the configuration: ``max_payload_bytes`` for the copy
    engine, ``kernel_write_bytes`` or ``kernel_read_bytes`` for a kernel); a
    staged copy's chunk is the field ``chunk`` (``staging_chunk_bytes`` for the
    seed's own double buffering, ``pageable_chunk_bytes`` for the driver's).
    ``scenarios``, if given, replaces the reference table: a function of the
    configuration giving entries like the table's, with ``values`` of
    ``None`` (no seed number: reported for information) and ``set``,
    configuration fields that scenario changes."""

    name: str
    title: str
    mode: GpuMode
    tlp: str
    notes: tuple = ()
    chunk: str = "staging_chunk_bytes"
    scenarios: object = None

    def run_config(self, cfg):
        """``cfg`` with this experiment's staging chunk in
        ``staging_chunk_bytes``, the field the runs' registers take it from."""
        return dataclasses.replace(cfg, staging_chunk_bytes=getattr(cfg, self.chunk))

    def sweep(self, cfg):
        """Bytes each pair copies, one run each: :data:`SWEEP_BYTES`, or for a
        staged copy 2 and 4 chunks (field ``chunk``), so the fitted slope is
        two chunks of the double buffering's steady state.  (A run of 3 chunks
        would not move the slope: a least-squares line through three equally
        spaced sizes has the slope of its outer two points.)"""
        if self.mode == GpuMode.STAGED:
            return tuple(k * getattr(cfg, self.chunk) for k in (2, 4))
        return SWEEP_BYTES


def copy_run(cfg, label, pairs, nbytes, tlp_bytes, meta=None, mode=GpuMode.PUSH):
    """Register writes of one run: each ``(src, dst)`` of ``pairs`` copies
    ``nbytes`` from GPU ``src`` to GPU ``dst``, pushed by ``src`` in writes of
    ``tlp_bytes``, pulled by ``dst`` in reads of ``tlp_bytes``, or staged
    through host memory, ``dst`` reading the staging buffers in reads of
    ``tlp_bytes`` (``mode``); every other GPU idles.

    Raises
    ------
    ValueError
        If a pair names a GPU that does not exist, a GPU paired with itself, a
        GPU that sends or receives twice, or sizes the GPU cannot do, or, for
        a staged copy, if ``host_event_cycles`` leaves the watchdog no room
        (twice it plus 100 must stay below ``watchdog_cycles``); the message
        names the field and the allowed values.
    """
    if not (isinstance(mode, int) and not isinstance(mode, bool)
            and mode in set(GpuMode)):
        raise ValueError(f"mode must be one of {', '.join(m.name for m in GpuMode)}, "
                         f"not {mode!r}")
    mode = GpuMode(mode)
    try:
        pairs = list(pairs)
    except TypeError:
        raise ValueError(f"pairs must be a list of (source, destination) GPU pairs, "
                         f"not {pairs!r}") from None
    if not pairs:
        raise ValueError("pairs must name at least one (source, destination) GPU pair")
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                and all(isinstance(g, int) and not isinstance(g, bool) for g in pair)):
            raise ValueError(f"pairs must be (source, destination) GPU pairs, not {pair!r}")
        src, dst = pair
        for g in pair:
            if not 0 <= g < cfg.gpus:
                raise ValueError(f"pair GPU must be from 0 to {cfg.gpus - 1}, not {g}")
        if src == dst:
            raise ValueError(f"pair must name two different GPUs, not [{src}, {dst}]")
    for i, what in ((0, "send"), (1, "receive")):
        ends = [p[i] for p in pairs]
        if len(set(ends)) != len(ends):
            raise ValueError(f"pairs must give each GPU at most one copy to {what}, not {pairs}")
    most = cfg.max_payload_bytes if mode == GpuMode.PUSH else 4096
    staged = mode == GpuMode.STAGED
    if not isinstance(tlp_bytes, int) or tlp_bytes & (tlp_bytes - 1) \
            or not cfg.datapath_bytes <= tlp_bytes <= most:
        # a read of a power of two stays inside one 4 KiB page, as PCIe requires
        raise ValueError(f"TLP bytes must be a power of two from {cfg.datapath_bytes} to "
                         f"{most}{' (max_payload_bytes)' if mode == GpuMode.PUSH else ''}, "
                         f"not {tlp_bytes!r}")
    unit = max(tlp_bytes, cfg.staging_chunk_bytes) if staged else tlp_bytes
    limit = 1 << STAGE_SHIFT if staged else 1 << 31
    if not (isinstance(nbytes, int) and 0 < nbytes < limit and nbytes % unit == 0):
        raise ValueError(f"bytes must be a positive multiple of {unit}"
                         f"{' (staging_chunk_bytes)' if staged else ''} below "
                         f"2**{limit.bit_length() - 1}, not {nbytes!r}")
    if staged and cfg.host_event_cycles * 2 + 100 >= cfg.watchdog_cycles:
        # only a staged copy waits for the host's events (a copy of another
        # mode ignores host_event_cycles, so any watchdog_cycles will do)
        raise ValueError(f"host_event_cycles must be at most {(cfg.watchdog_cycles - 101) // 2} "
                         f"with watchdog_cycles {cfg.watchdog_cycles} (2 x host_event_cycles + "
                         "100 below it): a staged copy waits up to twice as long for an event "
                         f"with nothing moving, not {cfg.host_event_cycles}")
    writes = [(GLOBAL | reg, value) for reg, value in system_registers(cfg).items()]
    expect = {g: 0 for g in range(cfg.gpus)}
    for _, dst in pairs:
        expect[dst] += nbytes
    came = {d: s for s, d in pairs}
    # the GPU whose copy engine runs each copy, and the peer it names
    engine = came if mode == GpuMode.PULL else dict(pairs)
    for g in range(cfg.gpus):
        writes += [(g << 4 | GpuReg.PEER, engine.get(g, 0)),
                   (g << 4 | GpuReg.BYTES, nbytes if g in engine else 0),
                   (g << 4 | GpuReg.TLP_BYTES, tlp_bytes),
                   (g << 4 | GpuReg.MODE, int(mode)),
                   (g << 4 | GpuReg.TAGS, cfg.read_tags),
                   (g << 4 | GpuReg.EXPECT, expect[g]),
                   (g << 4 | GpuReg.SRC, came.get(g, 0xF))]
    return {"label": label, "writes": writes, "pairs": [list(p) for p in pairs],
            "bytes": nbytes, "expect": expect, "mode": int(mode), "meta": meta or {}}


def scenarios(exp, cfg):
    """``{scenario: entry}`` of ``exp`` under ``cfg``: its own scenarios, or
    its seed table in ``sim/reference/pcie.toml``."""
    return exp.scenarios(cfg) if exp.scenarios is not None else reference()[exp.name]


#: Run-time sizes that only some experiments use: each experiment's TLP field
#: (:attr:`Experiment.tlp`) and, for a staged copy, its chunk field
#: (:attr:`Experiment.chunk`).
SIZE_FIELDS = ("max_read_request_bytes", "kernel_write_bytes", "kernel_read_bytes",
               "staging_chunk_bytes", "pageable_chunk_bytes")


#: Run-time fields a copy mode never reads, with why: a push only writes
#: (no read, no host memory), a pull reads peer memory, not host memory.
#: (Checked: with read_tags 1, socket_read_bytes 128,
#: root_host_bytes_per_cycle 1 and host_event_cycles 0, peer_copy,
#: kernel_push and link_faults count the same cycles, as does kernel_pull
#: with the last two.)
UNUSED_BY_MODE = {
    GpuMode.PUSH: (("read_tags", "socket_read_bytes", "root_host_bytes_per_cycle",
                    "host_event_cycles"), "only write, reading nothing"),
    GpuMode.PULL: (("root_host_bytes_per_cycle", "host_event_cycles"),
                   "read peer memory, not host memory"),
}


def check_overrides(cfg, exp, explicit=()):
    """Refuse a ``--set`` of a field that ``exp`` sets itself or does not use,
    which would otherwise be recorded in the result but have no effect: a
    copy staged through another chunk field than ``staging_chunk_bytes`` (the
    pageable copy takes ``pageable_chunk_bytes``), a size of
    :data:`SIZE_FIELDS` that is neither ``exp``'s TLP field nor its staged
    chunk, a field its copy mode never reads (:data:`UNUSED_BY_MODE`), and
    the fields its scenarios set (the link faults retrain GPU 0's link).
    ``explicit`` holds the names of the fields the user set.

    Raises
    ------
    sim.experiments.SetByExperiment
        Naming the field, what sets it instead (or what ``exp`` uses) and the
        value given.
    ValueError
        As :func:`check_fabric_overrides`.
    """
    name = f"pcie.{exp.name}"
    if "staging_chunk_bytes" in explicit and exp.chunk != "staging_chunk_bytes":
        raise SetByExperiment(f"staging_chunk_bytes must be left unset for {name}, which stages "
                              f"through {exp.chunk} (set that instead), not "
                              f"{cfg.staging_chunk_bytes}")
    used = {exp.tlp} | ({exp.chunk} if exp.mode == GpuMode.STAGED else set())
    for field in SIZE_FIELDS:
        if field in explicit and field not in used:
            raise SetByExperiment(f"{field} must be left unset for {name}, which does not use "
                                  f"it (it uses {', '.join(sorted(used))}), not "
                                  f"{getattr(cfg, field)}")
    unused, why = UNUSED_BY_MODE.get(exp.mode, ((), ""))
    for field in unused:
        if field in explicit:
            raise SetByExperiment(f"{field} must be left unset for {name}, whose copies {why} "
                                  f"(it has no effect there), not {getattr(cfg, field)}")
    for field in sorted({k for entry in scenarios(exp, cfg).values()
                         for k in entry.get("set", {})}):
        if field in explicit:
            raise SetByExperiment(f"{field} must be left unset for {name}, whose scenarios set "
                                  f"it themselves, not {getattr(cfg, field)}")
    check_fabric_overrides(cfg, explicit)


def check_fabric_overrides(cfg, explicit=()):
    """Refuse a ``--set`` that has no effect on any experiment:
    ``retrained_lanes`` or ``retrained_generation`` while ``retrained_gpu``
    names no GPU.  ``explicit`` holds the names of the fields the user set.

    Raises
    ------
    ValueError
        Naming the field and what it needs.
    """
    for field in ("retrained_lanes", "retrained_generation"):
        if field in explicit and cfg.retrained_gpu < 0:
            raise ValueError(f"{field} needs retrained_gpu set to a GPU from 0 to "
                             f"{cfg.gpus - 1} (it is -1: no link retrained), else it has no "
                             f"effect; not {getattr(cfg, field)} alone")


def build_runs(cfg, exp):
    """Every run of ``exp`` under ``cfg``: each scenario at each size of
    :meth:`Experiment.sweep`.

    Raises
    ------
    ValueError
        If a scenario names a GPU the configuration does not have, or the
        fields it sets do not suit the configuration (the message names the
        scenario).
    """
    runs = []
    size = getattr(cfg, exp.tlp)
    sweep = exp.sweep(cfg)
    # from the configuration analyse has too, not the runs' (their chunk field)
    scenario_table = scenarios(exp, cfg)
    cfg = exp.run_config(cfg)
    for name, entry in scenario_table.items():
        pairs = [tuple(p) for p in entry["pairs"]]
        need = max(max(p) for p in pairs) + 1
        if need > cfg.gpus:
            raise ValueError(f"sockets x switches_per_socket x gpus_per_switch must give at "
                             f"least {need} GPUs for {exp.name}'s {name} scenario, not "
                             f"{cfg.gpus}")
        try:
            run_cfg = dataclasses.replace(cfg, **entry.get("set", {}))
        except ValueError as error:
            raise ValueError(f"{exp.name}'s {name} scenario: {error}") from None
        for nbytes in sweep:
            runs.append(copy_run(run_cfg, f"{name}: {nbytes} B per pair", pairs, nbytes, size,
                                 {"scenario": name}, exp.mode))
    return runs


def plan(cfg, runs):
    """The JSON plan handed to ``testbenches.pcie``.

    A run may take ``run_cycles`` cycles (ns) before it is called still
    moving (a live run the watchdog cannot stop): ``watchdog_cycles`` plus 4
    ns per byte of its largest copy times its pairs (0.25 B/ns, far below
    any copy at the seed's settings), times :func:`slowdown_bound`."""
    longest = max(r["bytes"] for r in runs) * max(len(r["pairs"]) for r in runs)
    return {"counter_names": counter_names(cfg), "runs": runs,
            "run_cycles": cfg.watchdog_cycles + 4 * longest * slowdown_bound(cfg)}


def slowdown_bound(cfg):
    """An integer of at least 1 that a run's cycle limit is multiplied by (a
    margin, never a result): the most that one bottleneck of ``cfg`` is
    narrower than the seed's, as a ratio rounded up.  The bottlenecks are the
    slowest GPU link (lanes times GT/s, a retrained link included), the
    socket link's bytes per cycle, its peer-read room
    (``socket_read_bytes``) and a GPU's read tags (``read_tags``).  Longer
    latencies or smaller TLPs are not counted: a run they slow past its
    limit says to raise ``watchdog_cycles``, which the limit grows with."""
    seed = PcieConfig()
    link = GT_PER_S[cfg.generation] * cfg.lanes
    if cfg.retrained_gpu >= 0:
        link = min(link, GT_PER_S[cfg.retrained_generation] * cfg.retrained_lanes)
    ratios = ((GT_PER_S[seed.generation] * seed.lanes, link),
              (seed.socket_bytes_per_cycle, cfg.socket_bytes_per_cycle),
              (seed.socket_read_bytes, cfg.socket_read_bytes),
              (seed.read_tags, cfg.read_tags))
    return max(1, *(-(-a // b) for a, b in ratios))


def stall_blocks(cfg):
    """The machine's switches and root complexes as :class:`sim.stall.Block`
    (VCs are the flow-control classes ``P``, ``NP``, ``CPL``)."""
    return [stall.Block(name, tuple(f"in{p}" for p in range(ports)),
                        tuple(f"out{p}" for p in range(ports)), tuple(c.name for c in FcClass))
            for name, ports in crossbars(cfg)]


def first_bad(counters, gpu):
    """The first beat ``gpu`` found wrong, from its ``first_bad`` counters:
    ``"<type> <class> beat from <node> to <node>, address 0x..., cycle N"``."""
    info = counters.get(f"gpu{gpu}.first_bad", 0)
    if not info >> 31:
        return "not recorded"
    cycle = counters.get(f"gpu{gpu}.first_bad_cycle", 0)
    fc = FcClass(info >> 8 & 3).name if info >> 8 & 3 < len(FcClass) else "?"
    if info & TAG_CLASH_BIT:
        return (f"a read gpu{gpu} issued to {_node(info >> 16 & 0xFF)} while all 256 tags were "
                f"in use, address {counters.get(f'gpu{gpu}.first_bad_addr', 0):#x}, cycle "
                f"{cycle}")
    if fc == "NP":
        return f"a non-posted TLP that is not a memory read, cycle {cycle}"
    kind = TlpType(info >> 10 & 3).name if info >> 10 & 3 < len(TlpType) else "?"
    return (f"{kind} {fc} beat from {_node(info & 0xFF)} to {_node(info >> 16 & 0xFF)}, "
            f"address {counters.get(f'gpu{gpu}.first_bad_addr', 0):#x}, cycle {cycle}")


def _node(n):
    return f"host memory {n - HOST_NODE}" if n >= HOST_NODE else f"gpu{n}"


def check_run(cfg, run, got):
    """Raise :class:`ExperimentError` unless the run ended cleanly with every
    byte where it belongs, the socket link's read trackers never held more
    than ``socket_read_bytes``, each GPU link's payload count agrees with its
    GPU's bytes sent (up) and taken in (down), and no TLP moved once it was
    done (``got``'s ``after_done``: a late duplicate lands after the counters
    are read), the cycle counter and the GPUs' time stamp ``now`` advanced as
    the simulator's clock did, and every sender holds all its credits,
    every link direction has every TLP it sent acknowledged and the socket
    link's read trackers hold nothing once the machine is at rest (``got``'s
    ``settled``: a lost or doubled credit, a wrong Ack or a leaked tracker
    byte changes no bandwidth while others remain, so it shows only there)."""
    label = run["label"]
    c = got["counters"]
    if c["overflow"]:
        raise ExperimentError(sticky_fault(label, got["ended"], c["cycles"],
                                         "a buffer overflowed, or a link receiver held more "
                                         "beats than the TLPs whose credits are not yet free, "
                                         "or a link transmitter more TLPs unacknowledged than "
                                         "replay_tlps (flow control broken)"))
    # a read enters the socket link only while both trackers have its room
    if (peak := c.get("socket.read_peak", 0)) > cfg.socket_read_bytes:
        raise ExperimentError(f"{label}: the socket link's peer-read trackers held {peak} B at "
                              f"once, more than socket_read_bytes ({cfg.socket_read_bytes}): a "
                              "read entered without room")
    if got["ended"] != "done":
        waiting = [f"gpu{g} has {c[f'gpu{g}.rx_bytes']} of {run['expect'][g]} B"
                   for g in range(cfg.gpus) if c[f"gpu{g}.rx_bytes"] != run["expect"][g]]
        if c.get("socket.read_held"):
            # a read waiting for tracker room waits on no credit the snapshot shows
            waiting.append(f"the socket link's peer-read trackers hold "
                           f"{c['socket.read_held']} of {cfg.socket_read_bytes} B")
        raise ExperimentError(unfinished(label, got["ended"], c["cycles"],
                                         stuck="run ended {ended}",
                                         watchdog=cfg.watchdog_cycles)
                              + "; ".join(waiting + stall.describe(c, stall_blocks(cfg))))
    if wrong := miscounted_cycles(label, got):
        raise ExperimentError(wrong)
    # The bandwidths are bytes over the GPUs' ``now`` stamps; ``now`` is read
    # just before the start pulse, one clock edge before the testbench's
    # count of the run's cycles begins.
    if "clock_cycles" in got and "now" in c and c["now"] != got["clock_cycles"] + 1:
        raise ExperimentError(f"{label}: the GPUs' time stamp advanced {c['now']} cycles over "
                              f"the run, the simulator's clock {got['clock_cycles'] + 1}: the "
                              "time stamp counter is wrong")
    for g in range(cfg.gpus):
        if c[f"gpu{g}.errors"]:
            raise ExperimentError(f"{label}: gpu{g}.errors = {c[f'gpu{g}.errors']}: payload "
                                  "data wrong, writes from one source out of order, or a read "
                                  "tag in use twice; first: " + first_bad(c, g))
        if c[f"gpu{g}.rx_bytes"] != run["expect"][g]:
            raise ExperimentError(f"{label}: gpu{g} took in {c[f'gpu{g}.rx_bytes']} B, "
                                  f"expected {run['expect'][g]}: data lost or duplicated")
    sent = {s: run["bytes"] for s, _ in run["pairs"]}
    for g in range(cfg.gpus):
        if c[f"gpu{g}.tx_bytes"] != sent.get(g, 0):
            raise ExperimentError(f"{label}: gpu{g} sent {c[f'gpu{g}.tx_bytes']} B, expected "
                                  f"{sent.get(g, 0)}")
        # the GPU's own link counts every payload byte it sends and takes in
        for direction, what in (("up", "tx_bytes"), ("down", "rx_bytes")):
            link = f"gpu{g}.{direction}.payload_bytes"
            if c[link] != c[f"gpu{g}.{what}"]:
                raise ExperimentError(f"{label}: {link} = {c[link]} but gpu{g}.{what} = "
                                      f"{c[f'gpu{g}.{what}']}: the link and the GPU count "
                                      "different payloads")
    staged = {k: 0 for k in range(cfg.sockets)}
    if run["mode"] == GpuMode.STAGED:
        for s, _ in run["pairs"]:
            staged[gpu_socket(cfg, s)] += run["bytes"]
    for k, want in staged.items():
        if c[f"host{k}.errors"]:
            raise ExperimentError(f"{label}: host{k}.errors = {c[f'host{k}.errors']}: a staging "
                                  "buffer written out of order or with wrong data, or read "
                                  "before its chunk landed or after it was overwritten")
        for what in ("rx_bytes", "tx_bytes"):
            if c[f"host{k}.{what}"] != want:
                raise ExperimentError(f"{label}: host{k}.{what} = {c[f'host{k}.{what}']} B, "
                                      f"expected {want}: staged data lost or duplicated")
    if moved := got.get("after_done"):
        raise ExperimentError(f"{label}: traffic moved after the run was done ("
                              + ", ".join(f"{k} {v:+d}" for k, v in moved.items())
                              + "): a TLP duplicated or delayed past the end of its copy")
    if away := credits_away(cfg, got.get("settled", {})):
        raise ExperimentError(f"{label}: credits not home at rest at {', '.join(away)} (a "
                              "credit lost or returned twice on that link)")
    if unacked := {k.removesuffix(".unacked_tlps"): v for k, v in got.get("settled", {}).items()
                   if k.endswith(".unacked_tlps") and v}:
        raise ExperimentError(f"{label}: TLPs sent but never acknowledged at rest ("
                              + ", ".join(f"{k} {v}" for k, v in unacked.items())
                              + "): an Ack DLLP lost or carrying the wrong sequence number")
    if held := got.get("settled", {}).get("socket.read_held"):
        raise ExperimentError(f"{label}: the socket link's peer-read trackers hold {held} B at "
                              "rest: a read's room never freed (a completion lost or "
                              "miscounted on the socket link)")


def credits_away(cfg, settled):
    """``sender.class`` of every bit set in the ``credits_away`` counters of
    ``settled``: the switches' and root complexes' by output
    (:func:`sim.stall.credits_away`), the root ports' as ``sw<s>.up`` /
    ``sw<s>.down``, the rest by class alone."""
    blocks = stall_blocks(cfg)
    away = stall.credits_away(settled, blocks)
    crossbar = {f"{b.name}.credits_away" for b in blocks}
    root_ports = {f"sw{s}.credits_away" for s in range(cfg.switches)}
    for name, bits in settled.items():
        if name in crossbar or not bits or not name.endswith(".credits_away"):
            continue
        sender = name.removesuffix(".credits_away")
        root_port = name in root_ports
        for b in range(bits.bit_length()):
            if bits >> b & 1:
                side = ("up.", "down.")[b // len(FcClass)] if root_port else ""
                away.append(f"{sender}.{side}{FcClass(b % len(FcClass)).name}")
    return away


def topology(cfg, got):
    """The machine's nodes and links for the report's diagram, each link with
    the share of its time that carried a beat in each direction during the
    run ``got`` (``ab``: from node ``a`` to node ``b``)."""
    c = got["counters"]
    gps, per_socket = cfg.gpus_per_switch, cfg.switches_per_socket
    # GPUs in a row, a half gap between switches; each parent centred over its children
    gpu_x = [g + 0.5 * (g // gps) for g in range(cfg.gpus)]
    switch_x = [sum(gpu_x[s * gps:(s + 1) * gps]) / gps for s in range(cfg.switches)]
    cpu_x = [sum(switch_x[k * per_socket:(k + 1) * per_socket]) / per_socket
             for k in range(cfg.sockets)]
    nodes = ([{"name": f"GPU{g}", "x": x, "y": 2} for g, x in enumerate(gpu_x)]
             + [{"name": f"switch{s}", "x": x, "y": 1} for s, x in enumerate(switch_x)]
             + [{"name": f"CPU{k}", "x": x, "y": 0} for k, x in enumerate(cpu_x)])

    def share(link, d):
        # the link's own count of the lane bytes its beats took, over its capacity
        lane = c[f"{link}.{d}.lane_bytes"]
        return min(1.0, c[f"{link}.{d}.wire_bytes"] / lane) if lane else 0.0

    links = [{"a": f"GPU{g}", "b": f"switch{g // gps}", "ab": share(f"gpu{g}", "up"),
              "ba": share(f"gpu{g}", "down")} for g in range(cfg.gpus)]
    links += [{"a": f"switch{s}", "b": f"CPU{s // per_socket}", "ab": share(f"sw{s}", "up"),
               "ba": share(f"sw{s}", "down")} for s in range(cfg.switches)]
    if cfg.sockets == 2:
        links.append({"a": "CPU0", "b": "CPU1",
                      "ab": min(1.0, c["socket01.busy"] / max(c["cycles"], 1)),
                      "ba": min(1.0, c["socket10.busy"] / max(c["cycles"], 1))})
    return {"nodes": nodes, "links": links,
            "legend": "link utilisation over the whole run, up (towards the CPU; CPU0 to "
                      "CPU1) / down: share of the link's time carrying a beat, from the "
                      "start until the last copy is done (a copy that ends early leaves "
                      "its links idle for the rest)"}


def analyse(cfg, exp, runs, results, simulator):
    """Check every run, fit every pair's bandwidth and build the result JSON:
    one row per pair and seed number, the seed's A800 machine first, then
    its RTX 4090 machine where the reference table gives that row too
    (:data:`RTX4090_KEY`).

    Raises
    ------
    ExperimentError
        If a run is missing, stuck, or moved data wrongly.
    ValueError
        If a fit cannot be made from the runs (:func:`sim.fit.fit_affine`).
    """
    for run, got in zip(runs, results):     # in order: the first run that went wrong
        check_run(cfg, run, got)
    if len(results) != len(runs):
        raise ExperimentError(f"{exp.name}: {len(results)} of {len(runs)} runs came back")
    ref = scenarios(exp, cfg)
    series, rows, by_scenario = [], [], {}
    for name, entry in ref.items():
        mine = [(r, g) for r, g in zip(runs, results) if r["meta"]["scenario"] == name]
        got_bw = []
        for k, (src, dst) in enumerate(entry["pairs"]):
            # from the copy engine's first TLP to the last byte landing
            engine = dst if exp.mode == GpuMode.PULL else src
            points = [(r["bytes"], g["counters"][f"gpu{dst}.last_rx"]
                       - g["counters"][f"gpu{engine}.first_tx"]) for r, g in mine]
            fit = fit_affine([p for p, _ in points], [c for _, c in points])
            gbps = fit.bytes_per_cycle * CLOCK_MHZ / 1e3
            got_bw.append(gbps)
            where = ("same socket" if gpu_socket(cfg, src) == gpu_socket(cfg, dst)
                     else "cross socket")
            series.append({"name": f"{name} [{src},{dst}]",
                           "points": [{"payload_bytes": p, "cycles": c} for p, c in points],
                           "fit": fit.to_json()})
            # the seed's row, then the same row on its RTX 4090 machine, if any
            for machine, seed in (("", entry), (f"{RTX4090_MACHINE}, ",
                                                 entry.get(RTX4090_KEY))):
                if seed is None:
                    continue
                want = seed["values"][k]
                row = {"quantity": f"{machine}{name}: [{src},{dst}] ({where})", "model": gbps,
                       "reference": want, "unit": entry["unit"], "source": seed["source"]}
                if want is None:
                    row["target"] = "information"
                else:
                    row.update(error_pct=error_pct(gbps, want),
                               tolerance_pct=seed["tolerance_pct"],
                               target=f"within {seed['tolerance_pct']:g} %")
                rows.append(row)
        by_scenario[name] = {"pairs": entry["pairs"], "gb_per_s": got_bw}
    config = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    notes = list(exp.notes)
    last = list(ref)[-1]
    shown = max(((r, g) for r, g in zip(runs, results) if r["meta"]["scenario"] == last),
                key=lambda rg: rg[0]["bytes"], default=None)
    extra = {}
    if shown is not None:
        extra["topology"] = dict(topology(cfg, shown[1]),
                                 title=f"{exp.title}: {last}, "
                                       f"{max(exp.sweep(cfg))} B per pair")
    return {"fabric": FABRIC, "experiment": exp.name, "title": exp.title,
            "simulator": simulator, "config": config, "series": series, "rows": rows,
            "notes": notes, "scenarios": by_scenario, **extra}


_MECHANISM = (
    "Why one pair reaches about 80 % of 32 GB/s with 128 B writes or completions, and "
    "65 % with 64 B writes: a Gen4 x16 link moves 32 B per ns of "
    "symbols, 128b/130b encoding leaves 64 cycles in 65 for data, and a SKP ordered set "
    "every 372 blocks takes a little more (31.4 GB/s). The model's transmit datapath starts "
    "one TLP per 32 B beat, with the framing, sequence number, 4 DW header and LCRC (24 B) "
    "in a beat of their own, so a 128 B write takes 5 beats for 4 of data and a 64 B write "
    "3 for 2. That datapath is the model's choice, not a PCIe rule: packed byte by byte a "
    "128 B write is 152 B on the wire, which would allow 26.5 GB/s.",
    "Why rings run as fast as one pair: Ack and UpdateFC DLLPs for the traffic coming the "
    "other way ride in the 8 B of slack in each header beat, so a link busy both ways "
    "loses no data beats to them. Posted writes, read requests and completions queued on "
    "one link take turns, round robin, so a read or completion may pass a posted write "
    "queued before it (PCIe allows that only with Relaxed Ordering); no copy here depends "
    "on that order.",
    "Cross-socket pairs cross the socket link, whose peer-to-peer bandwidth "
    "(socket_bytes_per_cycle) and per-TLP cost (socket_tlp_overhead_bytes) were calibrated "
    "on the single cross-socket rows of the copy engine (128 B writes: 6.92 cycles each, "
    "18.5 GB/s) and the push kernel (64 B writes: 5.14 cycles, 12.45 GB/s); the two-pair "
    "rows are predictions. Why the 8-GPU ring's cross-socket copies lose a few per cent "
    "against one pair (seed: 17.4 against 18.5 GB/s with the copy engine, 12 against 12.5 "
    "with the push kernel): only there does the socket link carry peer-to-peer traffic both "
    "ways, and each peer-to-peer TLP costs the other direction socket_return_bytes (15 B) "
    "of link time for its link-layer acknowledgement and credit return. That cost is not in "
    "the seed: it was set on the copy-engine ring row (15 B gives 17.45 GB/s, 16 B 17.39); "
    "the push-kernel ring row, which loses 7.5 % in the model against the seed's 4 %, is "
    "its check.",
    "The seed's RTX 4090 machine has no peer access, so it has no rows here.")

#: The note on the RTX 4090 rows of the experiments through host memory.
_RTX4090 = (
    "Unmarked rows stand against the seed's A800 machine (Machine 1 of its section 3); rows "
    "marked RTX 4090 machine stand the same runs against the seed's second "
    "machine: eight RTX 4090, which have no peer access, on a two-socket Xeon Platinum "
    "8352S host with the same PCIe 4.0 x16 layout as the A800 machine (the seed's "
    "section 3). Through host memory the GPUs' copy engines only write and read pinned "
    "buffers, which the model does not tell apart by GPU, so one model stands for both "
    "machines. Nothing was calibrated on the second machine (root_host_bytes_per_cycle "
    "and the pageable chunk were set on the A800 machine's same-socket pairs): its rows "
    "are predictions.")

_STAGED = (
    "Peer access off: each copy is staged through two pinned buffers of one chunk "
    "(staging_chunk_bytes, 1 MiB, a chunk size of the seed's own chunk study, which keeps "
    "the runs short; the seed's tables do not state their chunk, calling 64 MB 'reasonable' "
    "for a 4 GB transfer, and its study's whole-copy rates for 256 MB, 17.50 GB/s with "
    "64 MB chunks and 17.81 with 1 MB, include the pipeline's head and tail, which the "
    "fitted slope here leaves out) in host memory of the source's socket. The source's "
    "copy engine writes chunk k (posted writes of max_payload_bytes) once the destination has read chunk k-2 out of the same buffer; "
    "the destination's copy engine reads chunk k (reads of max_read_request_bytes, 512 B, "
    "completions of 128 B) once all of it has landed; each sees the other's progress "
    "host_event_cycles (1 us) to twice that late. Sizes of 2 and 4 chunks per pair; the slope "
    "between them is the steady state of two chunks, without the first write and the last "
    "read that nothing overlaps.",
    "Why a staged pair in one socket is slower than across two, and why two staged pairs "
    "on one switch halve: every byte written into or read out of host memory through a "
    "root port draws on one budget, root_host_bytes_per_cycle (41 B/ns, calibrated on the "
    "same-socket pair). A same-socket pair passes each byte through its root port twice "
    "(about 20.5 GB/s); two pairs four times (about 10.3 each); a 4-GPU ring eight times "
    "(about 5.1 each); the 8-GPU ring eight times per socket. A cross-socket pair writes "
    "through one root port and reads through the other, so neither budget binds and the "
    "pair is held by its PCIe links and the staging's events instead; its host-memory "
    "TLPs are the socket link's own memory traffic and do not pay the peer-to-peer "
    "forwarding cost. Two cross-socket pairs share the first switch's upstream link "
    "with their writes (about half a pair's rate each).",
    "Why device-to-host looks faster than host-to-device (the seed's question): the "
    "device-to-host half is posted writes that need no answer; the host-to-device half "
    "is reads whose completions come back one read latency later, so it starts later and "
    "finishes last.",
    "In the 8-GPU ring each root port carries eight passes, two for each of its three "
    "same-socket pairs and one for each cross-socket pair's write or read, and the eight "
    "pairs share them evenly: their fits lie within half a percent of each other (the "
    "table), as the seed's within 4.71 to 4.72 GB/s.",
    _RTX4090)

_PAGEABLE = (
    "Peer access off, plain cudaMemcpyAsync: the seed's timeline shows the copy "
    "decomposed into device to host and host to device through pageable host memory, "
    "with the CPU taking part. The model takes that as the driver's own staged copy: the "
    "same double buffering as host_staged, through two pinned buffers of "
    "pageable_chunk_bytes (128 KiB) in the source socket's host memory, each chunk "
    "handed over by the host thread host_event_cycles (1 us) to twice that late. The "
    "chunk size is not in the seed: it was calibrated on the same-socket row (64 KiB "
    "gives 15.2 GB/s, 128 KiB 17.5, 256 KiB 18.9); the cross-socket row is a "
    "prediction. Sizes of 2 and 4 chunks per pair.",
    "Why pageable copies lose to the seed's own double buffering (17.8 against 20.34 GB/s "
    "in one socket): with chunks of 128 KiB against 1 MiB, the event latency each chunk "
    "waits for is a larger share of its time. Why the cross-socket copy is faster than "
    "the same-socket one (the seed's open question): as for host_staged, a same-socket "
    "copy draws on one root port's host budget twice per byte, a cross-socket copy on "
    "two root ports once each; the seed's own guess, CPU contention within one socket, "
    "is not modelled (the CPU's copies between pageable and pinned memory are not "
    "simulated).",
    "Not modelled: the seed's first consequence, that pageable copies of several pairs "
    "or iterations never run at once; the seed measures single pairs only.",
    _RTX4090)

def _link_faults(cfg):
    """One peer copy from GPU 0 to GPU 1 with GPU 0's link as trained (every
    link Gen ``cfg.generation`` x ``cfg.lanes``) and retrained three ways
    below it: half and a quarter of the lanes, and one generation lower, each
    where the configuration allows it (``gpu0_x8``, ``gpu0_x4`` and
    ``gpu0_gen3`` at the default Gen4 x16).  With two sockets, also two
    pairs crossing the socket link together, GPUs 0 and 1 to the first two
    of the other socket (peer_copy's two_pairs_cross), as trained and with
    GPU 0's link at the narrowest of those (``two_pairs_cross_as_trained``,
    ``two_pairs_cross_gpu0_x4``): the healthy pair must not lose bandwidth
    to the slow one."""
    def entry(lanes, generation, source, pairs=((0, 1),), like="pair_same"):
        return {"pairs": [list(p) for p in pairs], "values": [None] * len(pairs),
                "unit": "GB/s",
                "set": {"retrained_gpu": 0, "retrained_lanes": lanes,
                        "retrained_generation": generation} if source else {},
                "source": f"not in the seed: {source or 'every link'} Gen{generation} x{lanes}"
                          + ("" if source else f", as peer_copy {like}")}

    gen, lanes = cfg.generation, cfg.lanes
    out = {"as_trained": entry(lanes, gen, None)}
    slow = []
    for fewer in (lanes // 2, lanes // 4):
        if fewer >= 1:
            out[f"gpu0_x{fewer}"] = entry(fewer, gen, "GPU 0's link trained at")
            slow = [f"x{fewer}", fewer, gen]
    if gen - 1 in GT_PER_S:
        out[f"gpu0_gen{gen - 1}"] = entry(lanes, gen - 1, "GPU 0's link trained at")
        slow = slow or [f"gen{gen - 1}", lanes, gen - 1]
    half = cfg.gpus // 2
    if cfg.sockets == 2 and half >= 2 and slow:
        pairs = ((0, half), (1, half + 1))
        out["two_pairs_cross_as_trained"] = entry(lanes, gen, None, pairs, "two_pairs_cross")
        name, fewer, generation = slow
        out[f"two_pairs_cross_gpu0_{name}"] = entry(fewer, generation,
                                                    "GPU 0's link trained at", pairs)
    return out

EXPERIMENTS = {e.name: e for e in (
    Experiment("peer_copy", "Peer access: cudaMemcpyAsync device to device (copy engine)",
               GpuMode.PUSH, "max_payload_bytes",
               notes=("The copy engine writes the peer's memory with posted writes of "
                      "max_payload_bytes (128 B by default). Three sizes per pair (64, 128 "
                      "and 256 KiB); bandwidth is the inverse of the fitted cycles per "
                      "byte.",) + _MECHANISM),
    Experiment("kernel_push", "Custom copy kernel, push mode (peer access)", GpuMode.PUSH,
               "kernel_write_bytes",
               notes=("A push kernel's int4 stores leave the SMs as 64 B writes "
                      "(kernel_write_bytes); otherwise as the copy engine.",) + _MECHANISM),
    Experiment("kernel_pull", "Custom copy kernel, pull mode (peer access)", GpuMode.PULL,
               "kernel_read_bytes",
               notes=("The destination's pull kernel reads the source's memory: one read "
                      "request per 128 B line (kernel_read_bytes), up to read_tags "
                      "outstanding; the source's completer answers each with a 128 B "
                      "completion (3 DW header). A completion takes 5 beats like a 128 B "
                      "write, and each read request a beat of its own on the way there.",
                      "Why a GPU that pulls and is pulled from at once slows down (the "
                      "seed's [0,1] + [1,2] and rings): its link carries, each way, the "
                      "completions of one copy and the read requests of the other, one "
                      "request beat per five completion beats.",
                      "Why the 8-GPU ring's cross-socket pulls run at about 11 GB/s, not "
                      "the 18 of one cross-socket pair: each root complex tracks the "
                      "peer-to-peer reads crossing the socket link in one pool of "
                      "socket_read_bytes (13 KiB), the reads its GPUs send and the reads "
                      "it receives together, and a read crosses only with room at both "
                      "ends. One pair, or two pairs pulling the same way, use each pool "
                      "one way and the link's bandwidth binds first (within 1 %); in the "
                      "ring each "
                      "pool holds one pull sent and one received, each for a round trip "
                      "of about 600 ns, and the pool binds (counters socket01.read_wait "
                      "and socket10.read_wait). The seed leaves the drop unexplained; the "
                      "pool's size is not in it and was set on this row, so the ring's "
                      "two cross-socket rows are a fit, not a prediction (12 KiB gives "
                      "10.1 GB/s, 13.5 KiB 11.3). Without the pool the link alone gives "
                      "11.52: each direction carries one pair's completions, the other's "
                      "read requests and the returns of both (12.45 without the "
                      "returns).") + _MECHANISM),
    Experiment("host_staged", "Peer access off: double-buffered streaming through host memory",
               GpuMode.STAGED, "max_read_request_bytes", notes=_STAGED),
    Experiment("pageable_copy", "Peer access off: cudaMemcpyAsync through pageable host memory",
               GpuMode.STAGED, "max_read_request_bytes", notes=_PAGEABLE,
               chunk="pageable_chunk_bytes"),
    Experiment("link_faults", "Fault tolerated: one GPU link trained narrower or slower",
               GpuMode.PUSH, "max_payload_bytes", scenarios=_link_faults,
               notes=("GPU 0's link to its switch trains at half or a quarter of the lanes "
                      "or one generation lower (retrained_gpu, retrained_lanes, "
                      "retrained_generation; x8, x4 or Gen3 at the default Gen4 x16) while "
                      "every other link stays as configured (generation, lanes); GPU 0 "
                      "copies to GPU 1 with the copy engine as in peer_copy. "
                      "Every byte still arrives, checked at the destination; the rows show "
                      "the bandwidth the fault costs (no seed numbers: for information). "
                      "The slow link's symbol rate falls with its width and rate, and its "
                      "framing, DLLPs and SKP ordered sets take proportionally more of it.",
                      "With two pairs crossing the socket link (GPU 0 to the other socket's "
                      "first GPU, GPU 1 to its second), the healthy pair takes what the slow "
                      "one leaves of that link. GPU 0's switch port stores and forwards each "
                      "TLP, as a PCIe switch does from a port slower than the one it forwards "
                      "to; cutting through, a TLP from the slow link would hold the switch's "
                      "upstream port while it trickled in, and slow the healthy pair too. "
                      "A slow destination is another matter: with GPU 4's link at x4 "
                      "(peer_copy with retrained_gpu=4, retrained_lanes=4) the healthy pair "
                      "[1,5] moves at [0,4]'s 6.29 GB/s. At each input on their common "
                      "path, down to the far switch, both pairs' writes share one posted "
                      "queue (and the posted flow-control credits for it), so each write waiting "
                      "for GPU 4's link holds the write to GPU 5 behind it.",
                      "The fitted fixed costs (α) differ by several ns from fault to fault, "
                      "and not in the order of the link speeds: x8 and Gen3 have the same "
                      "symbol rate, slopes within 0.1 % and elapsed times within 8 cycles "
                      "of each other at every size (of up to 21,000), yet their α differ by "
                      "8 ns: a difference of "
                      "a few cycles at the sizes moves the line's intercept by as much. "
                      "Only the bandwidths are compared.")),
)}
