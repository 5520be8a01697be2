"""Render dlperf's HTML report in headless Chromium to a PNG, for a visual check.

    apt-get install -y chromium            # Debian's package; the tests do not need it
    python benchmarks/render_report.py dlperf-report/report.html --out report.png

Chromium runs with no network, no sandbox (root in a container), no GPU and a throw-away
profile; the page needs nothing outside itself, so what the PNG shows is what a reader
with no network sees. ``--height`` sets the window height (a screenshot shows one window,
so a tall window shows the whole page).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if exe := shutil.which(name):
            return exe
    sys.exit("render_report: no Chromium found; install it with 'apt-get install -y chromium'")


def render(html: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dlperf-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
               html.resolve().as_uri()]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not png.exists():
        sys.exit(f"render_report: Chromium failed ({p.returncode}): {p.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html", type=Path, help="the report.html to render")
    ap.add_argument("--out", type=Path, default=Path("report.png"))
    ap.add_argument("--width", type=int, default=1300)
    ap.add_argument("--height", type=int, default=6000)
    a = ap.parse_args()
    if not a.html.is_file():
        sys.exit(f"render_report: {a.html}: no such file")
    render(a.html, a.out, a.width, a.height)
    print(a.out)


if __name__ == "__main__":
    main()
