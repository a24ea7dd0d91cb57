#!/usr/bin/env python3
"""The trace explorer page (`kiln trace FILE html -o DIR`) in headless Chromium.

Writes a trace of a small search, the page, then checks in Chromium that:
  - the page loads and its script runs with no console message and no error (the page logs
    nothing; an uncaught exception is a CONSOLE line in Chromium's log and a line in #kiln-errors);
  - a click on a candidate's row draws that candidate's μGraph (the page's #selftest hook clicks
    the second row and marks <body data-selftest="ok"> when the graph and title follow);
  - a screenshot is not blank (many distinct scanlines, most of the image not background).
The screenshot is left at WORK/trace-explorer.png (docs/trace-explorer.png is one).

Usage: trace_explorer_test.py KILN SOURCE_DIR WORK_DIR
Exit 0 pass, 1 fail, 77 skip (CTest SKIP_RETURN_CODE) only when no Chromium can run here.
Standard library only.
"""
import os
import shutil
import struct
import subprocess
import sys
import zlib

SKIP = 77


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run(cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def chrome_args(chrome, work):
    # As root Chromium needs --no-sandbox; a private profile keeps runs independent.
    return [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--hide-scrollbars",
            "--user-data-dir=" + os.path.join(work, "chromium-profile")]


def png_scanlines(path):
    """The filtered scanlines of an 8-bit RGB(A) PNG: (width, rows as bytes, bytes per pixel)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, bpp = 8, b"", 0, 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                raise ValueError("unexpected PNG format %d/%d" % (depth, color))
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + width * bpp
    return width, [raw[i * stride:(i + 1) * stride] for i in range(height)], bpp


def not_blank(path):
    """A page with content: many distinct scanlines and a good share of non-zero filtered bytes
    (a uniform image filters to zeros after its first pixel of each row)."""
    width, rows, bpp = png_scanlines(path)
    distinct = len(set(rows))
    nonzero = sum(sum(1 for b in r[1 + bpp:] if b) for r in rows[::8])
    total = sum(len(r) - 1 - bpp for r in rows[::8])
    return distinct, nonzero / max(total, 1)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    kiln, src, work = sys.argv[1:4]
    chrome = chromium()
    if not chrome:
        print("SKIP: no chromium on PATH (scripts/install-deps.sh installs it)")
        return SKIP
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    probe = run(chrome_args(chrome, work) + ["--dump-dom", "about:blank"], timeout=60)
    if probe.returncode != 0 or "<html" not in probe.stdout:
        print("SKIP: chromium cannot run here:\n" + probe.stderr[-2000:])
        return SKIP

    trace = os.path.join(work, "lora.trace")
    o = run([kiln, "optimize", os.path.join(src, "examples", "lora.json"), "-o",
             os.path.join(work, "out"), "--trace", trace, "--no-cache", "--no-profile",
             "--threads", "2", "--time-limit", "30"], timeout=300)
    if o.returncode != 0:
        print("FAIL: kiln optimize --trace:\n" + o.stderr)
        return 1
    page_dir = os.path.join(work, "html")
    h = run([kiln, "trace", trace, "html", "-o", page_dir])
    if h.returncode != 0:
        print("FAIL: kiln trace html:\n" + h.stderr)
        return 1
    page = os.path.join(page_dir, "index.html")
    html = open(page, encoding="utf-8").read()
    failures = []
    # Self-contained: no URL the page would fetch.
    for needle in ("http://", "https://", "src=\"", "href=\""):
        for line in html.splitlines():
            if needle in line and "http://www.w3.org/2000/svg" not in line:
                failures.append("the page refers to something outside it: " + line.strip()[:160])
                break
    url = "file://" + os.path.abspath(page)

    d = run(chrome_args(chrome, work) + ["--enable-logging=stderr", "--v=0",
                                         "--virtual-time-budget=5000", "--dump-dom",
                                         url + "#selftest"])
    dom = d.stdout
    consoles = [l for l in d.stderr.splitlines() if ":CONSOLE" in l]
    if d.returncode != 0:
        failures.append("chromium --dump-dom exited %d" % d.returncode)
    if consoles:
        failures.append("console messages: " + "; ".join(consoles[:5]))
    if '<div id="kiln-errors" hidden=""></div>' not in dom:
        start = dom.find('id="kiln-errors"')
        failures.append("script errors: " + dom[start:start + 400])
    if 'data-selftest="ok"' not in dom:
        failures.append("clicking a candidate did not draw its graph (data-selftest is not ok)")
    if "<svg" not in dom or 'class="kernel"' not in dom:
        failures.append("no μGraph drawing with a kernel frame in the page after the click")

    shot = os.path.join(work, "trace-explorer.png")
    s = run(chrome_args(chrome, work) + ["--window-size=1400,900", "--virtual-time-budget=5000",
                                         "--screenshot=" + shot, url])
    if s.returncode != 0 or not os.path.exists(shot):
        failures.append("no screenshot: " + s.stderr[-500:])
    else:
        distinct, share = not_blank(shot)
        print("screenshot %s: %d distinct scanlines, %.1f%% non-background bytes" %
              (shot, distinct, 100 * share))
        if distinct < 100 or share < 0.02:
            failures.append("the screenshot is blank or nearly (%d distinct rows, %.2f%%)" %
                            (distinct, 100 * share))
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("ok: the page loads without console messages, a click draws a candidate's "
              "graph, the screenshot is not blank")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
