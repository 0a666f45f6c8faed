# amaranth: UnusedElaboratable=no
"""Unit tests of the shared blocks, the DSM blocks and the PCIe socket link in Amaranth's
simulator."""

import pytest
from amaranth.sim import Simulator

from hdl.common.arbiter import RoundRobin
from hdl.common.flit import VC, Kind
from hdl.hopper.config import DsmConfig
from hdl.hopper.fabric import RouteHash
from hdl.hopper.gpc import make_flit_layout
from hdl.hopper.shaper import InjectionShaper


def _run(dut, bench, clocked=True):
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("flits,cycles", [(2, 3), (1, 2), (3, 4), (1, 1)])
def test_shaper_rate_is_exact_and_non_work_conserving(flits, cycles):
    layout = make_flit_layout(DsmConfig())
    dut = InjectionShaper(flit_layout=layout, credits=64)
    sent = []

    async def bench(ctx):
        ctx.set(dut.i_flits, flits)
        ctx.set(dut.i_cycles, cycles)
        ctx.set(dut.i_req.valid, 1)
        ctx.set(dut.i_req.payload.vc, VC.REQ)
        ctx.set(dut.i_rsp.valid, 1)
        ctx.set(dut.i_rsp.payload.vc, VC.RSP)
        for _ in range(120 * cycles):
            await ctx.tick()
            sent.append(ctx.get(dut.o.flit.vc) if ctx.get(dut.o.valid) else None)
            # Return every credit at once: only the shaper limits the rate.
            ctx.set(dut.o.credit, (1 << ctx.get(dut.o.flit.vc)) if ctx.get(dut.o.valid) else 0)

    _run(dut, bench)
    # Once the token count has settled the rate is exactly flits per cycles.
    window = sent[-60 * cycles:]
    assert sum(v is not None for v in window) == 60 * flits
    # Both VCs are served, alternately.
    assert abs(window.count(VC.REQ) - window.count(VC.RSP)) <= 1


def test_shaper_rejects_zero_credits():
    with pytest.raises(ValueError, match="credits must be a positive integer"):
        InjectionShaper(flit_layout=make_flit_layout(DsmConfig()), credits=0)


def test_round_robin_serves_every_requester_in_turn():
    dut = RoundRobin(5)
    grants = []

    async def bench(ctx):
        ctx.set(dut.requests, 0b10110)
        for _ in range(9):
            await ctx.delay(0)
            grants.append(ctx.get(dut.grant_index))
            await ctx.tick()

    _run(dut, bench)
    assert grants == [1, 2, 4, 1, 2, 4, 1, 2, 4]


@pytest.mark.parametrize("enable,planes", [(0b11, {0, 1}), (0b01, {0}), (0b10, {1})])
def test_route_hash_spreads_over_enabled_planes_only(enable, planes):
    dut = RouteHash(addr_bits=13, node_bits=5, line_words=4)
    seen = set()

    async def bench(ctx):
        ctx.set(dut.i_plane_enable, enable)
        for addr in range(0, 64, 4):
            for dst in (0, 7, 13):
                ctx.set(dut.i_src, 3)
                ctx.set(dut.i_addr, addr)
                ctx.set(dut.i_dst, dst)
                await ctx.delay(1e-9)
                seen.add(ctx.get(dut.o_route))

    _run(dut, bench, clocked=False)
    assert {r >> 1 for r in seen} == planes
    assert {r & 1 for r in seen} == {0, 1}


def test_ack_flits_interleave_over_the_four_routes():
    """Successive ACKs of one source-destination pair carry addresses one hash
    line apart, so the route hash sends them down all four routes in turn
    rather than every ACK down one lane; their counts add up to the flits
    written, though a flit arrives in every cycle an ACK is taken."""
    from hdl.hopper.ack import AckCoalescer
    layout = make_flit_layout(DsmConfig())
    dut = AckCoalescer(flit_layout=layout, n_nodes=18, line_words=4)
    addrs, counts = [], []

    async def bench(ctx):
        ctx.set(dut.i_slot, 5)
        ctx.set(dut.i_threshold, 2)
        ctx.set(dut.i_src, 6)
        ctx.set(dut.o.ready, 1)
        for cycle in range(60):
            # 40 flits, one a cycle, then idle: what is owed goes out
            ctx.set(dut.i_written, cycle < 40)
            ctx.set(dut.i_idle, cycle >= 40)
            await ctx.tick()
            if ctx.get(dut.o.valid):
                addrs.append(ctx.get(dut.o.payload.addr))
                counts.append(ctx.get(dut.o.payload.data) & 0xFFFF)
                assert ctx.get(dut.o.payload.dst) == 6
        assert ctx.get(dut.o_owed) == 0

    _run(dut, bench)
    assert len(addrs) >= 8
    assert addrs == [4 * k for k in range(len(addrs))]
    routes = [((a >> 2) + 5 + 6) % 4 for a in addrs]
    assert set(routes[:4]) == {0, 1, 2, 3}
    assert sum(counts) == 40, counts


def test_ack_coalescer_rejects_a_bad_line_size():
    from hdl.hopper.ack import AckCoalescer
    with pytest.raises(ValueError, match="line_words must be a positive integer"):
        AckCoalescer(flit_layout=make_flit_layout(DsmConfig()), n_nodes=2, line_words=0)


@pytest.mark.parametrize("addr_bits", [10, 13, 14, 16])
def test_payload_pattern_has_one_layout_whatever_the_address_width(addr_bits):
    # A smaller shared memory gives narrower address expressions: the fill's
    # and the arrival check's words must still agree with each other and with
    # the testbench's integers.
    from amaranth import Module, Signal
    from hdl.hopper.endpoint import pattern_word
    m = Module()
    slot, addr = Signal(3), Signal(addr_bits)
    word = Signal(32 * 2)
    m.d.comb += word.eq(pattern_word(slot, addr, 0x15A, 2))

    async def bench(ctx):
        for s, a in ((5, 0), (2, 1000), (7, (1 << min(addr_bits, 14)) - 1)):
            ctx.set(slot, s)
            ctx.set(addr, a)
            assert ctx.get(word) == pattern_word(s, a, 0x15A, 2)

    _run(m, bench, clocked=False)


def test_flit_kinds_map_to_the_seed_virtual_channels():
    from hdl.common.flit import VC_OF_KIND
    assert VC_OF_KIND[Kind.RD_CMD] == VC.REQ and VC_OF_KIND[Kind.WR_DATA] == VC.REQ
    assert VC_OF_KIND[Kind.RD_DATA] == VC.RSP and VC_OF_KIND[Kind.ACK] == VC.RSP


@pytest.mark.parametrize("burst", [1, 3, 5])
def test_shaper_sends_at_most_burst_responses_while_a_request_waits(burst):
    layout = make_flit_layout(DsmConfig())
    dut = InjectionShaper(flit_layout=layout, credits=64)
    sent = []

    async def bench(ctx):
        ctx.set(dut.i_flits, 2)
        ctx.set(dut.i_cycles, 3)
        ctx.set(dut.i_response_burst, burst)
        ctx.set(dut.i_req.valid, 1)
        ctx.set(dut.i_req.payload.vc, VC.REQ)
        ctx.set(dut.i_rsp.valid, 1)
        ctx.set(dut.i_rsp.payload.vc, VC.RSP)
        for _ in range(300):
            await ctx.tick()
            if ctx.get(dut.o.valid):
                vc = ctx.get(dut.o.flit.vc)
                sent.append(vc)
                ctx.set(dut.o.credit, 1 << vc)
            else:
                ctx.set(dut.o.credit, 0)

    _run(dut, bench)
    steady = "".join("R" if vc == VC.RSP else "q" for vc in sent[10:])
    assert "R" * (burst + 1) not in steady
    assert "q" + "R" * burst + "q" in steady


@pytest.mark.parametrize("voq", [False, True])
def test_credit_switch_delivers_every_flit_once_under_back_pressure(voq):
    """Every flit leaves once, on its route's output, with its data as sent
    (all 256 bits), and no output ever holds more flits of a VC than the
    credits it gave (2)."""
    import random

    from hdl.common.switch import CreditSwitch
    layout = make_flit_layout(DsmConfig())
    dut = CreditSwitch(flit_layout=layout, n_in=3, n_out=2, depth=2, out_credits=2,
                       route=lambda m, flit, i: flit.dst[0], voq=voq)
    rng = random.Random(7)
    sent = {i: [(rng.randrange(2), rng.randrange(2), n) for n in range(40)] for i in range(3)}
    got = []

    def data(i, n):
        return (((i << 8) | n) * 0x9E3779B97F4A7C15F39CC0605CEDC834) % (1 << 256)

    async def bench(ctx):
        credits = {i: [2, 2] for i in range(3)}
        queue = {i: list(sent[i]) for i in range(3)}
        held = {o: [] for o in range(2)}   # flits at the receiver, freed at random
        for _ in range(800):
            for i in range(3):
                ctx.set(dut.i[i].valid, 0)
                if queue[i] and credits[i][queue[i][0][1]]:
                    dst, vc, n = queue[i].pop(0)
                    credits[i][vc] -= 1
                    ctx.set(dut.i[i].valid, 1)
                    ctx.set(dut.i[i].flit.dst, dst)
                    ctx.set(dut.i[i].flit.vc, vc)
                    ctx.set(dut.i[i].flit.src, i)
                    ctx.set(dut.i[i].flit.addr, n)
                    ctx.set(dut.i[i].flit.data, data(i, n))
            for o in range(2):
                free = 0
                if held[o] and rng.random() < 0.4:
                    free = 1 << held[o].pop(0)
                ctx.set(dut.o[o].credit, free)
            await ctx.tick()
            for i in range(3):
                credits[i] = [c + ((ctx.get(dut.i[i].credit) >> v) & 1)
                              for v, c in enumerate(credits[i])]
            for o in range(2):
                if ctx.get(dut.o[o].valid):
                    flit = (ctx.get(dut.o[o].flit.src), ctx.get(dut.o[o].flit.dst),
                            ctx.get(dut.o[o].flit.addr))
                    assert flit[1] == o
                    assert ctx.get(dut.o[o].flit.data) == data(flit[0], flit[2]), flit
                    got.append(flit)
                    held[o].append(ctx.get(dut.o[o].flit.vc))
                    assert held[o].count(held[o][-1]) <= 2, (o, held[o])
                assert not ctx.get(dut.o_overflow)

    _run(dut, bench)
    want = sorted((i, d, n) for i in range(3) for d, _, n in sent[i])
    assert sorted(got) == want


@pytest.mark.parametrize("voq", [False, True])
def test_credit_switch_shares_an_output_between_its_vcs(voq):
    """Input 0 offers request flits (VC 0) and input 1 response flits (VC 1)
    to one output every cycle, and the receiver returns each credit at once:
    the two VCs take turns, neither waits more than a few cycles, so the
    request network is never starved by responses or the other way round."""
    from hdl.common.switch import CreditSwitch
    layout = make_flit_layout(DsmConfig())
    dut = CreditSwitch(flit_layout=layout, n_in=2, n_out=1, depth=2, out_credits=2,
                       route=lambda m, flit, i: 0, voq=voq)
    sent_vcs = []

    async def bench(ctx):
        credits = [2, 2]            # input i sends VC i only
        for _ in range(200):
            for i in range(2):
                ctx.set(dut.i[i].valid, credits[i] > 0)
                ctx.set(dut.i[i].flit.vc, i)
                ctx.set(dut.i[i].flit.src, i)
                if credits[i]:
                    credits[i] -= 1
            await ctx.tick()
            for i in range(2):
                credits[i] += (ctx.get(dut.i[i].credit) >> i) & 1
            if ctx.get(dut.o[0].valid):
                vc = ctx.get(dut.o[0].flit.vc)
                sent_vcs.append(vc)
                ctx.set(dut.o[0].credit, 1 << vc)   # freed at once, seen next cycle
            else:
                ctx.set(dut.o[0].credit, 0)

    _run(dut, bench)
    steady = "".join(str(v) for v in sent_vcs[10:])
    assert len(steady) > 100
    assert "0000" not in steady and "1111" not in steady, steady


@pytest.mark.parametrize("store_forward", [False, True])
def test_a_store_and_forward_input_never_holds_an_output_for_a_slow_packet(store_forward):
    """Input 0 trickles packets in as a slow link would (a 3-flit one, a
    flit every 5 cycles; a 2-flit one; a 1-flit one on the other VC); input
    1 brings a 4-flit one back to back just after the first began.  Storing
    and forwarding (input 0's ``i_store_forward`` bit), no packet's head
    leaves before its last flit is in, so input 1's goes first and every
    packet leaves back to back; cutting through, input 0's first packet takes
    the output first and holds it, idle, while its flits trickle in."""
    from hdl.common.switch import CreditSwitch
    layout = make_flit_layout(DsmConfig())
    dut = CreditSwitch(flit_layout=layout, n_in=2, n_out=1, depth=8, out_credits=8,
                       route=lambda m, flit, i: 0, packets=True, store_forward=True)
    # (input, packet, VC, arrival cycle of each flit)
    packets = [(0, 0, VC.REQ, (0, 5, 10)), (0, 1, VC.REQ, (12, 17)), (0, 2, VC.RSP, (14,)),
               (1, 3, VC.REQ, (2, 3, 4, 5))]
    arrivals = {(i, cycle): (p, k, len(times), vc) for i, p, vc, times in packets
                for k, cycle in enumerate(times)}
    out = {}

    async def bench(ctx):
        ctx.set(dut.i_store_forward, int(store_forward))
        for cycle in range(60):
            for i in range(2):
                flit = arrivals.get((i, cycle))
                ctx.set(dut.i[i].valid, flit is not None)
                if flit:
                    p, k, n, vc = flit
                    ctx.set(dut.i[i].flit.addr, 8 * p + k)
                    ctx.set(dut.i[i].flit.vc, vc)
                    ctx.set(dut.i[i].flit.last, k == n - 1)
            ctx.set(dut.o[0].credit, ctx.get(dut.o[0].valid) << ctx.get(dut.o[0].flit.vc))
            await ctx.tick()
            if ctx.get(dut.o[0].valid):
                out[divmod(ctx.get(dut.o[0].flit.addr), 8)] = cycle
            assert not ctx.get(dut.o_overflow)

    _run(dut, bench)
    assert sorted(out) == sorted((p, k) for _, p, _, times in packets for k in range(len(times)))
    for i, p, _, times in packets:
        sent = [out[p, k] for k in range(len(times))]
        if store_forward or i == 1:
            assert sent == list(range(sent[0], sent[0] + len(times)))   # back to back
        if store_forward and i == 0:
            assert sent[0] > times[-1]        # not before its last flit is in
    if store_forward:
        assert out[3, 3] < 10                 # input 1's packet went while packet 0 trickled
    else:
        assert out[0, 0] < 5 < 10 < out[0, 2] < out[3, 0]   # packet 0 held the output
    with pytest.raises(ValueError, match="store_forward needs packets=True"):
        CreditSwitch(flit_layout=layout, n_in=2, n_out=1, depth=8, out_credits=8,
                     route=lambda m, flit, i: 0, store_forward=True)


@pytest.mark.parametrize("voq", [False, True])
def test_credit_switch_snapshot_names_full_buffers_dry_outputs_and_waits(voq):
    """An output whose receiver never returns a credit (a planted fault) stalls
    the flits bound for it; the snapshot, decoded by sim.stall, names the
    buffer holding them, the output without credit and the wait."""
    from hdl.common.switch import CreditSwitch
    from sim.stall import Block, describe
    layout = make_flit_layout(DsmConfig())
    dut = CreditSwitch(flit_layout=layout, n_in=2, n_out=2, depth=4, out_credits=1,
                       route=lambda m, flit, i: flit.dst[0], voq=voq)
    got = {}

    async def bench(ctx):
        # input 0: three request flits to output 1; input 1: one response flit to output 0
        for n, (i, dst, vc) in enumerate([(0, 1, VC.REQ), (0, 1, VC.REQ), (0, 1, VC.REQ),
                                          (1, 0, VC.RSP)]):
            ctx.set(dut.i[i].valid, 1)
            ctx.set(dut.i[i].flit.dst, dst)
            ctx.set(dut.i[i].flit.vc, vc)
            ctx.set(dut.i[i].flit.addr, n)
            await ctx.tick()
            ctx.set(dut.i[i].valid, 0)
        for _ in range(10):      # output 0 returns its credit, output 1 never does
            ctx.set(dut.o[0].credit, ctx.get(dut.o[0].valid) << VC.RSP)
            await ctx.tick()
        got["occupied"] = ctx.get(dut.o_occupied)
        got["no_credit"] = ctx.get(dut.o_no_credit)
        for i in range(2):
            got[f"in{i}.wants"] = ctx.get(dut.o_wants[i])

    _run(dut, bench)
    counters = {f"sw.{k}": v for k, v in got.items()}
    assert describe(counters, [Block("sw", ("in0", "in1"), ("out0", "out1"), ("req", "rsp"))]) \
        == ["sw: buffers holding flits in0.req; outputs without credit out1.req; "
            "waiting in0.req -> out1 (no credit)"]
    assert describe({k: 0 for k in counters}, [Block("sw", ("a",), ("b",), ("v",))]) == []


def test_watchdog_fires_after_limit_idle_cycles_and_never_while_traffic_moves():
    from hdl.common.watchdog import Watchdog
    dut = Watchdog(5)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.i_clear, 1)
        await ctx.tick()
        ctx.set(dut.i_clear, 0)
        ctx.set(dut.i_active, 1)
        for n in range(41):              # progress every fourth cycle: never stuck
            ctx.set(dut.i_progress, n % 4 == 0)
            await ctx.tick()
            assert not ctx.get(dut.o_stuck)
        ctx.set(dut.i_progress, 0)
        for n in range(1, 8):
            await ctx.tick()
            if ctx.get(dut.o_stuck):
                seen.setdefault("stuck_after", n)
        seen["cycles"] = ctx.get(dut.o_cycles)
        ctx.set(dut.i_clear, 1)
        await ctx.tick()
        seen["cleared"] = (ctx.get(dut.o_stuck), ctx.get(dut.o_cycles), ctx.get(dut.o_idle))

    _run(dut, bench)
    assert seen["stuck_after"] == 5
    assert seen["cycles"] == 41 + 5      # counted while active and not stuck
    assert seen["cleared"] == (0, 0, 0)
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        Watchdog(0)


@pytest.mark.parametrize("depth", [17, 20, 32])
def test_registered_read_fifo_matches_sync_fifo_cycle_for_cycle(depth):
    """A deep queue (block RAM) and Amaranth's SyncFIFO, fed the same random
    writes and reads, agree on every output in every cycle, wrapping their
    pointers many times."""
    import random

    from amaranth import Module
    from amaranth.lib.fifo import SyncFIFO

    from hdl.common.queue import RegisteredReadFIFO, sync_fifo

    m = Module()
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)
    m.submodules.dut = dut = sync_fifo(width=8, depth=depth)
    assert isinstance(dut, RegisteredReadFIFO)
    rng = random.Random(depth)
    mismatches = []

    async def bench(ctx):
        for cycle in range(40 * depth):
            # phases that fill, drain and hover around full and empty
            bias = (cycle // (2 * depth)) % 3
            w_en = rng.random() < (0.8, 0.3, 0.5)[bias]
            r_en = rng.random() < (0.3, 0.8, 0.5)[bias]
            data = rng.randrange(256)
            for q in (ref, dut):
                ctx.set(q.w_en, w_en)
                ctx.set(q.r_en, r_en)
                ctx.set(q.w_data, data)
            for member in ("r_rdy", "w_rdy", "level", "r_data"):
                if ctx.get(getattr(ref, member)) != ctx.get(getattr(dut, member)):
                    mismatches.append((cycle, member))
            await ctx.tick()

    _run(m, bench)
    assert mismatches == []


def test_sync_fifo_keeps_shallow_queues_in_distributed_ram_and_rejects_bad_sizes():
    from amaranth import Fragment
    from amaranth.lib.fifo import SyncFIFO

    from hdl.common.queue import LUTRAM_MAX_DEPTH, RegisteredReadFIFO, sync_fifo

    shallow, deep = (sync_fifo(width=4, depth=LUTRAM_MAX_DEPTH + k) for k in (0, 1))
    assert type(shallow) is SyncFIFO and type(deep) is RegisteredReadFIFO
    for queue in (shallow, deep):
        Fragment.get(queue, None)
    with pytest.raises(TypeError, match="depth must be a non-negative integer"):
        sync_fifo(width=4, depth=-1)


@pytest.mark.parametrize("fill_words, filled", [(5, 5), (1, 1), (0, 32), (33, 32)])
def test_the_shared_memory_fill_stops_after_fill_words(fill_words, filled):
    """``ctl_init`` fills words 0 to ``FILL_WORDS - 1``, one per cycle (all 32
    words of a 1 KiB memory when 0, or more than it holds)."""
    from hdl.hopper.endpoint import GlobalReg, SmEndpoint

    cfg = DsmConfig(smem_bytes=1024)
    dut = SmEndpoint(cfg=cfg, flit_layout=make_flit_layout(cfg))
    got = {}

    async def bench(ctx):
        ctx.set(dut.cfg_we, 1)
        ctx.set(dut.cfg_addr, GlobalReg.FILL_WORDS)
        ctx.set(dut.cfg_data, fill_words)
        await ctx.tick()
        ctx.set(dut.cfg_we, 0)
        ctx.set(dut.ctl_init, 1)
        await ctx.tick()
        ctx.set(dut.ctl_init, 0)
        cycles = 0
        while not ctx.get(dut.o_init_done):
            await ctx.tick()
            cycles += 1
        got["cycles"] = cycles

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got["cycles"] == filled


@pytest.mark.parametrize("granules, words", [(9, 5), (6, 3), (2, 1)])
@pytest.mark.parametrize("source", ["zero", "same", "shifted"])
def test_the_post_run_check_compares_each_word_of_a_region(granules, words, source):
    """The check reads one word per read port (three) each cycle and compares
    each with the source pattern of its own address.  A region left at zero
    by the fill (nothing arrived) counts every word wrong, the first at the
    region's start; so does a region whose source words are one off; a
    region over this SM's own filled words, named as its own source, counts
    none, unless its last word is partial: the granule past the region's end
    then holds the pattern where the fill of a checked region leaves zero,
    and that word counts.  Words past the region are not counted."""
    from hdl.hopper.endpoint import CheckReg, GlobalReg, SmEndpoint

    cfg = DsmConfig(smem_bytes=1024)
    dut = SmEndpoint(cfg=cfg, flit_layout=make_flit_layout(cfg))
    slot, base = 3, 2
    region = ((16 + CheckReg.SRC, slot),
              (16 + CheckReg.SRC_BASE, base + (source == "shifted")),
              (16 + CheckReg.LOCAL_BASE, base), (16 + CheckReg.GRANULES, granules))
    got = {}

    async def write(ctx, writes):
        for addr, value in writes:
            ctx.set(dut.cfg_we, 1)
            ctx.set(dut.cfg_addr, addr)
            ctx.set(dut.cfg_data, value)
            await ctx.tick()
        ctx.set(dut.cfg_we, 0)

    async def pulse_and_wait(ctx, pulse, done):
        ctx.set(pulse, 1)
        await ctx.tick()
        ctx.set(pulse, 0)
        cycles = 0
        while not ctx.get(done):
            await ctx.tick()
            cycles += 1
        return cycles

    async def bench(ctx):
        ctx.set(dut.i_slot, slot)
        # the fill zeroes a region registered for checking, and writes the
        # pattern everywhere else
        await write(ctx, ((GlobalReg.FILL_WORDS, 12),) + (region if source == "zero" else ()))
        await pulse_and_wait(ctx, dut.ctl_init, dut.o_init_done)
        await write(ctx, region)
        got["cycles"] = await pulse_and_wait(ctx, dut.ctl_verify, dut.o_verify_done)
        got["errors"], got["first_bad"] = ctx.get(dut.o_errors), ctx.get(dut.o_first_bad)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    partial = granules % 2      # two 16 B granules per 32 B word
    wrong = partial if source == "same" else words
    first = words - 1 if source == "same" else 0
    # ceil(words / 3) cycles of reads, then a cycle to close each region and one to finish
    assert got == {"cycles": -(-words // 3) + 3, "errors": wrong,
                   "first_bad": (1 << 31 | first) if wrong else 0}


def test_the_mesh_checks_see_errors_a_sum_of_lanes_misses():
    """The RTL's fmix32 equals MurmurHash3's finaliser in Python, and the
    mesh checks built on it (register-file checksum, per-flit sum) change
    when the top bit of two lanes flips together, which left a sum of lanes
    mod 2**32 unchanged, and when two lanes swap."""
    import random

    from amaranth import Const, Module, Signal

    from hdl.common.mix import fmix32, fmix32_value
    from hdl.etsoc.engine import checksum, flit_sum

    rng = random.Random(7)
    values = [0, 1, 0xFFFFFFFF, 0x80000000] + [rng.getrandbits(32) for _ in range(8)]
    m = Module()
    outs = [Signal(32, name=f"mix{i}") for i in range(len(values))]
    for out, value in zip(outs, values):
        m.d.comb += out.eq(fmix32_value(Const(value, 32)))
    got = {}

    async def bench(ctx):
        got["mix"] = [ctx.get(out) for out in outs]

    _run(m, bench, clocked=False)
    assert got["mix"] == [fmix32(v) for v in values]
    assert fmix32(1) == 0x514E28B7               # MurmurHash3's fmix32 of 1
    data, addr = rng.getrandbits(128), 0x5A
    top_bits = (1 << 31) | (1 << 63)

    def lane_sum(word):
        return sum(word >> (32 * i) & 0xFFFFFFFF for i in range(4)) & 0xFFFFFFFF

    assert lane_sum(data) == lane_sum(data ^ top_bits)     # what the old sum missed
    assert flit_sum(addr, data) != flit_sum(addr, data ^ top_bits)
    assert flit_sum(addr, data) != flit_sum(addr + 1, data)
    words = [rng.getrandbits(128) for _ in range(64)]
    assert checksum(words) != checksum([words[0] ^ top_bits] + words[1:])
    assert checksum(words) != checksum([words[1], words[0]] + words[2:])


@pytest.mark.parametrize("datapath_bytes", [32, 64])
def test_the_socket_link_takes_a_tlps_bytes_over_its_rate_whatever_the_beat_width(
        datapath_bytes):
    """A stream of 128 B peer-to-peer writes through the socket link, each
    charging ``socket_tlp_overhead_bytes`` plus its beats: the link starts one
    every (121 + 128) / 36 = 6.92 cycles at the default calibration, with
    32 B beats and with 64 B ones (seed 001, '3.2.3', the cross-socket
    copy-engine row it was calibrated on).
    With no queue ahead of the link the part of a cycle a 32 B beat left of
    36 B was lost, and a write took 7.0 cycles with 32 B beats."""
    import dataclasses
    from hdl.pcie.config import PcieConfig
    from hdl.pcie.switch import SocketLink
    from hdl.pcie.tlp import FcClass, TlpType
    cfg = dataclasses.replace(PcieConfig(), datapath_bytes=datapath_bytes)
    dut = SocketLink(cfg, in_credits=16, out_credits=16)
    beats = [(k == 0, k == 128 // datapath_bytes) for k in range(1 + 128 // datapath_bytes)]
    tlps, heads = 24, []

    async def bench(ctx):
        ctx.set(dut.i_bytes_per_cycle, cfg.socket_bytes_per_cycle)
        ctx.set(dut.i_tlp_overhead_bytes, cfg.socket_tlp_overhead_bytes)
        ctx.set(dut.i_latency, 2)
        ctx.set(dut.i_read_room, 1 << 16)
        queue = [(t, head, last) for t in range(tlps) for head, last in beats]
        credits = 16
        for cycle in range(400):
            send = bool(queue) and credits > 0
            ctx.set(dut.i.valid, send)
            if send:
                t, head, last = queue.pop(0)
                credits -= 1
                for field, value in (("kind", TlpType.MWR), ("vc", FcClass.P), ("src", 0),
                                     ("dst", 4), ("length", 128), ("tag", t),
                                     ("head", head), ("last", last)):
                    ctx.set(getattr(dut.i.flit, field), value)
            ctx.set(dut.o.credit, ctx.get(dut.o.valid) << ctx.get(dut.o.flit.vc))
            await ctx.tick()
            credits += ctx.get(dut.i.credit) & 1
            if ctx.get(dut.o.valid) and ctx.get(dut.o.flit.head):
                heads.append((cycle, ctx.get(dut.o.flit.tag)))
            assert not ctx.get(dut.o_overflow)

    _run(dut, bench)
    assert [t for _, t in heads] == list(range(tlps))
    per_write = (heads[-1][0] - heads[4][0]) / (tlps - 5)
    need = (cfg.socket_tlp_overhead_bytes + 128) / cfg.socket_bytes_per_cycle
    assert abs(per_write - need) < 0.05, (per_write, need)
