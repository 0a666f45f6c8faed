"""Top level: one GPC's SM-to-SM DSM fabric (seed 000, Patent Figures 21A-21D).

3 CPC x 3 TPC x 2 SM = 18 SM slots, each with its DSM endpoint and injection
shaper; per TPC a TPC arbiter; per SM path a GPCMMU route stamp; per CPC a
six-to-four GPCARB ingress and two egress blocks; two 6x6 GX planes.  A
register port configures the traffic once per run, a counter port reads the
performance counters, and a watchdog flags a run that stops moving.
"""

import enum

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.flit import flit_layout
from ..common.shared import SharedModule
from ..common.watchdog import Watchdog
from .config import DsmConfig, cpc_of, eg_of, tpc_of
from .endpoint import SmEndpoint
from .fabric import GpcarbEgress, GpcarbIngress, Gpcmmu, GxPlane, TpcArb
from .shaper import InjectionShaper

__all__ = ["Gpc", "GpcReg", "counter_names", "switch_blocks", "make_flit_layout", "gpc_registers",
           "GLOBAL_SLOT", "SM_LIMITS_BROKEN"]

GLOBAL_SLOT = 31  #: ``cfg_addr`` slot field of the GPC-wide registers (:class:`GpcReg`)

#: The bit of ``sm<s>.state`` (:func:`counter_names`) that holds the SM's
#: sticky outstanding-limit check (:attr:`SmEndpoint.o_limits_broken`).
SM_LIMITS_BROKEN = 1 << 6


class GpcReg(enum.IntEnum):
    """GPC-wide run-time registers at ``cfg_addr = GLOBAL_SLOT << 6 | reg``.

    Each holds one run-time field of :class:`DsmConfig` in hardware units, so a
    what-if on these needs no rebuild.
    """

    SHAPER_FLITS = 0     #: shaper_flits (4 bits)
    SHAPER_CYCLES = 1    #: shaper_cycles (4 bits)
    READ_WORDS = 2       #: read_response_bytes / flit_bytes (4 bits)
    STORE_WORDS = 3      #: store_packet_bytes / flit_bytes (12 bits)
    TMA_WORDS = 4        #: tma_command_bytes / flit_bytes (12 bits)
    MAX_READS = 5        #: max_outstanding_reads (8 bits)
    MAX_UNACKED = 6      #: max_unacked_store_flits (16 bits)
    ACK_THRESHOLD = 7    #: ack_threshold_flits (16 bits)
    READ_TURNAROUND = 8  #: read_turnaround_cycles (8 bits)
    FAULT = 9            #: fault injected for testing the checks: ``{slot[4:0], kind[2:0]}``
    RESPONSE_BURST = 10  #: vc_response_burst (4 bits)
    SHARED_VC = 11       #: shared_vc (1 bit; unsafe, for deadlock tests)


_GPC_REG_WIDTH = {GpcReg.SHAPER_FLITS: 4, GpcReg.SHAPER_CYCLES: 4, GpcReg.READ_WORDS: 4,
                  GpcReg.STORE_WORDS: 12, GpcReg.TMA_WORDS: 12, GpcReg.MAX_READS: 8,
                  GpcReg.MAX_UNACKED: 16, GpcReg.ACK_THRESHOLD: 16, GpcReg.READ_TURNAROUND: 8,
                  GpcReg.FAULT: 8, GpcReg.RESPONSE_BURST: 4, GpcReg.SHARED_VC: 1}


def gpc_registers(cfg):
    """``{GpcReg: value}`` of the run-time fields of ``cfg``."""
    return {
        GpcReg.SHAPER_FLITS: cfg.shaper_flits, GpcReg.SHAPER_CYCLES: cfg.shaper_cycles,
        GpcReg.READ_WORDS: cfg.read_response_flits,
        GpcReg.STORE_WORDS: cfg.store_packet_bytes // cfg.flit_bytes,
        GpcReg.TMA_WORDS: cfg.tma_command_bytes // cfg.flit_bytes,
        GpcReg.MAX_READS: cfg.max_outstanding_reads,
        GpcReg.MAX_UNACKED: cfg.max_unacked_store_flits,
        GpcReg.ACK_THRESHOLD: cfg.ack_threshold_flits,
        GpcReg.READ_TURNAROUND: cfg.read_turnaround_cycles,
        GpcReg.FAULT: 0,
        GpcReg.RESPONSE_BURST: cfg.vc_response_burst,
        GpcReg.SHARED_VC: int(cfg.shared_vc),
    }


def make_flit_layout(cfg):
    """Flit layout for ``cfg``: ``flit_bytes`` of data plus routing fields."""
    return flit_layout(data_bits=cfg.flit_bytes * 8,
                       addr_bits=max(cfg.smem_words - 1, 1).bit_length(),
                       node_bits=5, mask_bits=cfg.flit_bytes // 16)


SM_COUNTERS = ("rx_granules", "expected_granules", "errors", "outstanding_reads",
               "unacked_flits", "owed_acks", "tx_flits", "frames", "state", "inj_flits",
               "inj_stalls", "inj_credits_away", "first_bad", "first_wrong", "first_wrong_cycle")


def counter_names(cfg):
    """Names of the readable counters, in address order (``rd_addr`` = index).

    ``cycles`` and ``idle_cycles`` (since the start, and since the last
    progress) count SM cycles; flit and stall counters count flits and SM
    cycles.

    ``sm<s>.state`` packs, low bit first: local_done, released, busy,
    arrival queue occupied (request VC, response VC), overflow,
    limits_broken (:attr:`~hdl.hopper.endpoint.SmEndpoint.o_limits_broken`).
    ``sm<s>.inj_credits_away`` has one bit per VC whose shaper does not
    hold all its credits.  ``sm<s>.frames`` is the SM's framing check, 0 at
    rest (:attr:`~hdl.hopper.endpoint.SmEndpoint.o_frames`).
    ``<block>.occupied`` has one bit per (input, VC) queue not empty,
    ``<block>.no_credit`` one per (output, VC) without a credit,
    ``<block>.credits_away`` one per (output, VC) not holding all its
    credits (all 0 once the fabric is at rest), and
    ``<block>.in<i>.wants`` one per (VC, output) its input ``i`` waits for
    (see :class:`~hdl.common.switch.CreditSwitch`).
    """
    names = ["cycles", "stuck", "idle_cycles", "overflow"]
    for s in range(cfg.n_slots):
        names += [f"sm{s}.{c}" for c in SM_COUNTERS]
    for block, n_in, n_out in switch_blocks(cfg):
        for o in range(n_out):
            names += [f"{block}.o{o}.flits", f"{block}.o{o}.stalls"]
        names += [f"{block}.occupied", f"{block}.no_credit", f"{block}.credits_away"]
        names += [f"{block}.in{i}.wants" for i in range(n_in)]
    return names


def switch_blocks(cfg):
    """``[(name, n_in, n_out)]`` of the GPC's switches, in counter order."""
    return ([(f"tpcarb{t}", cfg.sms_per_tpc, cfg.sms_per_tpc)
             for t in range(cfg.cpcs * cfg.tpcs_per_cpc)]
            + [(f"ig{c}", cfg.tpcs_per_cpc * cfg.sms_per_tpc, 4) for c in range(cfg.cpcs)]
            + [(f"gx{p}", 2 * cfg.cpcs, 2 * cfg.cpcs) for p in range(2)]
            + [(f"eg{e}", 2, cfg.tpcs_per_cpc) for e in range(2 * cfg.cpcs)])


class Gpc(wiring.Component):
    """The GPC DSM fabric with its 18 SM endpoints.  Clock: SM clock (``clk``).

    Parameters
    ----------
    cfg : DsmConfig
        Structural fields shape the RTL; run-time fields are written through
        ``cfg_*`` by the testbench.
    checks : bool
        Build each SM's data checks and fault injection (``False`` for
        synthesis, see :class:`~hdl.hopper.endpoint.SmEndpoint`; then
        ``verify_done`` never rises).

    Members
    -------
    cfg_we : In(1)
        Write ``cfg_data`` to register ``cfg_addr`` this cycle.
    cfg_addr : In(11)
        ``{slot[4:0], reg[5:0]}``: register ``reg`` of SM ``slot``
        (see :mod:`hdl.hopper.endpoint`), or with slot ``GLOBAL_SLOT`` a
        :class:`GpcReg`.
    cfg_data : In(32)
        Register value.
    plane_enable : In(2)
        Bit p: GX plane p is on (firmware setting).  With both bits clear the
        route hash still picks a plane; the configuration refuses that case
        (``gx_planes``) before anything is built.
    ctl_init, ctl_start, ctl_verify : In(1)
        One-cycle pulses: clear and fill memories, start traffic, check data.
        ``ctl_init`` also returns the fabric (shapers, TPC arbiters, GPCARB
        ingress and egress, GX planes, and each SM's queues, arbiters and
        ACK unit) to its reset state, their flit counters to 0, so that a
        run's cycles do not depend on the runs simulated before it.
    init_done : Out(1)
        Every SM finished its fill.
    done : Out(1)
        Every cluster rank was released by the barrier: the timed region ended.
    verify_done : Out(1)
        Every SM finished its check.
    stuck : Out(1)
        The watchdog saw no flit move for ``watchdog_cycles`` cycles.
    rd_addr : In(10)
        Counter index (see :func:`counter_names`).
    rd_data : Out(32)
        Counter value, combinational.
    """

    def __init__(self, cfg=None, *, checks=True):
        self.cfg = cfg if cfg is not None else DsmConfig()
        self.checks = bool(checks)
        self.flit_layout = make_flit_layout(self.cfg)
        super().__init__({
            "cfg_we": In(1), "cfg_addr": In(11), "cfg_data": In(32),
            "plane_enable": In(2, init=3),
            "ctl_init": In(1), "ctl_start": In(1), "ctl_verify": In(1),
            "init_done": Out(1), "done": Out(1), "verify_done": Out(1), "stuck": Out(1),
            "rd_addr": In(10), "rd_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, layout = self.cfg, self.flit_layout
        depth = cfg.link_buffer_flits
        abits = max(cfg.smem_words - 1, 1).bit_length()
        line_words = cfg.read_response_flits
        counters = {}

        knobs = {}
        for reg, value in gpc_registers(cfg).items():
            knobs[reg] = Signal(_GPC_REG_WIDTH[reg], init=value, name=f"gpc_{reg.name.lower()}")
        with m.If(self.cfg_we & (self.cfg_addr[6:] == GLOBAL_SLOT)):
            with m.Switch(self.cfg_addr[:6]):
                for reg, knob in knobs.items():
                    with m.Case(reg):
                        m.d.sync += knob.eq(self.cfg_data)

        sms, shapers = [], []
        for s in range(cfg.n_slots):
            sm = SharedModule(SmEndpoint, "dsm_sm_endpoint", cfg=cfg, flit_layout=layout,
                              checks=self.checks)
            shaper = SharedModule(InjectionShaper, "dsm_shaper", resets=self.ctl_init,
                                  flit_layout=layout, credits=depth)
            m.d.comb += [shaper.i_flits.eq(knobs[GpcReg.SHAPER_FLITS]),
                         shaper.i_cycles.eq(knobs[GpcReg.SHAPER_CYCLES]),
                         shaper.i_response_burst.eq(knobs[GpcReg.RESPONSE_BURST]),
                         shaper.i_shared_vc.eq(knobs[GpcReg.SHARED_VC])]
            m.submodules[f"sm{s}"] = sm
            m.submodules[f"shaper{s}"] = shaper
            wiring.connect(m, sm.o_req, shaper.i_req)
            wiring.connect(m, sm.o_rsp, shaper.i_rsp)
            m.d.comb += [
                sm.i_slot.eq(s),
                sm.cfg_we.eq(self.cfg_we & (self.cfg_addr[6:] == s)),
                sm.cfg_addr.eq(self.cfg_addr[:6]), sm.cfg_data.eq(self.cfg_data),
                sm.ctl_init.eq(self.ctl_init), sm.ctl_start.eq(self.ctl_start),
                sm.ctl_verify.eq(self.ctl_verify),
                sm.i_max_reads.eq(knobs[GpcReg.MAX_READS]),
                sm.i_max_unacked.eq(knobs[GpcReg.MAX_UNACKED]),
                sm.i_ack_threshold.eq(knobs[GpcReg.ACK_THRESHOLD]),
                sm.i_read_turnaround.eq(knobs[GpcReg.READ_TURNAROUND]),
                sm.i_read_words.eq(knobs[GpcReg.READ_WORDS]),
                sm.i_store_words.eq(knobs[GpcReg.STORE_WORDS]),
                sm.i_tma_words.eq(knobs[GpcReg.TMA_WORDS]),
                sm.i_fault.eq(Mux(knobs[GpcReg.FAULT][3:] == s, knobs[GpcReg.FAULT][:3], 0)),
            ]
            sms.append(sm)
            shapers.append(shaper)
            low = Cat(sm.o_local_done, sm.o_released, sm.o_busy, sm.o_occupied, sm.o_overflow)
            assert 1 << len(low) == SM_LIMITS_BROKEN
            state = Cat(low, sm.o_limits_broken)
            for name, value in (("rx_granules", sm.o_rx_granules),
                                ("expected_granules", sm.o_expected_granules),
                                ("errors", sm.o_errors), ("first_bad", sm.o_first_bad),
                                ("first_wrong", sm.o_first_wrong),
                                ("first_wrong_cycle", sm.o_first_wrong_cycle),
                                ("outstanding_reads", sm.o_outstanding_reads),
                                ("unacked_flits", sm.o_unacked_flits),
                                ("owed_acks", sm.o_owed_acks), ("tx_flits", sm.o_tx_flits),
                                ("frames", sm.o_frames),
                                ("state", state), ("inj_flits", shaper.o_flits),
                                ("inj_stalls", shaper.o_stalls),
                                ("inj_credits_away", shaper.o_credits_away)):
                counters[f"sm{s}.{name}"] = value

        def record(name, block):
            for o in range(len(block.o_flits)):
                counters[f"{name}.o{o}.flits"] = block.o_flits[o]
                counters[f"{name}.o{o}.stalls"] = block.o_stalls[o]
            counters[f"{name}.occupied"] = block.o_occupied
            counters[f"{name}.no_credit"] = block.o_no_credit
            counters[f"{name}.credits_away"] = block.o_credits_away
            for i in range(len(block.o_wants)):
                counters[f"{name}.in{i}.wants"] = block.o_wants[i]

        # One Verilog module per kind of switch, however many instances.
        def switch(cls, module_name, **kwargs):
            return SharedModule(cls, module_name, resets=self.ctl_init, flit_layout=layout,
                                depth=depth, **kwargs)

        switches = []
        tpcarbs = []
        for t in range(cfg.cpcs * cfg.tpcs_per_cpc):
            arb = switch(TpcArb, "dsm_tpcarb")
            m.submodules[f"tpcarb{t}"] = arb
            tpcarbs.append(arb)
            switches.append(arb)
            record(f"tpcarb{t}", arb)
        igs = []
        for c in range(cfg.cpcs):
            ig = switch(GpcarbIngress, "dsm_gpcarb_ingress")
            m.submodules[f"ig{c}"] = ig
            igs.append(ig)
            switches.append(ig)
            record(f"ig{c}", ig)
        gxs = []
        for p in range(2):
            gx = switch(GxPlane, "dsm_gx_plane", cfg=cfg)
            m.submodules[f"gx{p}"] = gx
            gxs.append(gx)
            switches.append(gx)
            record(f"gx{p}", gx)
        egs = []
        for e in range(2 * cfg.cpcs):
            eg = switch(GpcarbEgress, "dsm_gpcarb_egress", sm_depth=depth, cfg=cfg)
            m.submodules[f"eg{e}"] = eg
            egs.append(eg)
            switches.append(eg)
            record(f"eg{e}", eg)

        for s in range(cfg.n_slots):
            c, t, k = cpc_of(s, cfg), tpc_of(s, cfg), s % cfg.sms_per_tpc
            arb = tpcarbs[c * cfg.tpcs_per_cpc + t]
            wiring.connect(m, shapers[s].o, arb.i[k])
            mmu = Gpcmmu(flit_layout=layout, addr_bits=abits, node_bits=5, line_words=line_words)
            m.submodules[f"gpcmmu{s}"] = mmu
            m.d.comb += mmu.i_plane_enable.eq(self.plane_enable)
            wiring.connect(m, arb.o[k], mmu.i)
            wiring.connect(m, mmu.o, igs[c].i[t * cfg.sms_per_tpc + k])
            eg = egs[c * cfg.sms_per_tpc + eg_of(s, cfg)]
            wiring.connect(m, eg.o[t], sms[s].i)
        for c in range(cfg.cpcs):
            for lane in range(4):
                plane, k = divmod(lane, 2)
                wiring.connect(m, igs[c].o[lane], gxs[plane].i[2 * c + k])
            for e in range(cfg.sms_per_tpc):
                for p in range(2):
                    wiring.connect(m, gxs[p].o[2 * c + e], egs[c * cfg.sms_per_tpc + e].i[p])

        # --- run control, cycle counter, watchdog ---------------------------
        running = Signal()
        m.d.sync += running.eq(Mux(self.ctl_init, 0, running | self.ctl_start))
        m.d.comb += [
            self.init_done.eq(Cat(*(sm.o_init_done for sm in sms)).all()),
            self.verify_done.eq(Cat(*(sm.o_verify_done for sm in sms)).all()),
            self.done.eq(running & Cat(*(sm.o_released for sm in sms)).all()),
        ]
        m.submodules.watchdog = watchdog = Watchdog(cfg.watchdog_cycles)
        progress = Cat(*(sh.o.valid for sh in shapers), *(sm.o_busy for sm in sms),
                       *(link.valid for eg in egs for link in eg.o)).any()
        overflow = Cat(*(sw.o_overflow for sw in switches), *(sm.o_overflow for sm in sms)).any()
        m.d.comb += [watchdog.i_clear.eq(self.ctl_init | self.ctl_start),
                     watchdog.i_active.eq(running & ~self.done),
                     watchdog.i_progress.eq(progress), self.stuck.eq(watchdog.o_stuck)]
        m.d.comb += [sm.i_run_cycle.eq(watchdog.o_cycles) for sm in sms]
        counters.update({"cycles": watchdog.o_cycles, "stuck": self.stuck,
                         "idle_cycles": watchdog.o_idle, "overflow": overflow})

        names = counter_names(cfg)
        assert sorted(names) == sorted(counters), set(names) ^ set(counters)
        with m.Switch(self.rd_addr):
            for index, name in enumerate(names):
                with m.Case(index):
                    m.d.comb += self.rd_data.eq(counters[name])
        return m
