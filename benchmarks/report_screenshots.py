"""The documentation's pictures of both report pages (docs/figures/), from headless Chromium.

Makes a single run's page (a pipelined replica of ``examples/train.py``, offline) and the
scaling report of the MLPerf ResNet-50 weak-scaling sweep, then has Chromium load each
``report.html`` from disk and screenshot it; the white below the page is cropped. Needs
Chromium (Debian: ``apt-get install chromium``); prints each PNG's path and size.

    python benchmarks/report_screenshots.py [--out DIR] [--pictures DIR] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from matplotlib import image

ROOT = Path(__file__).resolve().parents[1]
PICTURES = ROOT / "docs" / "figures"
WIDTH, HEIGHT = 1280, 6000  # a tall window: Chromium's --screenshot captures the window
TRAIN = ROOT / "examples" / "train.py"
RESNET = ROOT / "examples" / "resnet50.py"


def single_run(out: Path) -> Path:
    """A pipelined replica's page: four stages, the bubble and every IPU."""
    subprocess.run(
        ["poprun-emu", "--offline-mode", "--num-replicas", "2", "--ipus-per-replica", "4",
         "--report-dir", str(out), str(TRAIN), "--gradient-accumulation", "8"],
        check=True, timeout=600, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return out / "report.html"


def scaling(out: Path) -> Path:
    """The MLPerf ResNet-50 runs as they were run (the README's sweep), and two larger
    systems beyond the calibration rows, with the published rows."""
    subprocess.run(
        ["poprun-emu-scaling", "--num-replicas", "16,64,128,256,1024,4096",
         "--instances-per-replica", "0.5", "--strong",
         "--global-batch", "3200,3840,5120,10240,40960,163840",
         "--published", str(ROOT / "examples" / "mlperf_v1.1_resnet50.csv"),
         "--out", str(out), str(RESNET), "--micro-batch-size", "20"],
        check=True, timeout=1200, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return out / "report.html"


def screenshot(chromium: str, page: Path, png: Path) -> tuple[int, int]:
    """Loads ``page`` in headless Chromium, saves the screenshot cropped to the page's
    content; returns its (width, height)."""
    with tempfile.TemporaryDirectory(prefix="report-screenshot-") as profile:
        raw = Path(profile) / "raw.png"
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
             f"--screenshot={raw}", page.resolve().as_uri()],
            check=True, timeout=120, capture_output=True,
        )  # fmt: skip
        pixels = image.imread(raw)
    rows = np.nonzero((pixels[:, :, :3] < 0.98).any(axis=(1, 2)))[0]
    bottom = int(rows[-1]) + 16 if len(rows) else pixels.shape[0]
    cropped = pixels[: min(bottom, pixels.shape[0])]
    buffer = io.BytesIO()
    image.imsave(buffer, cropped, format="png")
    png.parent.mkdir(parents=True, exist_ok=True)
    partial = png.with_name(f".{png.name}.partial")
    partial.write_bytes(buffer.getvalue())
    partial.replace(png)  # renamed into place: a failed run keeps the old picture
    return cropped.shape[1], cropped.shape[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the reports go")
    parser.add_argument("--pictures", type=Path, default=PICTURES, help="where the PNGs go")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    if shutil.which(args.chromium) is None and not Path(args.chromium).is_file():
        print(
            f"report_screenshots.py: no Chromium at {args.chromium!r}: install it "
            "(apt-get install chromium) or pass --chromium PATH",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="report-pages-") as tmp:
        out = args.out or Path(tmp)
        pages = {"single-run.png": single_run(out / "run"), "scaling.png": scaling(out / "scaling")}
        for name, page in pages.items():
            width, height = screenshot(args.chromium, page, args.pictures / name)
            print(f"{args.pictures / name}: {width} x {height} pixels, from {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
