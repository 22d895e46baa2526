"""A single run's report.html (``write_reports``): self-contained, with both pictures."""

import base64
import datetime
import html
import html.parser
import io
import json

import matplotlib.image
import pytest
from pipelined_replica import four_stages, simulate_pipeline

import hardware
from contract import TIER_PHASES
from popdist_emu.reports._html import run_report_html
from popdist_emu.reports._run_info import run_info
from popdist_emu.reports._summary import format_summary, write_reports
from popdist_emu.reports.plots import _bar_scale, colour, phases_plot, single_phases_plot


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if "href" in attrs:
            self.links.append(attrs["href"])


def test_report_html_beside_summary_and_trace(tmp_path):
    profile = hardware.StepProfile(
        grad_flops=1e10,
        grad_bytes_accessed=1e9,
        parameter_bytes=50_000_000,
        optimiser_state_bytes=100_000_000,
        gradient_bytes=50_000_000,
        activation_bytes=200_000_000,
        host_bytes_per_micro_batch=3_000_000,
        micro_batch_size=16,
        gradient_accumulation=4,
        collectives=(hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 50_000_000),),
        name="synthetic",
    )
    layout = hardware.ReplicaLayout(num_replicas=128, num_instances=8)
    simulation = hardware.simulate_step(profile, layout, hardware.get_system("pod128"))
    write_reports(simulation, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json", "trace.json", "report.html"}
    page = _Page()
    text = (tmp_path / "report.html").read_text()
    page.feed(text)
    page.close()
    assert "script" not in page.tags and not page.links  # nothing to run or fetch
    assert len(page.images) == 2  # the phases; the memory of every IPU and its tiles
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :]).startswith(b"\x89PNG\r\n\x1a\n")
    for phase, seconds in simulation.phases.items():
        if seconds > 1e-9:
            assert f">{phase}<" in text
    assert "pod128" in text and "fits" in text


# -- A pipelined replica: the stages, the bubble and every IPU ---------------------------------


def _pipelined_simulation():
    profile = hardware.StepProfile(
        grad_flops=1e9,
        grad_bytes_accessed=1e8,
        parameter_bytes=4_000_000,
        optimiser_state_bytes=8_000_000,
        gradient_bytes=4_000_000,
        activation_bytes=4_000_000,
        host_bytes_per_micro_batch=100_000,
        micro_batch_size=4,
        gradient_accumulation=8,
        collectives=(hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 4_000_000),),
        name="four-stages",
    )
    stages = four_stages(
        scale=lambda i: 1 + i,
        blocks=lambda i: (f"B{i}", f"extra{i}") if i == 2 else (f"B{i}",),
    )
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=4)
    return simulate_pipeline(profile, stages, layout)


def _cells(text: str) -> list[list[str]]:
    """Every table row of a page as its cells' text."""

    class Rows(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    parser = Rows()
    parser.feed(text)
    return parser.rows


def test_pipelined_page_has_the_stage_table_the_bubble_and_every_ipu(tmp_path):
    simulation = _pipelined_simulation()
    run = run_info("poprun-emu --num-replicas 4 train.py", datetime.datetime(2026, 1, 2, 3, 4, 5))
    write_reports(simulation, tmp_path, run)
    text = (tmp_path / "report.html").read_text()
    rows = _cells(text)
    text = html.unescape(text)
    stages = [r for r in rows if r and r[0] in "0123" and r[1].startswith("IPU ")]
    assert [r[1] for r in stages] == ["IPU 0", "IPU 1", "IPU 2", "IPU 3"]
    assert stages[2][2] == "B2, extra2"
    report = simulation.pipeline
    for row, stage in zip(stages, report.schedule.stages, strict=True):
        assert float(row[3]) == pytest.approx(stage.forward_seconds * 1e3, abs=1e-4)
        assert float(row[4]) == pytest.approx(stage.backward_seconds * 1e3, abs=1e-4)
    # Memory: one row per IPU with its own total, not one bar for the fullest.
    ipus = {r[0]: float(r[1]) for r in rows if r and r[0][:3] == "IPU" and r[0][3:].isdigit()}
    assert sorted(ipus) == ["IPU0", "IPU1", "IPU2", "IPU3"]
    for i, memory in enumerate(report.stage_memory):
        assert ipus[f"IPU{i}"] == pytest.approx(memory.total / 2**20, abs=0.01)
    assert len(set(ipus.values())) > 1  # the stages stash differently
    # One bubble: the page states the same figures as summary.json and the terminal.
    summary = json.loads((tmp_path / "summary.json").read_text())
    bubble = summary["pipeline"]["bubble_fraction"]
    share = summary["pipeline"]["bubble_share_of_step"]
    assert share == pytest.approx(
        summary["phases"]["pipeline_bubble"] / summary["simulated_step_seconds"]
    )
    assert 0 < share < bubble < 1
    stated = f"{100 * bubble:.1f} % of the IPUs' pipeline time"
    assert stated in text and f"{100 * share:.1f} % of the step" in text
    assert stated in format_summary(simulation)
    # What made it.
    assert summary["run"]["command"] == "poprun-emu --num-replicas 4 train.py"
    assert summary["run"]["date"] == "2026-01-02 03:04:05 UTC"
    assert "popdist-emu" in summary["run"]["versions"] and "jax" in summary["run"]["versions"]
    assert "poprun-emu --num-replicas 4 train.py" in text and "2026-01-02 03:04:05 UTC" in text


def test_page_without_a_pipeline_lists_every_ipu_of_the_replica(tmp_path):
    profile = hardware.StepProfile(
        grad_flops=1e9,
        grad_bytes_accessed=1e8,
        parameter_bytes=1_000_000,
        micro_batch_size=4,
        name="sharded-two",
    )
    layout = hardware.ReplicaLayout(2, 1, ipus_per_replica=2)
    simulation = hardware.simulate_step(profile, layout, hardware.get_system("pod16"))
    text = run_report_html(simulation)
    rows = _cells(text)
    assert [r[0] for r in rows if r and r[0][:3] == "IPU" and r[0][3:].isdigit()] == [
        "IPU0",
        "IPU1",
    ]
    assert "Pipeline:" not in text and "Made by" not in text  # no run given, none shown


def test_small_memory_is_drawn_on_its_own_scale_and_large_against_capacity():
    assert _bar_scale(3.3, 858.0) == pytest.approx(3.3 * 1.3)
    assert _bar_scale(700.0, 858.0) == pytest.approx(858.0 * 1.05)
    assert _bar_scale(1200.0, 858.0) > 1200.0  # an overflowing IPU is still on the picture


def _pixels(png: bytes) -> set[tuple[int, int, int]]:
    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    return {tuple(round(255 * float(c)) for c in px[:3]) for px in image.reshape(-1, 4)}


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def test_a_phase_has_one_colour_in_every_chart_of_both_reports():
    names = [*hardware.PHASES, *TIER_PHASES.values()]
    assert len({colour(n) for n in names}) == len(names)  # no two phases share one
    assert colour("some new phase") == colour("some new phase")
    single = _pixels(single_phases_plot({"compute": 1e-3, "weight_update": 5e-4}, 2e-3))
    scaling = _pixels(
        phases_plot(
            [
                {
                    "label": "a",
                    "replicas": [1, 2],
                    "phases": [{"weight_update": 1e-3}, {"compute": 1e-3}],
                }
            ]
        )
    )
    for name in ("compute", "weight_update"):
        assert _rgb(colour(name)) in single and _rgb(colour(name)) in scaling
    assert _rgb(colour("allreduce")) not in single
