"""Tests for `sim.report`: markdown report, plots, console summary, bad input."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sim.report import load_results, print_summary, write_report

KIB = 1024
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOURCE = "000_8cf2435219a2167b.txt, Baseline DSM Bandwidth"


def _points(alpha, beta, sizes_kib, wobble=(0.0,)):
    return [
        {
            "payload_bytes": k * KIB,
            "cycles": alpha + beta * k * KIB + wobble[i % len(wobble)],
            "ns": (alpha + beta * k * KIB) / 1.785,
        }
        for i, k in enumerate(sizes_kib)
    ]


def _dsm_one_way():
    sizes = range(16, 97, 8)
    return {
        "fabric": "dsm",
        "experiment": "one_way",
        "title": "A: one-way, 2 SMs",
        "simulator": "verilator",
        "config": {"sms": 2, "flit_bytes": 32},
        "series": [
            {
                "name": "load",
                "points": _points(800.0, 1 / 19.7, sizes, wobble=(1.0, -1.0)),
                "fit": {"alpha_cycles": 800.0, "beta_cycles_per_byte": 1 / 19.7, "rmse_pct": 0.03},
            },
            {
                "name": "store",
                "points": _points(750.0, 1 / 18.9, sizes),
                "fit": {"alpha_cycles": 750.0, "beta_cycles_per_byte": 1 / 18.9, "rmse_pct": 0.0},
            },
        ],
        "rows": [
            {
                "quantity": "load B/cycle",
                "model": 19.7,
                "reference": 19.87,
                "unit": "B/cycle",
                "source": SOURCE,
                "error_pct": -0.856,
                "tolerance_pct": 3.0,
                "target": "within 3%",
            },
            {
                "quantity": "store B/cycle",
                "model": 17.0,
                "reference": 18.87,
                "unit": "B/cycle",
                "source": SOURCE,
                "error_pct": -9.91,
                "tolerance_pct": 3.0,
                "target": "within 3%",
            },
            {
                "quantity": "fill/drain alpha",
                "model": 800.0,
                "reference": None,
                "unit": "cycles",
                "source": None,
                "error_pct": None,
                "tolerance_pct": None,
                "target": "model only",
            },
        ],
        "notes": ["clock ratio taken as 1.785 GHz", "stores use a coalesced ack"],
    }


def _mesh_latency():
    # Single-series experiment in the older top-level form, without a fit.
    return {
        "fabric": "mesh",
        "experiment": "latency",
        "title": "Mesh zero-load latency",
        "simulator": "verilator",
        "config": {},
        "points": _points(40.0, 0.0, [1, 2]),
        "fit": None,
        "rows": [
            {
                "quantity": "hop latency",
                "model": 4.0,
                "reference": 4.0,
                "unit": "cycles",
                "source": "somewhere",
                "error_pct": 0.0,
                "tolerance_pct": 0.0,
                "target": "exact",
            }
        ],
    }


def _write(results: Path, doc: dict) -> Path:
    path = results / doc["fabric"] / f"{doc['experiment']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    _write(root, _dsm_one_way())
    _write(root, _mesh_latency())
    return root


def test_rows_met_text_of_an_experiment_without_targets():
    """A fault experiment's rows all stand for information: the count says
    so rather than "0 / 0", and the phrase does not call them met."""
    from sim.report import met_sentence, met_text

    assert met_text(0, 0, 6) == "6 for information"
    assert met_sentence(0, 0, 6) == "6 rows for information"
    assert met_text(5, 8, 10) == "5 / 8 (+2 for information)"
    assert met_sentence(5, 8, 10) == "5 / 8 (+2 for information) rows met"
    assert met_sentence(0, 0, 0) == "0 / 0 rows met"


def test_report_rows_marks_and_plots(results):
    report = write_report(results)
    assert report == results / "report.md"
    text = report.read_text(encoding="utf-8")

    assert text.startswith("# fabricsim report\n")
    assert "simulator: verilator" in text
    assert "2 / 3 (+1 for information) rows met" in text
    # Summary: 1 of the 2 dsm rows with a target is met; the model-only row
    # is for information and not counted as met.
    assert "| dsm | one_way | A: one-way, 2 SMs | 1 / 2 (+1 for information) | ✗ |" in text
    assert "| mesh | latency | Mesh zero-load latency | 1 / 1 | ✓ |" in text
    # Per-experiment rows, formatted to 3-4 significant figures.
    assert f"| load B/cycle | 19.7 | 19.87 | B/cycle | -0.856 | within 3% | ✓ | {SOURCE} |" in text
    assert f"| store B/cycle | 17 | 18.87 | B/cycle | -9.91 | within 3% | ✗ | {SOURCE} |" in text
    assert "| fill/drain alpha | 800 | — | cycles | — | model only | — | — |" in text
    assert "| hop latency | 4 | 4 | cycles | 0 | exact | ✓ | somewhere |" in text
    assert "- clock ratio taken as 1.785 GHz" in text
    assert "| load | 11 | 800 | 0.05076 | 19.7 | 0.030 |" in text

    # Only the fitted experiment gets a plot, linked relative to the report.
    assert "![A: one-way, 2 SMs](dsm/one_way.png)" in text
    assert (results / "dsm" / "one_way.png").read_bytes().startswith(PNG_MAGIC)
    assert not (results / "mesh" / "latency.png").exists()
    assert ".png" not in text.split("## mesh")[1]
    assert text.index("## dsm") < text.index("## mesh")
    # No temporary files left behind by the atomic writes.
    assert not list(results.rglob("*.tmp"))


def test_experiments_keep_their_fabric_s_order_and_absent_sections_say_how_to_fill_them(
        results, monkeypatch):
    monkeypatch.chdir(results.parent)       # the Makefile's default folder: plain make
    # one_way (A) sorts after bidirectional (B) by name; the fabric lists A first
    doc = _dsm_one_way()
    doc.update(experiment="bidirectional", title="B: two ways")
    doc["series"] = [{**doc["series"][0], "points": doc["series"][0]["points"][:2],
                      "fit": {**doc["series"][0]["fit"], "rmse_pct": 3e-14}}]
    _write(results, doc)
    text = write_report(results).read_text(encoding="utf-8")
    assert text.index("### A: one-way") < text.index("### B: two ways")
    # a line through two points fits them exactly: no RMSE to show
    assert "| load | 2 | 800 | 0.05076 | 19.7 | — (2 points) |" in text
    assert "No `bench.json` in this folder: `make bench`" in text
    assert "No `synth.json` in this folder: `make synth`" in text


def test_absent_sections_name_the_folder_make_must_write(results, monkeypatch):
    """A report in another folder than ``results/`` gives the make commands
    that write into it."""
    whatif = results.parent / "what if"
    results.rename(whatif)
    monkeypatch.chdir(whatif.parent)
    text = write_report(whatif).read_text(encoding="utf-8")
    for line in ("`make bench RESULTS='what if'` measures",
                 "`make synth RESULTS='what if'` synthesises",
                 "`make prove RESULTS='what if'` writes them",
                 "`make report RESULTS='what if'` runs `python -m sim.random_traffic`"):
        assert line in text
    (whatif.parent / "elsewhere").mkdir()
    monkeypatch.chdir(whatif.parent / "elsewhere")
    assert f"`make prove RESULTS='{whatif}'` writes" in write_report(whatif).read_text()


def test_a_yes_or_no_row_reads_as_words(tmp_path):
    doc = _dsm_one_way()
    doc["rows"] = [{"quantity": "alpha grows with cluster size", "model": 1.0, "reference": 1.0,
                    "unit": "1 = yes", "source": SOURCE, "error_pct": None,
                    "tolerance_pct": None, "target": "1", "minimum": 1.0},
                   {"quantity": "naive 2D hangs", "model": 0.0, "reference": None,
                    "unit": "1 = yes", "source": SOURCE, "minimum": 1.0, "target": "hangs"}]
    _write(tmp_path, doc)
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert f"| alpha grows with cluster size | yes | yes | yes / no | — | yes | ✓ | {SOURCE} |" \
        in text
    assert f"| naive 2D hangs | no | — | yes / no | — | hangs | ✗ | {SOURCE} |" in text


def test_top_level_points_and_fit_become_one_series(tmp_path):
    doc = _mesh_latency()
    doc["points"] = _points(40.0, 0.01, [1, 2, 3])
    doc["fit"] = {"alpha_cycles": 40.0, "beta_cycles_per_byte": 0.01, "rmse_pct": 0.0}
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    (series,) = result.series
    assert series.name == "latency"
    assert series.fit is not None
    assert series.fit.bytes_per_cycle == pytest.approx(100.0)
    assert series.fit.residuals_cycles == pytest.approx((0.0, 0.0, 0.0), abs=1e-9)
    write_report(tmp_path)
    assert (tmp_path / "mesh" / "latency.png").read_bytes().startswith(PNG_MAGIC)


def test_a_seed_range_shows_as_a_range_without_an_error(tmp_path):
    """A row whose seed gives a range (``reference_range``; ``reference`` its
    midpoint) shows the range in the seed column and no error %, in the
    report and in the console's list of missed rows."""
    doc = _mesh_latency()
    doc["rows"] = [{"quantity": "far per hop", "model": 36.02, "reference": 31.5,
                    "reference_range": [27, 36], "unit": "cycles/hop", "source": SOURCE,
                    "minimum": 27, "maximum": 36, "target": "27 to 36"}]
    _write(tmp_path, doc)
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert f"| far per hop | 36.02 | 27–36 | cycles/hop | — | 27 to 36 | ✗ | {SOURCE} |" in text
    out = io.StringIO()
    print_summary(tmp_path, console=Console(file=out, width=200, color_system=None))
    assert "far per hop model 36.02 vs seed 27–36 cycles/hop (target 27 to 36)" in out.getvalue()
    doc["rows"][0]["reference_range"] = [36, 27]
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match=r"rows\[0\]: key 'reference_range' must be \[low, high\]"):
        write_report(tmp_path)


def test_error_pct_computed_when_missing(tmp_path):
    doc = _mesh_latency()
    doc["rows"][0].update(model=4.4, error_pct=None, tolerance_pct=5.0)
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    assert result.rows[0].error_pct == pytest.approx(10.0)
    assert result.rows[0].met is False


def test_error_pct_in_the_file_is_not_trusted(tmp_path):
    """A result file whose error_pct claims the row is within its tolerance
    is reported with the error its model and reference give."""
    doc = _mesh_latency()
    doc["rows"][0].update(model=4.4, error_pct=0.5, tolerance_pct=5.0)
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    assert result.rows[0].error_pct == pytest.approx(10.0)
    assert result.rows[0].met is False


def _drawn_axes(monkeypatch):
    """A list that collects the (fit, residual) axes of every plot drawn."""
    from matplotlib.figure import Figure

    drawn = []
    real = Figure.subplots

    def subplots(self, *args, **kwargs):
        axes = real(self, *args, **kwargs)
        drawn.append(axes)
        return axes

    monkeypatch.setattr(Figure, "subplots", subplots)
    return drawn


def test_a_baseline_series_is_drawn_in_its_series_colour(tmp_path, monkeypatch):
    """B's one-way series (key ``baseline_for``) are dashed in the colour of
    the both-ways series they are the baseline of."""
    import sim.report as report

    doc = _dsm_one_way()
    doc["series"][1]["baseline_for"] = "load"
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    assert [s.baseline_for for s in result.series] == [None, "load"]
    drawn = _drawn_axes(monkeypatch)
    assert report._render_plot(result).startswith(PNG_MAGIC)
    fits = [line for line in drawn[0][0].get_lines()
            if line.get_label().startswith(("load", "store"))]
    assert [(line.get_label().split(":")[0], line.get_linestyle()) for line in fits] == [
        ("load", "-"), ("store", "--")]
    assert fits[0].get_color() == fits[1].get_color()


def test_seed_lines_are_drawn_next_to_the_model_fit(tmp_path, monkeypatch):
    """A series' ``seed_lines`` (the seed's own fits) are drawn in its colour,
    dotted then dash-dotted, over its points' range: on a payload plot in
    cycles per byte, on a hop plot in cycles per hop."""
    import sim.report as report

    doc = _dsm_one_way()
    doc["series"][0]["seed_lines"] = [{"label": "100 + 0.05 cycles/B", "alpha_cycles": 100,
                                       "beta_cycles_per_byte": 0.05}]
    _write(tmp_path, doc)
    hop = {**_mesh_latency(), "points": None, "fit": None,
           "series": [{"name": "round trip", "x": "hops",
                       "points": [{"hops": h, "cycles": 150 + 12 * h} for h in (1, 2, 4)],
                       "fit": {"alpha_cycles": 150, "beta_cycles_per_hop": 12},
                       "seed_lines": [{"label": "a", "alpha_cycles": 140, "beta_cycles_per_hop": 14},
                                      {"label": "b", "alpha_cycles": 147, "beta_cycles_per_hop": 12}]}]}
    del hop["points"], hop["fit"]
    _write(tmp_path, hop)
    one_way, latency = sorted(load_results(tmp_path), key=lambda r: r.fabric)
    assert one_way.series[0].seed_lines == (("100 + 0.05 cycles/B", 100.0, 0.05),)
    assert one_way.series[1].seed_lines == ()
    drawn = _drawn_axes(monkeypatch)
    assert report._render_plot(one_way).startswith(PNG_MAGIC)
    assert report._render_plot(latency).startswith(PNG_MAGIC)
    lines = {line.get_label(): line for line in drawn[0][0].get_lines()}
    seed = lines["seed: 100 + 0.05 cycles/B"]
    assert seed.get_linestyle() == ":"
    assert seed.get_color() == next(v for k, v in lines.items() if k.startswith("load:")).get_color()
    low, high = min(one_way.series[0].payload_bytes), max(one_way.series[0].payload_bytes)
    assert list(seed.get_ydata()) == pytest.approx([100 + 0.05 * low, 100 + 0.05 * high])
    assert list(seed.get_xdata()) == pytest.approx([low / 1024, high / 1024])
    hops = {line.get_label(): line for line in drawn[1][0].get_lines()}
    assert [hops[k].get_linestyle() for k in ("seed: a", "seed: b")] == [":", "-."]
    assert list(hops["seed: a"].get_ydata()) == [154, 196]


def test_a_two_point_fit_draws_no_spread_of_rounding(tmp_path, monkeypatch):
    """Lines through two points leave residuals of rounding (1e-10 cycles):
    with two sizes in every series no residual panel is drawn and the title
    says why; where other series have more, the residual axis spans at least
    a cycle either way."""
    import sim.report as report

    doc = _dsm_one_way()
    for s in doc["series"]:
        s["points"] = s["points"][:2]
    doc["series"][0]["points"][1]["cycles"] += 3e-10
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    drawn = _drawn_axes(monkeypatch)
    assert report._render_plot(result).startswith(PNG_MAGIC)
    assert not hasattr(drawn[0], "__len__")          # one panel
    assert drawn[0].get_title().endswith("so no residual is drawn)")
    assert drawn[0].get_yticklabels()                # plain numbers, no offset
    assert drawn[0].yaxis.get_major_formatter()(1_036_000, 0) == "1,036,000"
    doc["series"][1]["points"] = _dsm_one_way()["series"][1]["points"]
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    assert report._render_plot(result).startswith(PNG_MAGIC)
    low, high = drawn[1][1].get_ylim()
    assert low <= -1.0 and high >= 1.0


def test_a_bound_from_the_seed_gives_no_error(tmp_path):
    """A row whose seed value is only its ceiling shows no error %, even where
    an older file gives one, and is judged by the bound; a two-sided row
    keeps its error."""
    doc = _mesh_latency()
    doc["rows"] = [
        {"quantity": "worst residual", "model": 0.49, "reference": 15, "unit": "cycles",
         "source": "somewhere", "error_pct": -96.7, "maximum": 15, "target": "at most 15"},
        {"quantity": "worst residual, over", "model": 16.0, "reference": 15, "unit": "cycles",
         "source": "somewhere", "maximum": 15, "target": "at most 15"},
        {"quantity": "mean hops", "model": 3.29, "reference": 3.3, "unit": "hops",
         "source": "somewhere", "minimum": 3.25, "maximum": 3.35, "target": "3.3"},
    ]
    _write(tmp_path, doc)
    (result,) = load_results(tmp_path)
    assert [r.error_pct for r in result.rows[:2]] == [None, None]
    assert [r.met for r in result.rows[:2]] == [True, False]
    assert result.rows[2].error_pct == pytest.approx(-0.303, abs=1e-3)
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert "| worst residual | 0.49 | 15 | cycles | — | at most 15 |" in text
    out = io.StringIO()
    print_summary(tmp_path, console=Console(file=out, width=200, color_system=None))
    assert "worst residual, over model 16 vs seed 15 cycles (—%, target at most 15)" in out.getvalue()


def test_a_what_if_is_marked_where_its_rows_meet_the_seed(tmp_path):
    """An experiment run with ``--set`` (key ``set`` of its result) says so
    above its table; one run as the seed's model does not."""
    _write(tmp_path, {**_dsm_one_way(), "set": ["shaper_flits=3", "shaper_cycles=3"]})
    _write(tmp_path, {**_mesh_latency(), "set": []})
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert ("**What-if:** run with `shaper_flits=3` `shaper_cycles=3` (by `--set` or "
            "`--config`). The seed's numbers were measured on the hardware as built"
            in text.split("## mesh")[0])
    assert text.count("What-if") == 1
    assert ("rows met · **1 experiment run as a what-if**, marked below and in the titles of "
            "its plots" in text.splitlines()[2])
    # a plot seen on its own says so too
    import sim.report as report

    one_way, latency = sorted(load_results(tmp_path), key=lambda r: r.fabric)
    assert report._plotted(one_way, lambda r: r.title.encode()) == b"A: one-way, 2 SMs (what-if)"
    assert report._plotted(latency, lambda r: r.title.encode()) == b"Mesh zero-load latency"
    # and the terminal summary marks it in its table
    out = io.StringIO()
    print_summary(tmp_path, console=Console(file=out, width=200, color_system=None))
    assert "A: one-way, 2 SMs (what-if)" in out.getvalue()
    assert "Mesh zero-load latency (what-if)" not in out.getvalue()


def test_a_run_line_says_why_a_row_is_missed():
    """A what-if's line says so; after a missed row it says the rows stand
    against the seed's hardware; otherwise a missed row names a known gap in
    the notes; nothing when every row is met or the notes name no gap."""
    from sim.report import rows_met_text

    met = {"quantity": "q", "model": 10, "reference": 10, "unit": "B", "source": "s",
           "error_pct": 0.0, "tolerance_pct": 3}
    missed = dict(met, model=20, error_pct=100.0)
    gap = ["Built small.", "Known gap: the chip's hash."]
    assert rows_met_text([met], gap, False) == "1 / 1 rows met"
    assert rows_met_text([met, missed], ["Built small."], False) == "1 / 2 rows met"
    assert rows_met_text([met, missed], gap, False) == (
        "1 / 2 rows met (a known gap: the report's notes for it say why)")
    assert rows_met_text([missed], gap, True) == (
        "0 / 1 rows met (a what-if: its rows stand against the seed's hardware as built)")
    assert rows_met_text([met], gap, True) == "1 / 1 rows met (a what-if)"
    info = {"quantity": "q", "model": 10, "unit": "B"}
    assert rows_met_text([info], [], True) == "1 row for information (a what-if)"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("rows"), r"one_way\.json: top level: missing key 'rows'"),
        (lambda d: d["rows"][1].pop("quantity"), r"one_way\.json: rows\[1\]: missing key 'quantity'"),
        (
            lambda d: d["series"][0]["points"][2].pop("cycles"),
            r"one_way\.json: series\[0\]\.points\[2\]: missing key 'cycles'",
        ),
        (
            lambda d: d["series"][1]["fit"].pop("beta_cycles_per_byte"),
            r"one_way\.json: series\[1\]\.fit: missing key 'beta_cycles_per_byte'",
        ),
        (lambda d: d["rows"][0].update(model="fast"), r"rows\[0\]: key 'model' must be a finite number"),
        (lambda d: d.update(fabric="mesh"), r"key 'fabric' is 'mesh' but the file is in directory 'dsm'"),
        # a heading of the report: a line break would start markdown of its own
        (lambda d: d.update(title="A\n## injected"), r"one_way\.json: top level: key 'title' "
                                                      r"must be one line of text"),
        (lambda d: d.update(set="cpcs=2"), r"one_way\.json: top level: key 'set' must be a list of "
                                           r"FIELD=VALUE strings"),
        (lambda d: d["series"][1].update(baseline_for="lod"),
         r"one_way\.json: series\[1\]: key 'baseline_for' must name another series \('load'\), "
         r"not 'lod'"),
        (lambda d: d["series"][1].update(baseline_for="store"),
         r"series\[1\]: key 'baseline_for' must name another series \('load'\), not 'store'"),
        (lambda d: d["series"][0].update(seed_lines={"label": "x"}),
         r"one_way\.json: series\[0\]: key 'seed_lines' must be"),
        (lambda d: d["series"][0].update(seed_lines=[{"label": "x", "alpha_cycles": 1}]),
         r"one_way\.json: series\[0\]\.seed_lines\[0\]: missing key 'beta_cycles_per_byte'"),
        # finite, so it passes the file's checks, but no plot scale holds it
        (lambda d: d["series"][0]["points"][0].update(cycles=1e308),
         r"one_way\.json: its numbers cannot be plotted \(OverflowError"),
    ],
)
def test_malformed_input_names_file_and_key_and_writes_nothing(tmp_path, mutate, message):
    doc = _dsm_one_way()
    mutate(doc)
    path = tmp_path / "dsm" / "one_way.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    _write(tmp_path, _mesh_latency())
    with pytest.raises(ValueError, match=message) as info:
        write_report(tmp_path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "report.md").exists()
    assert not list(tmp_path.rglob("*.png"))


def test_invalid_json_keeps_previous_report(results):
    write_report(results)
    before = (results / "report.md").read_text(encoding="utf-8")
    (results / "dsm" / "broken.json").write_text('{"fabric": "dsm", ')
    with pytest.raises(ValueError, match=r"broken\.json: invalid JSON"):
        write_report(results)
    assert (results / "report.md").read_text(encoding="utf-8") == before
    (results / "dsm" / "broken.json").write_bytes('{"fabric": "dsm"}'.encode("utf-16"))
    with pytest.raises(ValueError, match=r"broken\.json: not UTF-8 \(byte 0: invalid start byte\)"):
        write_report(results)
    assert (results / "report.md").read_text(encoding="utf-8") == before


@pytest.mark.parametrize("text, why", [
    ("[" * 100_000 + "]" * 100_000, "RecursionError"),
    ('{"fabric": ' + "9" * 5000 + "}", "ValueError: Exceeds the limit"),
])
def test_json_that_python_cannot_read_is_refused_naming_the_file(results, text, why):
    """Arrays nested 100,000 deep gave a traceback, a number of 5,000 digits
    an error naming no file."""
    write_report(results)
    before = (results / "report.md").read_text(encoding="utf-8")
    (results / "dsm" / "odd.json").write_text(text)
    with pytest.raises(ValueError, match=rf"odd\.json: not a result file \({why}") as info:
        write_report(results)
    assert "\n" not in str(info.value)
    assert (results / "report.md").read_text(encoding="utf-8") == before


def test_missing_or_empty_results_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_report(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no <fabric>/<experiment>.json"):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_print_summary_lists_counts_and_missed_rows(results):
    out = io.StringIO()
    all_met = print_summary(results, console=Console(file=out, width=160, color_system=None))
    text = out.getvalue()
    assert all_met is False
    assert "one_way" in text and "1 / 2 (+1 for information)" in text
    assert "latency" in text and "1 / 1" in text
    assert "dsm/one_way: store B/cycle model 17 vs seed 18.87 B/cycle (-9.91%, target within 3%)" in text
    assert "load B/cycle model" not in text
    assert "2 / 3 (+1 for information) rows met" in text


def _mesh_round_trip():
    points = [{"hops": h, "cycles": 150.0 + 12.0 * h} for h in (1, 2, 2, 5, 10)]
    return {
        "fabric": "mesh", "experiment": "round_trip", "title": "Round trip",
        "simulator": "verilator", "config": {},
        "series": [{"name": "pairs", "x": "hops", "points": points,
                    "fit": {"alpha_cycles": 150.0, "beta_cycles_per_hop": 12.0}}],
        "rows": [{"quantity": "per hop", "model": 12.0, "reference": 12, "unit": "cycles/hop",
                  "minimum": 11.0, "maximum": 13.0}],
        "heatmap": {"from_shire": 0, "source_cell": [0, 0], "cols": 2, "rows": 2,
                    "non_compute": [[1, 1]],
                    "cells": [{"shire": 1, "x": 1, "y": 0, "cycles": 162.0},
                              {"shire": 2, "x": 0, "y": 1, "cycles": 162.0}]},
    }


def test_hop_series_and_heat_map_are_drawn(tmp_path):
    (tmp_path / "mesh").mkdir()
    (tmp_path / "mesh" / "round_trip.json").write_text(json.dumps(_mesh_round_trip()))
    report = write_report(tmp_path).read_text()
    assert "β (cycles/hop)" in report and "round_trip_heatmap.png" in report
    for name in ("round_trip.png", "round_trip_heatmap.png"):
        assert (tmp_path / "mesh" / name).read_bytes().startswith(PNG_MAGIC)
    [result] = load_results(tmp_path)
    assert result.series[0].hop_residuals == (0.0,) * 5


def test_heat_map_grid_size_is_checked(tmp_path):
    doc = _mesh_round_trip()
    doc["heatmap"]["cols"] = -3
    (tmp_path / "mesh").mkdir()
    (tmp_path / "mesh" / "round_trip.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="keys 'cols' and 'rows' must be from 1 to 64, not -3"):
        load_results(tmp_path)


def test_unknown_series_axis_names_the_key(tmp_path):
    doc = _mesh_round_trip()
    doc["series"][0]["x"] = "lanes"
    (tmp_path / "mesh").mkdir()
    (tmp_path / "mesh" / "round_trip.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="key 'x' must be 'payload_bytes' or 'hops'"):
        load_results(tmp_path)


def _mesh_allreduce():
    return {
        "fabric": "mesh", "experiment": "allreduce", "title": "Allreduce",
        "simulator": "verilator", "config": {},
        "rows": [{"quantity": "32 minions", "model": 442.0, "reference": 444, "unit": "cycles",
                  "tolerance_pct": 10.0},
                 {"quantity": "1,024 minions", "model": None, "reference": 1380,
                  "unit": "cycles", "tolerance_pct": 10.0}],
        "chart": {"title": "Allreduce", "x_label": "minions", "y_label": "cycles",
                  "x_log2": True, "lines": [{"name": "shire", "points": [[2, 70], [4, 140]]}]},
    }


def test_unmeasured_row_is_shown_and_counted_unmet_and_chart_drawn(tmp_path):
    _write(tmp_path, _mesh_allreduce())
    report = write_report(tmp_path).read_text()
    assert "| 1,024 minions | — | 1380 | cycles | — |" in report
    assert "allreduce_chart.png" in report
    assert (tmp_path / "mesh" / "allreduce_chart.png").read_bytes().startswith(PNG_MAGIC)
    [result] = load_results(tmp_path)
    assert result.rows_met == 1 and not result.rows[1].passes


def test_a_chart_log_flag_must_be_a_boolean(tmp_path):
    doc = _mesh_allreduce()
    doc["chart"]["y_log"] = "no"
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match="chart: key 'y_log' must be true or false, not 'no'"):
        load_results(tmp_path)


def test_bad_chart_point_names_the_key(tmp_path):
    doc = _mesh_allreduce()
    doc["chart"]["lines"][0]["points"][1] = [4, "fast"]
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match=r"chart.lines\[0\].points\[1\]"):
        load_results(tmp_path)


def test_chart_draws_the_seeds_marks(tmp_path, monkeypatch):
    """A seed mark at one x is a bar (with a mark at its value if given);
    one over a span of x is a band."""
    import matplotlib.axes

    drawn = []
    errorbar, fill_between = matplotlib.axes.Axes.errorbar, matplotlib.axes.Axes.fill_between
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", lambda self, x, y, **kw: (
        drawn.append(("bar", x, y, kw["yerr"], kw["fmt"], kw["label"])),
        errorbar(self, x, y, **kw))[1])
    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between", lambda self, x, lo, hi, **kw: (
        drawn.append(("band", x, lo, hi, kw["label"])), fill_between(self, x, lo, hi, **kw))[1])
    doc = _mesh_allreduce()
    doc["chart"]["seed"] = [{"name": "seed, 32 minions", "x": [4, 4], "low": 399.6,
                             "high": 488.4, "value": 444},
                            {"name": "seed, a range", "x": [2, 4], "low": 60, "high": 80},
                            {"name": "seed, at $2", "x": [2, 2], "low": 60, "high": 80}]
    doc["chart"]["y_log"] = True
    _write(tmp_path, doc)
    write_report(tmp_path)
    assert (tmp_path / "mesh" / "allreduce_chart.png").read_bytes().startswith(PNG_MAGIC)
    assert drawn[0][:5] == ("bar", [4], [444], [[pytest.approx(44.4)], [pytest.approx(44.4)]],
                            "D")
    assert drawn[1] == ("band", [2, 4], [60, 60], [80, 80], "seed, a range")
    # a '$' is drawn as itself, not read as mathtext
    assert drawn[2] == ("bar", [2], [70.0], [[10.0], [10.0]], "none", r"seed, at \$2")


@pytest.mark.parametrize("mark, message", [
    ({"name": "s", "x": [4, 2], "low": 1, "high": 2}, r"chart.seed\[0\]: key 'x' must be"),
    ({"name": "s", "x": [4], "low": 1, "high": 2}, r"chart.seed\[0\]: key 'x' must be"),
    ({"name": "s", "x": [4, 4], "low": 3, "high": 2}, r"chart.seed\[0\]: keys 'low', 'value'"),
    ({"name": "s", "x": [4, 4], "low": 1, "high": 2, "value": 5}, r"keys 'low', 'value'"),
    ({"name": "s", "x": [4, 4], "low": 1}, r"chart.seed\[0\]: missing key 'high'"),
    ({"x": [4, 4], "low": 1, "high": 2}, r"chart.seed\[0\]: missing key 'name'"),
    ({"name": "s", "x": [4, 4], "low": 0, "high": 2}, r"key 'low' must be positive on the "
                                                       r"chart's log axis, not 0"),
    ({"name": "s", "x": [0, 0], "low": 1, "high": 2}, r"key 'x' must be positive on the "
                                                       r"chart's log axis, not \[0, 0\]"),
    (5, r"chart: key 'seed' must be a list, not int"),
    ({"name": "s"}, r"chart: key 'seed' must be a list, not dict"),
])
def test_bad_chart_seed_mark_names_the_key(tmp_path, mark, message):
    doc = _mesh_allreduce()
    doc["chart"]["seed"] = [mark] if isinstance(mark, dict) and "x" in mark else mark
    doc["chart"]["y_log"] = True        # x_log2 already
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match=message):
        load_results(tmp_path)


def test_row_without_a_model_key_is_refused(tmp_path):
    doc = _mesh_allreduce()
    del doc["rows"][0]["model"]
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match=r"rows\[0\].*missing key 'model'"):
        load_results(tmp_path)


def test_verification_section_lists_the_proofs(results, monkeypatch):
    monkeypatch.chdir(results.parent)
    report = write_report(results).read_text()
    assert "## Verification" in report and "`make prove` writes them" in report
    (results / "proofs.json").write_text(json.dumps({"rows": [
        {"proof": "round_robin", "block": "RoundRobin", "property": "one grant", "depth": 12,
         "passed": True, "seconds": 1.5},
        {"proof": "shaper", "block": "InjectionShaper", "property": "ratio", "depth": 20,
         "passed": False, "seconds": 2.0}]}))
    report = write_report(results).read_text()
    assert "1 / 2 passed" in report
    assert "| round_robin | RoundRobin | one grant | 12 | ✓ |" in report


def test_malformed_proofs_file_is_named(results):
    (results / "proofs.json").write_text(json.dumps({"rows": [{"proof": "x"}]}))
    with pytest.raises(ValueError, match="proofs.json: not a proofs file"):
        write_report(results)


_ROW = {"proof": "x", "block": "b", "property": "p", "depth": 12, "passed": True}
_SYNTH_ROW = {"block": "shaper", "device": "ecp5", "config": "c", "luts": 1, "ffs": 1,
              "brams": 0, "fmax_mhz": 100.0, "status": "ok", "tool_versions": {"yosys": "0"}}


@pytest.mark.parametrize(("name", "doc", "message"), [
    # an infinite number (JSON 1e400) where a count belongs
    ("proofs.json", {"rows": [{**_ROW, "depth": "1e400"}]}, r"not a proofs file \(OverflowError"),
    ("synth.json", {"rows": [{**_SYNTH_ROW, "tool_versions": [1]}]},
     r"not a synthesis file \(AttributeError"),
    ("sweep/synth.x.json", {"experiment": "x", "grid": {}, "simulator": "ecp5", "rows": []},
     r"not a synthesis sweep \(ValueError: key 'grid' must be a table of the swept field"),
    ("sweep/synth.x.json", {"experiment": "../../x", "grid": {"a": [1]}, "simulator": "ecp5",
                            "rows": []},
     r"not a synthesis sweep \(ValueError: key 'experiment' must be a block name, not '\.\./"),
])
def test_malformed_table_files_are_named_and_nothing_is_written(results, name, doc, message):
    path = results / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc).replace('"1e400"', "1e400"))
    with pytest.raises(ValueError, match=message) as info:
        write_report(results)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    assert not (results / "report.md").exists() and not list(results.rglob("*.png"))


@pytest.mark.parametrize("name, what", [
    ("proofs.json", "a proofs file"), ("random.json", "a random-traffic file"),
    ("bench.json", "a bench file"), ("synth.json", "a synthesis file")])
def test_a_table_file_that_is_a_folder_is_named_and_nothing_is_written(results, name, what):
    (results / name).mkdir()
    with pytest.raises(ValueError, match=f"^{results / name}: not {what} \\(it is a folder\\)$"):
        write_report(results)
    assert not (results / "report.md").exists() and not list(results.rglob("*.png"))


@pytest.mark.parametrize("name", ["report.md", "dsm/one_way.png"])
def test_an_output_that_is_a_folder_is_named_and_nothing_is_written(results, name):
    (results / name).mkdir()
    with pytest.raises(ValueError, match=f"--results must leave '{results / name}' free for "
                                         "the report, but it is a folder"):
        write_report(results)
    assert not [p for p in results.rglob("*.png") if p.is_file()]
    assert not (results / "report.md").is_file()


def test_verification_section_lists_the_random_traffic(results, monkeypatch):
    monkeypatch.chdir(results.parent)
    report = write_report(results).read_text()
    assert "`make report` runs `python -m sim.random_traffic`, which writes them" in report
    (results / "random.json").write_text(json.dumps({"rows": [
        {"fabric": "dsm", "simulator": "verilator", "seeds": [1, 2], "runs": 6, "transfers": 31,
         "checked_bytes": 123456, "failures": [], "passed": True},
        {"fabric": "pcie", "simulator": "icarus", "seeds": [3], "runs": 3, "transfers": 9,
         "checked_bytes": 4096, "failures": ["seed 3 run 0: lost"], "passed": False}]}))
    report = write_report(results).read_text()
    assert "1 / 2 fabric and simulator pairs passed" in report
    assert "| dsm | verilator | 1, 2 | 6 | 31 | 123456 | ✓ |" in report
    assert "| pcie | icarus | 3 | 3 | 9 | 4096 | ✗ (1 runs failed) |" in report
    (results / "random.json").write_text(json.dumps({"rows": [{"fabric": "dsm"}]}))
    with pytest.raises(ValueError, match="random.json: not a random-traffic file"):
        write_report(results)


def test_verification_section_lists_the_faults_survived(results):
    assert "Faults the hardware tolerates" not in write_report(results).read_text()
    doc = _dsm_one_way()
    doc.update(experiment="plane_off", title="G: a GX plane off")
    _write(results, doc)
    text = write_report(results).read_text()
    assert "Faults the hardware tolerates" in text
    assert ("| dsm.plane_off | one GX plane switched off (either one) | 1 / 2 (+1 for "
            "information) |") in text


def test_a_percentage_without_a_tolerance_is_off_by_points(tmp_path):
    """A row whose quantity is itself a percentage, with bounds but no
    tolerance in %, shows its error in percentage points; one with a
    tolerance keeps the error in % it is checked by."""
    doc = _dsm_one_way()
    doc["rows"] = [
        {"quantity": "load loss", "model": 20.97, "reference": 22.6, "unit": "%",
         "source": SOURCE, "error_pct": -7.19, "minimum": 22.0, "maximum": 23.0},
        {"quantity": "store loss", "model": 4.1, "reference": 4.0, "unit": "%",
         "source": SOURCE, "error_pct": 2.5, "tolerance_pct": 5.0},
    ]
    _write(tmp_path, doc)
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert "| load loss | 20.97 | 22.6 | % | -1.63 pp | " in text
    assert "| store loss | 4.1 | 4 | % | +2.5 | within 5% | ✓ |" in text


def test_a_missed_what_if_row_is_not_sent_to_the_notes(tmp_path, capsys):
    """The notes are written for the seed's configuration: after a what-if
    misses a row, the summary says what its rows compare instead."""
    from sim.report import print_summary

    doc = _dsm_one_way()
    doc["rows"][0]["model"], doc["rows"][0]["error_pct"] = 15.0, -24.5
    _write(tmp_path, {**doc, "set": ["shaper_flits=1"]})
    assert not print_summary(tmp_path)
    out = " ".join(capsys.readouterr().out.split())
    assert "compare the changed model with the seed's hardware as built." in out
    assert "notes in the report" not in out


def test_the_report_reads_only_the_fabrics_folders(tmp_path):
    """A JSON file in another folder of the results (notes, a build folder
    given as the results folder too) is not read as a result."""
    _write(tmp_path, _dsm_one_way())
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.json").write_text('{"todo": 1}\n')
    (tmp_path / "simulations").mkdir()
    (tmp_path / "simulations" / "0123.json").write_text('{"key": "0123", "result": {}}\n')
    assert [r.experiment for r in load_results(tmp_path)] == ["one_way"]
