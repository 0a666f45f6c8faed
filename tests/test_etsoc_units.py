"""Unit tests of the ET-SoC-1 blocks in Amaranth's simulator, and of their configuration."""

import functools

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hdl.common.credit import LinkPipeline
from hdl.etsoc.config import COMBINE_OPS, DEFAULT_PLACEMENT, MeshConfig, tree_edge
from hdl.etsoc.engine import Couple, EngineReg, MinionEngine, MsgKind
from hdl.etsoc.mesh import make_flit_layout, mesh_registers
from sim.experiments.mesh import PingPong, expected_checksums

CFG = MeshConfig()
LAYOUT = make_flit_layout(CFG)


def _pair(a, b, checks=True):
    m = Module()
    ea = MinionEngine(flit_layout=LAYOUT, checks=checks)
    eb = MinionEngine(flit_layout=LAYOUT, checks=checks)
    m.submodules.a, m.submodules.b = ea, eb
    m.d.comb += [ea.i_minion.eq(a), eb.i_minion.eq(b)]
    for x, y in ((ea, eb), (eb, ea)):
        wiring.connect(m, x.o_req, y.i_req)
        wiring.connect(m, x.o_rsp, y.i_rsp)
    return m, ea, eb


async def _write(ctx, engine, regs):
    for reg, value in regs.items():
        ctx.set(engine.i_we, 1)
        ctx.set(engine.i_reg, reg)
        ctx.set(engine.i_data, value)
        await ctx.tick()
    ctx.set(engine.i_we, 0)


async def _start_and_wait(ctx, ea, eb, limit):
    """Pulse both engines' start; return the cycles until both are done
    (None if not within ``limit``)."""
    ctx.set(ea.i_start, 1)
    ctx.set(eb.i_start, 1)
    await ctx.tick()
    ctx.set(ea.i_start, 0)
    ctx.set(eb.i_start, 0)
    for cycle in range(limit):
        await ctx.tick()
        if ctx.get(ea.o_done) and ctx.get(eb.o_done):
            return cycle
    return None


def _ping_pong(op, nregs, checks=True):
    """Two engines exchange ``nregs`` registers twice; returns the cycles to
    done, each engine's checksum and verify-done after the check.  Minion
    545 (shire 17) has the top bit of each of its register lanes set and
    minion 0 clear, so a max or min that compared lanes as signed would
    pick the other's."""
    a, b = CFG.minion_id(0, 0), CFG.minion_id(17, 1)
    m, ea, eb = _pair(a, b, checks)
    got = {}

    async def bench(ctx):
        for e in (ea, eb):
            ctx.set(e.i_send_cycles, 2)
            ctx.set(e.i_recv_cycles, 3)
        for me, peer, couple in ((ea, b, Couple.PING), (eb, a, Couple.PONG)):
            await _write(ctx, me, {EngineReg.TX_PEER: peer, EngineReg.RX_PEER: peer,
                                   EngineReg.TX_COUNT: 2, EngineReg.RX_COUNT: 2,
                                   EngineReg.NREGS: nregs, EngineReg.OP: op,
                                   EngineReg.COUPLE: couple})
        for sig in (ea.i_init, eb.i_init):
            ctx.set(sig, 1)
        await ctx.tick()
        ctx.set(ea.i_init, 0)
        ctx.set(eb.i_init, 0)
        await ctx.tick().repeat(80)
        got["cycles"] = await _start_and_wait(ctx, ea, eb, 4000)
        assert ctx.get(ea.o_done) and ctx.get(eb.o_done), "ping-pong did not finish"
        ctx.set(ea.i_verify, 1)
        ctx.set(eb.i_verify, 1)
        await ctx.tick()
        ctx.set(ea.i_verify, 0)
        ctx.set(eb.i_verify, 0)
        await ctx.tick().repeat(400)
        got[a], got[b] = ctx.get(ea.o_checksum), ctx.get(eb.o_checksum)
        got["verified"] = ctx.get(ea.o_verify_done) and ctx.get(eb.o_verify_done)
        assert ctx.get(ea.o_errors) == 0 and ctx.get(eb.o_errors) == 0

    sim = Simulator(m)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return got, a, b


@pytest.mark.parametrize("op,nregs", [(0, 1), (1, 3), (2, 40), (3, 2)])
def test_ping_pong_delivers_and_combines_every_register(op, nregs):
    got, a, b = _ping_pong(op, nregs)
    pp = PingPong(a, b, nregs=nregs, op=op, exchanges=2)
    assert got["verified"]
    assert {a: got[a], b: got[b]} == expected_checksums(CFG, pp), COMBINE_OPS[op]


def test_without_checks_an_engine_moves_the_same_traffic_in_the_same_cycles():
    """``checks=False`` (for synthesis) leaves out only the checksum: the
    exchange ends in the same cycle, and no check runs."""
    with_checks, a, b = _ping_pong(1, 3)
    without, _, _ = _ping_pong(1, 3, checks=False)
    assert without["cycles"] == with_checks["cycles"]
    assert without[a] == without[b] == 0 and not without["verified"]


def _windowed_stream(idle):
    """Minion ``a`` streams two 4-register messages to ``b`` with at most 3
    flits unacknowledged and an ACK per 4 flits, after ``idle`` quiet cycles;
    returns the cycles from start to done.  Three flits owe an ACK that only
    the ACK sweep sends, so the sweep's phase at the start sets the pace."""
    a, b = CFG.minion_id(0, 0), CFG.minion_id(0, 1)
    m, ea, eb = _pair(a, b)
    got = {}

    async def bench(ctx):
        for e in (ea, eb):
            ctx.set(e.i_send_cycles, 2)
            ctx.set(e.i_recv_cycles, 3)
            ctx.set(e.i_window_flits, 3)
            ctx.set(e.i_ack_flits, 4)
        await _write(ctx, ea, {EngineReg.TX_PEER: b, EngineReg.TX_COUNT: 2,
                               EngineReg.NREGS: 4})
        await _write(ctx, eb, {EngineReg.RX_PEER: a, EngineReg.RX_COUNT: 2})
        await ctx.tick().repeat(idle + 1)
        got["cycles"] = await _start_and_wait(ctx, ea, eb, 2000)
        assert got["cycles"] is not None, "the stream did not finish"
        assert ctx.get(eb.o_rx_msgs) == 2 and ctx.get(eb.o_errors) == 0

    sim = Simulator(m)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return got["cycles"]


def test_a_run_takes_the_same_cycles_however_long_the_engines_idled_before():
    """The ACK sweep restarts with the run, so the idle cycles before a start
    (more register writes, a longer fill) do not move its timing."""
    cycles = {idle: _windowed_stream(idle) for idle in range(16)}
    assert len(set(cycles.values())) == 1, cycles


def test_a_second_ready_waits_behind_the_first():
    """One partner's READY at a time: a second partner's READY is not taken."""
    dut = MinionEngine(flit_layout=LAYOUT)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.i_minion, 1)
        for src in (7, 9):
            ctx.set(dut.i_rsp.valid, 1)
            ctx.set(dut.i_rsp.payload.kind, MsgKind.READY)
            ctx.set(dut.i_rsp.payload.src, src)
            await ctx.tick()
            seen[src] = ctx.get(dut.i_rsp.ready)
        seen["held"] = ctx.get(dut.o_ready_from)
        seen["blocked"] = ctx.get(dut.o_blocked_ready)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert seen["held"] == (1 << 10 | 7)
    assert seen[9] == 0 and seen["blocked"] == (1 << 10 | 9)


def test_link_pipeline_delays_by_its_stages():
    dut = LinkPipeline(flit_layout=LAYOUT, stages=3)
    out = []

    async def bench(ctx):
        for t in range(8):
            ctx.set(dut.i.valid, t == 1)
            ctx.set(dut.i.flit.addr, 0x5A if t == 1 else 0)
            await ctx.tick()
            out.append((ctx.get(dut.o.valid), ctx.get(dut.o.flit.addr)))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert [t for t, (v, _) in enumerate(out) if v] == [3]
    assert out[3][1] == 0x5A


@pytest.mark.parametrize("order", ["xy", "yx"])
def test_a_router_flags_a_flit_sent_off_dimension_order(order):
    """Router (2, 2) takes a flit from its shire for shire 1, at cell (0, 3)
    in the default placement: west first.  A router that routes Y before X
    (same hops, same latency) sends it south, and its route check, which
    reads only what leaves the crossbar, flags that output."""
    from hdl.etsoc.mesh import MeshRouter, Port

    class YFirst(MeshRouter):
        def route(self, m, flit, i):
            tx, ty = self.destination_cell(flit)
            out = Signal(Port, name=f"route_{i}")
            with m.If(ty > self.i_y):
                m.d.comb += out.eq(Port.SOUTH)
            with m.Else():
                m.d.comb += out.eq(super().route(m, flit, i))
            return out

    assert CFG.placement[1] == (0, 3)
    dut = (MeshRouter if order == "xy" else YFirst)(CFG, LAYOUT)
    left = []

    async def bench(ctx):
        ctx.set(dut.i_x, 2)
        ctx.set(dut.i_y, 2)
        ctx.set(dut.i[Port.LOCAL].valid, 1)
        ctx.set(dut.i[Port.LOCAL].flit.dst, 1 << 5)
        await ctx.tick()
        ctx.set(dut.i[Port.LOCAL].valid, 0)
        for _ in range(8):
            left.extend(p for p in Port if ctx.get(dut.o[p].valid))
            await ctx.tick()
        left.append(ctx.get(dut.o_misrouted))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    if order == "xy":
        assert left == [Port.WEST, 0]
    else:
        assert left == [Port.SOUTH, 1 << Port.SOUTH]


def test_every_router_sends_every_shire_s_flit_out_its_dimension_order_port():
    """From each of the 36 cells of the 6x6 mesh, a flit for each of the 32
    shires leaves east or west until its column is reached, then north or
    south, then to the local shire: the route function checked against the
    placement for every pair (a flit for the row just north once went local)."""
    from hdl.etsoc.mesh import MeshRouter, Port

    dut = MeshRouter(CFG, LAYOUT)
    wrong = []

    def expected(x, y, tx, ty):
        if tx != x:
            return Port.EAST if tx > x else Port.WEST
        if ty != y:
            return Port.SOUTH if ty > y else Port.NORTH
        return Port.LOCAL

    async def bench(ctx):
        for x in range(CFG.mesh_cols):
            for y in range(CFG.mesh_rows):
                ctx.set(dut.i_x, x)
                ctx.set(dut.i_y, y)
                for shire, (tx, ty) in enumerate(CFG.placement):
                    # from the west neighbour's link, or the east's in column 0
                    port = Port.WEST if x else Port.EAST
                    ctx.set(dut.i[port].valid, 1)
                    ctx.set(dut.i[port].flit.dst, shire << 5)
                    await ctx.tick()
                    ctx.set(dut.i[port].valid, 0)
                    left = []
                    for _ in range(8):
                        was = len(left)
                        left += [p for p in Port if ctx.get(dut.o[p].valid)]
                        await ctx.tick()
                        if was and len(left) == was:    # out, and nothing after it
                            break
                    for p in left:          # the credit (VC 0) of the flit that left
                        ctx.set(dut.o[p].credit, 1)
                    await ctx.tick()
                    for p in Port:
                        ctx.set(dut.o[p].credit, 0)
                    if left != [expected(x, y, tx, ty)]:
                        wrong.append(((x, y), shire, left))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]


def test_tree_edges_of_a_neighbourhood():
    edges = {(a, b) for a in range(8) for b in range(8) if a < b and tree_edge(a, b)}
    assert edges == {(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (4, 6), (0, 4)}


@pytest.mark.parametrize("field,value,message", [
    ("placement", ((0, 0),) * 32, "placement must be distinct cells"),
    ("placement", ((9, 0),) + ((0, 1),) * 31, "placement must be cells inside the 6x6 mesh"),
    ("minions_per_neighbourhood", 3, "minions_per_neighbourhood must be one of 1, 2, 4, 8"),
    ("router_hop_mesh_cycles", 1, "router_hop_mesh_cycles must be an integer from 2 to 16"),
    ("mesh_cols", 0, "mesh_cols must be an integer from 1 to 16"),
    ("mesh_window_flits", 256, r"mesh_window_flits must be 0 \(no window\) or an integer "
                               "from 1 to 255"),
    ("ack_flits", 3, "ack_flits must be at most 2 with mesh_window_flits 51 and 32 compute "
                     "shires"),
    ("crossbar_buffer_flits", 0, "crossbar_buffer_flits must be an integer from 1 to 255"),
])
def test_bad_configuration_names_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        MeshConfig(**{field: value})


def test_fewer_shires_take_the_default_placement_s_first_cells():
    # A placement the configuration filled in is filled in again; one given is kept.
    assert MeshConfig().replace(compute_shires=4).placement == DEFAULT_PLACEMENT[:4]
    given = MeshConfig(compute_shires=2, placement=((5, 5), (4, 5)))
    assert given.replace(router_hop_mesh_cycles=3).placement == ((5, 5), (4, 5))
    with pytest.raises(ValueError, match="placement must be 3 "):
        given.replace(compute_shires=3)
    # a mesh too small for the default's cells says the default is the one outside it
    with pytest.raises(ValueError, match=r"^placement must be cells inside the 2x1 mesh "
                                         r"\(mesh_cols x mesh_rows\); the default, the first "
                                         r"compute_shires cells of the seed's 6x6 map, is not: "
                                         r"give placement=x0,y0,x1,y1,\.\.\., not "
                                         r"\(\(0, 0\), \(0, 3\)\)$"):
        MeshConfig(mesh_cols=2, mesh_rows=1, compute_shires=2)
    assert MeshConfig(mesh_cols=2, mesh_rows=1, compute_shires=2,
                      placement=((1, 0), (0, 0))).placement == ((1, 0), (0, 0))


def test_one_credit_per_link_elaborates():
    # Amaranth's AsyncFIFO cannot be one deep; the crossing keeps two entries.
    from amaranth.back import rtlil
    from hdl.common.cdc import LinkCdc
    layout = make_flit_layout(MeshConfig())
    assert "module" in rtlil.convert(LinkCdc(flit_layout=layout, depth=1, out_credits=1,
                                             i_domain="sync", o_domain="mesh"))


def test_flat_placement_from_the_command_line():
    flat = tuple(v for cell in CFG.placement for v in cell)
    assert MeshConfig(placement=flat).placement == CFG.placement
    assert len(CFG.non_compute_cells) == 4


@pytest.mark.parametrize("latency", [0, 1, 2, 5, 30])
def test_link_delay_holds_every_flit_for_its_latency(latency):
    from hdl.common.credit import LinkDelay
    dut = LinkDelay(flit_layout=LAYOUT, capacity=8)
    sent, got = {}, {}

    async def bench(ctx):
        ctx.set(dut.i_latency, latency)
        for t in range(latency + 40):
            burst = t in (2, 3, 4, 9)
            ctx.set(dut.i.valid, burst)
            ctx.set(dut.i.flit.addr, t)
            if ctx.get(dut.o.valid):
                got[ctx.get(dut.o.flit.addr)] = t
            await ctx.tick()
            if burst:
                sent[t] = t

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert sorted(got) == [2, 3, 4, 9]
    assert all(got[t] - t == latency for t in got), got


def test_config_default_placement_is_the_searched_one():
    from sim.etsoc_placement import default_placement
    assert CFG.placement == default_placement()


def _reduced(words, op):
    from hdl.etsoc.engine import combine
    out = words[0]
    for w in words[1:]:
        out = combine(op, out, w)
    return out


@pytest.mark.parametrize("levels,op,nregs", [(0b11, 1, 1), (0b100011, 1, 3), (0b111, 2, 2),
                                              (0b1, 3, 40)])
def test_tree_allreduce_leaves_every_minion_with_the_result(levels, op, nregs):
    """A reduce up and broadcast down over a level mask, through a network that
    holds each minion's children's messages until all of them are queued, then
    delivers them interleaved flit by flit (two children's flits for one word
    back to back: the combine pipeline's hazard)."""
    from hdl.etsoc.engine import checksum, register_word, tree_roles
    members = [g for g in range(1024) if g & ~levels == 0]
    m = Module()
    engines = {}
    for g in members:
        engines[g] = e = MinionEngine(flit_layout=LAYOUT)
        m.submodules[f"e{g}"] = e
        m.d.comb += e.i_minion.eq(g)
    got = {}

    async def bench(ctx):
        for e in engines.values():
            ctx.set(e.i_send_cycles, 2)
            ctx.set(e.i_recv_cycles, 3)
            await _write(ctx, e, {EngineReg.TREE: levels, EngineReg.NREGS: nregs,
                                  EngineReg.OP: op})
            ctx.set(e.i_init, 1)
        await ctx.tick()
        for e in engines.values():
            ctx.set(e.i_init, 0)
        await ctx.tick().repeat(80)
        for e in engines.values():
            ctx.set(e.i_start, 1)
        await ctx.tick()
        for e in engines.values():
            ctx.set(e.i_start, 0)
        queues = {g: {} for g in members}     # destination -> source -> flits
        children = {g: tree_roles(g, levels)[1] for g in members}
        flits = nregs * CFG.flits_per_register + 1
        arrived = {g: 0 for g in members}     # child flits ever queued to g
        for turn in range(20000):
            taken = []
            for g, e in engines.items():
                held = arrived[g] < len(children[g]) * flits
                sources = [s for s, q in sorted(queues[g].items())
                           if q and not (held and s in children[g])]
                ctx.set(e.i_req.valid, bool(sources))
                if sources:
                    src = sources[turn % len(sources)]
                    ctx.set(e.i_req.payload, queues[g][src][0])
                    if ctx.get(e.i_req.ready):
                        taken.append((g, src))
            for g, src in taken:
                queues[g][src].pop(0)
            for g, e in engines.items():
                ctx.set(e.o_req.ready, 1)
                if ctx.get(e.o_req.valid):
                    flit = ctx.get(e.o_req.payload)
                    queues[flit.dst].setdefault(g, []).append(flit)
                    arrived[flit.dst] += g in children[flit.dst]
            await ctx.tick()
            if all(ctx.get(e.o_done) for e in engines.values()):
                break
        assert all(ctx.get(e.o_done) for e in engines.values()), "the tree did not finish"
        for e in engines.values():
            ctx.set(e.i_verify, 1)
        await ctx.tick()
        for e in engines.values():
            ctx.set(e.i_verify, 0)
        await ctx.tick().repeat(400)
        for g, e in engines.items():
            got[g] = (ctx.get(e.o_checksum), ctx.get(e.o_errors), ctx.get(e.o_rx_msgs),
                      ctx.get(e.o_tx_msgs))

    sim = Simulator(m)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    flits = nregs * CFG.flits_per_register
    words = CFG.registers * CFG.flits_per_register
    result = [_reduced([register_word(g, w % words) for g in members], op)
              for w in range(min(flits, words))]
    for g in members:
        regs = [register_word(g, w) for w in range(words)]
        regs[:len(result)] = result
        parent, children = tree_roles(g, levels)
        messages = len(children) + (parent is not None)
        assert got[g] == (checksum(regs), 0, messages, messages), g


def _simulate_mesh(cfg, run, extra=()):
    """Run one :func:`~sim.experiments.mesh.build_run` run on the whole mesh in
    Amaranth's simulator: write, fill, start, wait for done or stuck, read the
    run's counters (plus ``extra``) and, when done, its checksums."""
    from amaranth.sim import Simulator as Sim

    from hdl.etsoc.mesh import EtSocMesh, counter_names

    dut = EtSocMesh(cfg)
    names = counter_names(cfg)
    out = {}

    async def mesh_clock(ctx):
        while True:
            ctx.set(dut.mesh_clk, 0)
            await ctx.delay(1.25e-9)
            ctx.set(dut.mesh_clk, 1)
            await ctx.delay(1.25e-9)

    async def bench(ctx):
        for addr, value in run["writes"]:
            ctx.set(dut.cfg_we, 1)
            ctx.set(dut.cfg_addr, addr)
            ctx.set(dut.cfg_data, value)
            await ctx.tick()
        ctx.set(dut.cfg_we, 0)
        pulses = [("ctl_init", "init_done"), ("ctl_start", "done")]
        for pulse, wait in pulses:
            ctx.set(getattr(dut, pulse), 1)
            await ctx.tick()
            ctx.set(getattr(dut, pulse), 0)
            for _ in range(8000):
                await ctx.tick()
                if ctx.get(getattr(dut, wait)) or ctx.get(dut.stuck):
                    break
        keys = run["read"] + ["stuck", "overflow", "cycles"] + list(extra)
        if ctx.get(dut.done):
            ctx.set(dut.ctl_verify, 1)
            await ctx.tick()
            ctx.set(dut.ctl_verify, 0)
            for _ in range(8000):
                await ctx.tick()
                if ctx.get(dut.verify_done):
                    break
            keys += run["verify"]
        for key in keys:
            ctx.set(dut.rd_addr, names.index(key))
            await ctx.tick()
            out[key] = ctx.get(dut.rd_data)

    sim = Sim(dut)
    sim.add_clock(1.667e-9)
    sim.add_process(mesh_clock)
    sim.add_testbench(bench)
    sim.run()
    return out


@functools.lru_cache(maxsize=None)
def _stream_through_two_shires(window=0, mesh_window=0):
    """Two one-minion shires pass 256 B messages both ways (Amaranth's
    simulator), with the engines' and the mesh stops' windows given; returns
    the counters of the run."""
    from sim.experiments import mesh as experiments

    cfg = MeshConfig(compute_shires=2, mesh_cols=2, mesh_rows=1, placement=((0, 0), (1, 0)),
                     neighbourhoods=1, minions_per_neighbourhood=1, send_window_flits=window,
                     mesh_window_flits=mesh_window, ack_flits=2, watchdog_cycles=3000)
    a, b = cfg.minion_id(0, 0), cfg.minion_id(1, 0)
    run = experiments.build_run(cfg, "stream", experiments.Flows(((a, b), (b, a)), nregs=8,
                                                                 exchanges=3))
    out = _simulate_mesh(cfg, run)
    assert out["stuck"] == 0 and out["overflow"] == 0, out
    # every run check, the engines' send-window check among them
    experiments.check_run(cfg, run, {"ended": "done", "counters": out, "checksums": out})
    for rx, tx in run["sum_pairs"]:
        assert out[rx] == out[tx] != 0
    assert out["s0.m0.rx_msgs"] == out["s1.m0.rx_msgs"] == 3
    return out


def test_send_window_holds_back_a_stream_and_loses_nothing():
    """With 3 flits in flight at most, 256 B messages wait for ACKs: the run is
    slower than without a window, and every flit still arrives intact."""
    free = _stream_through_two_shires()
    held = _stream_through_two_shires(window=3)
    assert held["cycles"] > 2 * free["cycles"], (held["cycles"], free["cycles"])


def test_mesh_stop_window_holds_back_a_stream_and_loses_nothing():
    """With 8 request flits of each shire on the mesh at most, 256 B messages
    wait for the mesh stops' ACKs: the run is slower than without a window,
    and every flit still arrives intact."""
    free = _stream_through_two_shires()
    held = _stream_through_two_shires(mesh_window=8)
    assert held["cycles"] > 1.2 * free["cycles"], (held["cycles"], free["cycles"])


def _one_shire(**fields):
    return MeshConfig(compute_shires=1, mesh_cols=1, mesh_rows=1, placement=((0, 0),),
                      neighbourhoods=2, minions_per_neighbourhood=2, watchdog_cycles=2000,
                      **fields)


@pytest.mark.parametrize("members", [(0, 1, 2, 3), (1, 2, 3)])
def test_barrier_passes_every_member_and_wakes_each_once(members):
    """FLB plus credit barriers in a row: every member passes each barrier,
    none passes early, and no register changes."""
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    run = experiments.build_run(cfg, "barrier", experiments.Barrier(
        tuple(cfg.minion_id(0, k) for k in members), exchanges=3))
    out = _simulate_mesh(cfg, run)
    assert out["stuck"] == 0 and out["overflow"] == 0, out
    experiments.check_run(cfg, run, {"ended": "done", "counters": out, "checksums": out})
    exits = sorted(out[f"s0.m{k}.first_rx"] for k in members)
    lasts = sorted(out[f"s0.m{k}.last_rx"] for k in members)
    # a barrier's exits all come after its last arrival, so the spread of one
    # barrier's exits stays under the time between barriers
    assert exits[-1] - exits[0] < lasts[0] - exits[-1], (exits, lasts)


def test_barrier_with_a_missing_member_sleeps_and_is_named():
    """A member that never arrives leaves the others asleep; the watchdog
    stops the run and the report names the sleeping minions."""
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    run = experiments.build_run(cfg, "short", experiments.Barrier(
        (cfg.minion_id(0, 0), cfg.minion_id(0, 1)), exchanges=2))
    # minion 2 is counted in the barrier's members but never runs
    run["writes"] = [(a, v | 4 if a & 15 == EngineReg.BARRIER else v) for a, v in run["writes"]]
    out = _simulate_mesh(cfg, run, extra=["s0.m0.state", "s0.m1.state"])
    assert out["stuck"] == 1
    with pytest.raises(experiments.ExperimentError, match="asleep waiting for a credit: "
                                                          "s0.m0, s0.m1"):
        experiments.check_run(cfg, run, {"ended": "stuck", "counters": out})


def test_credit_ping_pong_round_trip_rises_with_distance():
    """Credits cross the tree edge faster than the crossbar, and every credit
    sent wakes its partner once."""
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    rts = {}
    for name, b in (("tree", 1), ("crossbar", 2)):
        pp = experiments.CreditPingPong(cfg.minion_id(0, 0), cfg.minion_id(0, b), exchanges=4)
        run = experiments.build_run(cfg, name, pp, meta={})
        out = _simulate_mesh(cfg, run)
        experiments.check_run(cfg, run, {"ended": "done", "counters": out, "checksums": out})
        rts[name] = (out["s0.m0.last_rx"] - out["s0.m0.first_rx"]) / 3
    assert 0 < rts["tree"] < rts["crossbar"], rts


def test_two_barriers_in_one_shire_are_refused():
    """A shire has one barrier counter: two barriers in it at once would count
    each other's arrivals."""
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    with pytest.raises(ValueError, match="barriers must be in different shires"):
        experiments.build_run(cfg, "two", [
            experiments.Barrier((cfg.minion_id(0, 0), cfg.minion_id(0, 1))),
            experiments.Barrier((cfg.minion_id(0, 2), cfg.minion_id(0, 3)))])


def test_runs_without_credits_write_no_credit_registers():
    """Credit and barrier registers are written only where a run sets them or
    an earlier run did, so other runs' writes are unchanged."""
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    a, b = cfg.minion_id(0, 0), cfg.minion_id(0, 2)
    dirty = set()
    regs = lambda run: {addr & 15 for addr, _ in run["writes"]  # noqa: E731
                        if not addr & experiments.GLOBAL}
    first = experiments.build_run(cfg, "msg", experiments.PingPong(a, b), dirty)
    assert not regs(first) & {EngineReg.CREDIT, EngineReg.BARRIER}
    experiments.build_run(cfg, "credit", experiments.CreditPingPong(a, b), dirty)
    again = experiments.build_run(cfg, "msg", experiments.PingPong(a, b), dirty)
    assert {(addr >> 4, addr & 15, v) for addr, v in again["writes"]} >= {
        (a, EngineReg.CREDIT, 0), (b, EngineReg.CREDIT, 0)}
    last = experiments.build_run(cfg, "msg", experiments.PingPong(a, b), dirty)
    assert not regs(last) & {EngineReg.CREDIT, EngineReg.BARRIER}


def _bus_state(cfg, writes):
    """What the configuration bus leaves in every register after ``writes``."""
    from hdl.etsoc.mesh import ALL_MINIONS, GLOBAL

    built = [cfg.minion_id(s, k) for s in range(cfg.compute_shires)
             for k in range(cfg.minions_per_shire)]
    state = {}
    for addr, value in writes:
        if addr & GLOBAL:
            state["mesh", addr & 15] = value
        for gid in built if addr & ALL_MINIONS else () if addr & GLOBAL else (addr >> 4,):
            state[gid, addr & 15] = value
    return state


def test_a_register_set_on_every_minion_is_written_once_for_all():
    """A register a run sets on every built minion goes out as one
    ``ALL_MINIONS`` write of its commonest value, then the minions that differ
    (the last of two writes counting); every register ends as the per-minion
    writes leave it.  A register some minion is not given stays per minion."""
    from hdl.etsoc.mesh import ALL_MINIONS, GLOBAL
    from sim.experiments import mesh as experiments

    cfg = _one_shire()
    built = [cfg.minion_id(0, k) for k in range(cfg.minions_per_shire)]
    writes = ([(GLOBAL | 0, 10)]
              + [(g << 4 | EngineReg.NREGS, 3 if g == built[2] else 1) for g in built]
              + [(built[0] << 4 | EngineReg.OP, 1), (built[1] << 4 | EngineReg.NREGS, 2),
                 (built[1] << 4 | EngineReg.NREGS, 1)])
    out = experiments.broadcast_writes(cfg, writes)
    assert _bus_state(cfg, out) == _bus_state(cfg, writes)
    assert out == [(GLOBAL | 0, 10), (ALL_MINIONS | EngineReg.NREGS, 1),
                   (built[2] << 4 | EngineReg.NREGS, 3), (built[0] << 4 | EngineReg.OP, 1)]
    assert experiments.broadcast_writes(cfg, writes[:-3]) != writes[:-3]
    assert experiments.broadcast_writes(cfg, writes[:2] + writes[3:-3]) == writes[:2] + writes[3:-3]
    # a tree over every minion: the mesh-wide registers and one write per engine register
    tree = experiments.build_run(cfg, "all", experiments.Tree(0b11), set())
    assert len(tree["writes"]) == len(mesh_registers(cfg)) + 8
    assert all(addr & (GLOBAL | ALL_MINIONS) for addr, _ in tree["writes"])


def test_a_stray_flit_is_counted_and_its_source_recorded():
    """A flit from a minion that is not the running receive's partner is
    consumed, counted in ``o_errors`` and the first one's source held in
    ``o_first_stray`` with its arrival time (the mesh check names both)."""
    me, partner, stranger = CFG.minion_id(0, 0), CFG.minion_id(1, 0), CFG.minion_id(3, 2)
    e = MinionEngine(flit_layout=LAYOUT)
    got = {}

    async def bench(ctx):
        ctx.set(e.i_minion, me)
        await _write(ctx, e, {EngineReg.TX_PEER: partner, EngineReg.RX_PEER: partner,
                              EngineReg.TX_COUNT: 0, EngineReg.RX_COUNT: 2,
                              EngineReg.NREGS: 1, EngineReg.COUPLE: Couple.NONE})
        ctx.set(e.i_now, 500)
        ctx.set(e.i_start, 1)
        await ctx.tick()
        ctx.set(e.i_start, 0)
        for n, src in enumerate((stranger, partner ^ 1)):
            ctx.set(e.i_now, 501 + n)
            ctx.set(e.i_req.valid, 1)
            ctx.set(e.i_req.payload.src, src)
            ctx.set(e.i_req.payload.dst, me)
            ctx.set(e.i_req.payload.kind, MsgKind.DATA)
            await ctx.tick()
        ctx.set(e.i_req.valid, 0)
        await ctx.tick().repeat(4)
        got["errors"], got["first"] = ctx.get(e.o_errors), ctx.get(e.o_first_stray)
        got["cycle"] = ctx.get(e.o_first_stray_cycle)

    sim = Simulator(e)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == {"errors": 2, "first": 1 << 10 | stranger, "cycle": 501}


def test_the_mesh_check_names_the_first_stray_flit():
    from sim.experiments import mesh
    run = {"label": "strays", "counts": {}, "expect": {}}
    got = {"ended": "done", "checksums": {},
           "counters": {"overflow": 0, "s3.m0.errors": (1 << 10 | 37) << 16 | 2,
                        "s3.m0.first_stray_cycle": 1234}}
    with pytest.raises(mesh.ExperimentError) as info:
        mesh.check_run(CFG, run, got)
    assert str(info.value) == ("strays: s3.m0.errors = 2 flits arrived outside a receive, the "
                               "first from s1.m5 to s3.m0 at minion cycle 1234")


@pytest.mark.parametrize("fabric", ["dsm", "mesh", "pcie"])
@pytest.mark.parametrize("ended", ["done", "stuck"])
def test_an_overflow_is_named_before_the_hang_it_causes(fabric, ended):
    """A flit written into a full buffer is the first fault; the run it then
    hangs must fail with the overflow, not as only stuck."""
    import importlib

    from hdl.hopper.config import DsmConfig
    from hdl.pcie.config import PcieConfig
    experiments = importlib.import_module(f"sim.experiments.{fabric}")
    counters = {"overflow": 1, "cycles": 20902}
    run = {"label": "run 3", "ended": ended, "counters": counters}
    with pytest.raises(experiments.ExperimentError) as info:
        if fabric == "dsm":
            experiments.check_run(DsmConfig(), run)
        else:
            cfg = MeshConfig() if fabric == "mesh" else PcieConfig()
            experiments.check_run(cfg, {"label": "run 3"}, run)
    message = str(info.value)
    assert "a buffer overflowed" in message and "run 3" in message
    assert message.endswith("broken)" if ended == "done"
                            else "(the run then ended stuck after 20902 cycles)")


def test_a_hang_the_seed_expects_must_be_the_watchdog_s():
    """The naive 2D layout may end stuck (the watchdog named it) or done
    (its row then says so, and its registers are checked); out of time it
    fails, since a watchdog that never fires would otherwise pass as "does
    not hang" only in a row."""
    from sim.experiments import mesh
    run = {"label": "naive 2D", "counts": {}, "expect": {}}
    stuck = {"ended": "stuck", "counters": {"overflow": 0, "cycles": 20140}}
    mesh.check_expected_hang(CFG, run, stuck)
    with pytest.raises(mesh.ExperimentError, match=r"^naive 2D: still moving .* a run expected "
                                                   r"to hang must be stopped by the watchdog$"):
        mesh.check_expected_hang(CFG, run, dict(stuck, ended="timeout"))
    with pytest.raises(mesh.ExperimentError, match=r"a buffer overflowed.*ended stuck"):
        mesh.check_expected_hang(CFG, run, dict(stuck, counters={"overflow": 1,
                                                                 "cycles": 20140}))


def test_a_reduced_build_note_gives_way_to_the_shape_the_user_set():
    """The note that a build has minion 0 alone per shire holds for that build;
    under a user's neighbourhoods=4 the note names the 4 x 1 shape built."""
    from sim.experiments import mesh as experiments

    notes = experiments.EXPERIMENTS["credit"].notes
    built = experiments.build_config(CFG, experiments.EXPERIMENTS["credit"])
    assert experiments.build_notes(notes, built) == list(notes)
    wider = experiments.build_config(MeshConfig(neighbourhoods=4),
                                     experiments.EXPERIMENTS["credit"], ("neighbourhoods",))
    changed = experiments.build_notes(notes, wider)
    assert changed[0].startswith("Built with 4 neighbourhoods of 1 minion per shire, as set")
    assert changed[1:] == list(notes[1:])


def _mesh_stop_run(window, credits=4, acks=(), off_first=0, lowered=None, error=0):
    """Drive a :class:`~hdl.etsoc.mesh.MeshStop` as its clock crossing and
    router would: upstream sends a request flit whenever it holds a request
    credit, the router frees its slot one cycle later, and the ACKs in
    ``acks`` (``(cycle, count)``) arrive from the far stop.  The window is 0
    for the first ``off_first`` cycles, and ``lowered[1]`` from cycle
    ``lowered[0]`` on.  Returns the flits sent by each of 200 cycles after
    those; ``o_error`` must end as ``error``."""
    from hdl.etsoc.mesh import MeshStop
    from hdl.etsoc.shire import MESH_STOP_ACK

    stop = MeshStop(flit_layout=LAYOUT, credits=credits)
    sent = []

    async def bench(ctx):
        held, total, returning = credits, 0, 0
        acks_at = dict(acks)
        for cycle in range(-off_first, 200):
            now = lowered[1] if lowered and cycle >= lowered[0] else window if cycle >= 0 else 0
            ctx.set(stop.i_window_flits, now)
            send = held > 0
            ctx.set(stop.i_up.valid, send)
            ctx.set(stop.i_up.flit.vc, 0)
            ctx.set(stop.o_up.credit, returning)
            ack = acks_at.get(cycle, 0)
            ctx.set(stop.i_arrive_valid, ack != 0)
            ctx.set(stop.i_arrive.kind, MsgKind.ACK)
            ctx.set(stop.i_arrive.vc, 1)
            ctx.set(stop.i_arrive.data, ack | 1 << MESH_STOP_ACK)
            await ctx.delay(1e-10)
            assert ctx.get(stop.o_up.valid) == send
            gave = ctx.get(stop.i_up.credit) & 1
            await ctx.tick()
            held += gave - send
            returning = int(send)
            if cycle >= 0:
                total += send
                sent.append(total)
        assert ctx.get(stop.o_error) == error

    sim = Simulator(stop)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return sent


@pytest.mark.parametrize("window", [4, 9, 30])
def test_the_mesh_stop_sends_its_window_and_then_one_flit_per_flit_acknowledged(window):
    """Without ACKs a mesh stop lets exactly ``window`` request flits onto the
    mesh; each ACK lets exactly its count more go."""
    sent = _mesh_stop_run(window)
    assert sent[-1] == window and sent[window + 5] == window
    sent = _mesh_stop_run(window, acks=((100, 3), (150, 1)))
    assert sent[99] == window and sent[149] == window + 3 and sent[-1] == window + 4


def test_without_a_window_the_mesh_stop_passes_every_credit():
    sent = _mesh_stop_run(0)
    assert sent[-1] >= 150


def test_a_window_switched_on_after_running_without_one_holds_exactly():
    """Credits that passed while the window was off leave no trace."""
    assert _mesh_stop_run(9, off_first=37)[-1] == 9


def test_a_window_lowered_below_the_flits_it_let_out_is_flagged():
    """A window may change only while the stop is idle: lowered from 30 to 9
    with 30 flits on the mesh, the window no longer holds them and the
    sticky ``o_error`` says so; lowered only to the 30 out, it holds."""
    assert _mesh_stop_run(30, lowered=(100, 9), error=1)[-1] == 30
    assert _mesh_stop_run(30, lowered=(100, 30))[-1] == 30


def _mesh_stop_acks(arrivals, window, ack_flits, cycles, busy_at=None, ready=True):
    """Hand a :class:`~hdl.etsoc.mesh.MeshStop` of shire 7 the flits
    ``arrivals`` (``(source shire, VC, last)``), one a cycle, and return the
    ACKs it sends as ``(destination shire, count)``, each checked to be an
    ACK flit from shire 7 on the response channel, and its ``o_error``.  The
    stop must be busy at cycle ``busy_at`` and, when the ACKs can leave
    (``ready``), idle after ``cycles``."""
    from hdl.etsoc.mesh import MeshStop
    from hdl.etsoc.shire import MESH_STOP_ACK

    stop = MeshStop(flit_layout=LAYOUT, credits=4)
    got, error = [], []

    async def bench(ctx):
        ctx.set(stop.i_shire, 7)
        ctx.set(stop.i_window_flits, window)
        ctx.set(stop.i_ack_flits, ack_flits)
        ctx.set(stop.o.ready, ready)
        for cycle in range(cycles):
            shire, vc, last = arrivals[cycle] if cycle < len(arrivals) else (0, 0, 0)
            ctx.set(stop.i_arrive_valid, cycle < len(arrivals))
            ctx.set(stop.i_arrive.src, shire << 5 | 9)
            ctx.set(stop.i_arrive.vc, vc)
            ctx.set(stop.i_arrive.kind, MsgKind.READY if vc else MsgKind.DATA)
            ctx.set(stop.i_arrive.last, last)
            await ctx.delay(1e-10)
            if ctx.get(stop.o.valid) and ready:
                flit = stop.o.payload
                data = ctx.get(flit.data)
                assert ctx.get(flit.kind) == MsgKind.ACK and ctx.get(flit.vc) == 1
                assert data >> MESH_STOP_ACK & 1 and ctx.get(flit.src) == 7 << 5
                got.append((ctx.get(flit.dst) >> 5, data & 0xFFFF))
            if cycle == busy_at:
                assert not ctx.get(stop.o_idle)
            await ctx.tick()
        assert ctx.get(stop.o_idle) or not ready
        error.append(ctx.get(stop.o_error))

    sim = Simulator(stop)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return got, error[0]


def test_the_mesh_stop_acknowledges_each_source_shire_by_count_and_at_a_last_flit():
    """Request flits from shires 3 and 5 interleave; with an ACK per 2 flits
    each shire gets ACKs of 2, then 1 for the odd flit closing its message.
    Response flits are not counted; the stop is idle once all have gone."""
    # (source shire, VC, last): 3 flits from each, a response flit between
    arrivals = [(3, 0, 0), (5, 0, 0), (3, 1, 1), (3, 0, 0), (5, 0, 0), (3, 0, 1), (5, 0, 1)]
    got, error = _mesh_stop_acks(arrivals, window=51, ack_flits=2, cycles=40, busy_at=5)
    assert sorted(got) == [(3, 1), (3, 2), (5, 1), (5, 2)], got
    assert not error


def test_a_count_as_large_as_the_largest_window_goes_back_in_one_ack():
    """With the largest window and ACK spacing (255 flits) the 255 request
    flits of one source shire come back as a single ACK of 255: a stop's
    count per source holds every flit a source may have on the mesh.  One
    flit more, with the ACK held up, is an error rather than a count that
    wraps."""
    got, error = _mesh_stop_acks([(3, 0, 0)] * 255, window=255, ack_flits=255, cycles=265)
    assert got == [(3, 255)] and not error, got
    got, error = _mesh_stop_acks([(3, 0, 0)] * 256, window=255, ack_flits=255, cycles=265,
                                 ready=False)
    assert error


def test_a_shire_port_ends_its_stop_s_acks_and_returns_every_credit():
    """The router hands a shire port request and response flits, the response
    flits in pairs of READYs and pairs of ACKs for its mesh stop, as fast as
    its 3 credits per VC allow: the other flits reach the shire in order, no
    ACK does, and every credit of each VC comes back, none twice (ACKs in a
    row are dropped while the crossing returns credits, so up to two
    credits wait for the link)."""
    from amaranth import ClockDomain

    from hdl.common.flit import VC
    from hdl.etsoc.mesh import ShirePort
    from hdl.etsoc.shire import MESH_STOP_ACK

    depth = 3
    m = Module()
    m.domains.mesh = ClockDomain("mesh")
    m.submodules.port = port = ShirePort(flit_layout=LAYOUT, depth=depth)
    # (tag, VC, is an ACK for the stop)
    flits = [(k, VC.REQ if k % 5 == 0 else VC.RSP, k % 5 != 0 and k % 4 >= 2) for k in range(80)]
    got, state = [], {"credits": [depth, depth], "sent": 0}

    async def router(ctx):
        for _ in range(800):
            send = False
            if state["sent"] < len(flits):
                tag, vc, ack = flits[state["sent"]]
                send = state["credits"][vc] > 0
            ctx.set(port.i_down.valid, send)
            if send:
                ctx.set(port.i_down.flit.vc, vc)
                kind = MsgKind.ACK if ack else MsgKind.DATA if vc == VC.REQ else MsgKind.READY
                ctx.set(port.i_down.flit.kind, kind)
                ctx.set(port.i_down.flit.data, tag | (ack << MESH_STOP_ACK))
            await ctx.delay(1e-12)
            back = ctx.get(port.i_down.credit)
            for v in (VC.REQ, VC.RSP):
                state["credits"][v] += (back >> v & 1) - (send and vc == v)
                assert 0 <= state["credits"][v] <= depth, state
            state["sent"] += send
            await ctx.tick("mesh")

    async def shire(ctx):
        took = 0
        for _ in range(1200):
            ctx.set(port.o_down.credit, took)
            await ctx.delay(1e-12)
            took = 0
            if ctx.get(port.o_down.valid):
                took = 1 << ctx.get(port.o_down.flit.vc)
                got.append(ctx.get(port.o_down.flit.data))
            await ctx.tick()
        state["overflow"] = ctx.get(port.o_overflow)

    sim = Simulator(m)
    sim.add_clock(1 / 600e6)
    sim.add_clock(1 / 400e6, domain="mesh")
    sim.add_testbench(router)
    sim.add_testbench(shire)
    sim.run()
    assert state["sent"] == len(flits)
    assert got == [tag for tag, _, ack in flits if not ack]
    assert state["credits"] == [depth, depth] and not state["overflow"]


def test_a_dropped_ack_returns_its_response_credit_in_the_cycle_it_arrives():
    """With nothing else moving, each ACK for the mesh stop hands its response
    credit back to the router in the mesh cycle it arrives, not a cycle later
    (a credit a cycle late would cost the router a slot per ACK)."""
    from amaranth import ClockDomain

    from hdl.common.flit import VC
    from hdl.etsoc.mesh import ShirePort
    from hdl.etsoc.shire import MESH_STOP_ACK

    m = Module()
    m.domains.mesh = ClockDomain("mesh")
    m.submodules.port = port = ShirePort(flit_layout=LAYOUT, depth=3)
    returned = []

    async def router(ctx):
        for cycle in range(40):
            send = cycle % 4 == 0
            ctx.set(port.i_down.valid, send)
            ctx.set(port.i_down.flit.vc, VC.RSP)
            ctx.set(port.i_down.flit.kind, MsgKind.ACK)
            ctx.set(port.i_down.flit.data, 1 | (1 << MESH_STOP_ACK))
            await ctx.delay(1e-12)
            if ctx.get(port.i_down.credit) >> VC.RSP & 1:
                returned.append(cycle)
            await ctx.tick("mesh")

    sim = Simulator(m)
    sim.add_clock(1 / 600e6)
    sim.add_clock(1 / 400e6, domain="mesh")
    sim.add_testbench(router)
    sim.run()
    assert returned == list(range(0, 40, 4))
