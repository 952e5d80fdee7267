#!/usr/bin/env python3
"""`dc-db report` opened in a real browser: headless Chromium renders the page and a
screenshot must show the plots.

  1. a tuning DB with content: tiny_cnn tuned for two GPU types on the in-process farm
     (emulated, seconds), which also measures every workload's reference kernel;
  2. `dc-db report --out report.html`, then `chromium --headless --screenshot`;
  3. the screenshot's pixels: the plot colours of the report (schema/cmd_report.cpp: bars
     and points #1f77b4 and #ff7f0e, the emulated GPU comparison #9467bd) must each cover
     a real area; the same page with its <svg> elements removed, rendered the same way,
     must show (almost) none of them. So the plots are drawn, by a browser, from the SVG.

usage: check_report_screenshot.py DC_COORDINATOR DC_DB MODEL.onnx CONFIG.yaml
Chromium comes from Debian's package (scripts/install-deps.sh); its absence is a failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from PIL import Image

# colour -> least pixels: about 70 % of what the full report shows here (116k, 29k, 13k),
# well above what any one plot of that colour adds alone.
COLOURS = {"#1f77b4": 80000, "#ff7f0e": 20000, "#9467bd": 9000}
WINDOW = "1200,3000"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("no chromium on PATH: scripts/install-deps.sh installs Debian's chromium package")


def screenshot(browser, html, png, tmp):
    # A private profile and no sandbox (CI runs as root); --headless works with the old and
    # the new headless mode alike.
    run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={os.path.join(tmp, 'profile')}", f"--window-size={WINDOW}",
         f"--screenshot={png}", "file://" + html], timeout=120)
    if not os.path.isfile(png):
        fail(f"chromium wrote no screenshot {png}")


def colour_counts(png):
    img = Image.open(png).convert("RGB")
    want = {c: tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in COLOURS}
    counts = dict.fromkeys(COLOURS, 0)
    for (r, g, b), n in ((rgb, n) for n, rgb in img.getcolors(maxcolors=1 << 24)):
        for name, (wr, wg, wb) in want.items():
            if abs(r - wr) <= 6 and abs(g - wg) <= 6 and abs(b - wb) <= 6:
                counts[name] += n
    return counts


def main():
    coord, dcdb, model, config = sys.argv[1:5]
    browser = chromium()
    tmp = tempfile.mkdtemp(prefix="dc_report_shot_")
    db = os.path.join(tmp, "tune.db")
    run([coord, "tune", model, "--gpus", "h100,a100", "--emulate",
         "--config", config, "--db", db, "-q"])
    html = os.path.join(tmp, "report.html")
    run([dcdb, "--db", db, "report", "--out", html])
    text = open(html, encoding="utf-8").read()
    if text.count("<svg") < 4:
        fail(f"the report has {text.count('<svg')} plots, expected at least 4")

    png = os.path.join(tmp, "report.png")
    screenshot(browser, html, png, tmp)
    counts = colour_counts(png)
    print(f"screenshot {png}: " + ", ".join(f"{c} {n} px" for c, n in counts.items()))
    for c, least in COLOURS.items():
        if counts[c] < least:
            fail(f"colour {c} covers {counts[c]} pixels, expected at least {least}: a plot is missing")

    # The control: the same page without its SVG plots shows none of their colours.
    bare = os.path.join(tmp, "bare.html")
    with open(bare, "w", encoding="utf-8") as f:
        f.write(re.sub(r"<svg.*?</svg>", "", text, flags=re.S))
    bare_png = os.path.join(tmp, "bare.png")
    screenshot(browser, bare, bare_png, tmp)
    bare_counts = colour_counts(bare_png)
    print(f"without the SVGs: " + ", ".join(f"{c} {n} px" for c, n in bare_counts.items()))
    for c, n in bare_counts.items():
        if n > 200:
            fail(f"colour {c} covers {n} pixels without any plot: the check would not see a missing plot")
    print(f"OK (screenshots in {tmp})")


if __name__ == "__main__":
    main()
