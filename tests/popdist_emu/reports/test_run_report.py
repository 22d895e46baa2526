"""A single run's report.html (``write_reports``): self-contained, with both pictures."""

import base64
import html.parser

import hardware
from popdist_emu.reports._summary import write_reports


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
        collectives=(hardware.CollectiveRecord("all_reduce", "auto", "all", 50_000_000),),
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
    assert len(page.images) == 2
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :]).startswith(b"\x89PNG\r\n\x1a\n")
    for phase, seconds in simulation.phases.items():
        if seconds > 1e-9:
            assert f">{phase}<" in text
    assert "pod128" in text and "fits" in text
