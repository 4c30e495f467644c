"""Look at a report page as a person would: headless Chromium renders it offline and saves a screenshot.

    python benchmarks/report_screenshot.py runs/compare-cpu/report.html --out runs/compare-cpu/report.png

Chromium runs with every proxy pointed at a closed local port, so a page that needed the network
would show broken images; alpha-gym's pages embed everything. Needs a `chromium` binary
(Debian: `apt-get install chromium`); `.ci/run` installs it when it can.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(page: Path, out: Path, width: int = 1200, height: int = 4000, timeout: float = 120) -> Path:
    """Render `page` in headless Chromium (no network) and write a PNG of `width` x `height` pixels."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    page, out = Path(page).resolve(), Path(out).resolve()
    if not page.is_file():
        raise FileNotFoundError(f"no such page: {page}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="alpha_gym_chromium_") as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
               f"--window-size={width},{height}", f"--screenshot={out}", page.as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("page", help="an HTML report (e.g. RUN_DIR/report.html)")
    ap.add_argument("--out", help="PNG to write (default: beside the page)")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=4000)
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.page).with_suffix(".png")
    print(screenshot(Path(args.page), out, args.width, args.height))
    return 0


if __name__ == "__main__":
    sys.exit(main())
