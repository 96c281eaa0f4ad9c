"""Plot make bench's data-at-scale rows: doc/scale.tsv to doc/scale.svg.

    tests/bench/bench --only scale --scale-out doc/scale.tsv
    /usr/bin/python3 tools/plot_scale.py [doc/scale.tsv] [-o doc/scale.svg]

Two log-log panels against the sample count n: the time from the start of
an epoch to its first batch, and the peak RSS of the process that loads
(forkload's parent, or PyTorch's main process); one line per series
(forkload's torch order, forkload's bijection, PyTorch's RandomSampler).
The lines join epoch 0's first batches, which include forking the
workers; hollow marks are epoch 1's.  A configuration the bench did not
run is named under its panel, with the reason the TSV gives.  The SVG is
written by hand, so that this needs nothing beyond Debian's python3.
"""

import argparse
import csv
import math
import sys
from xml.sax.saxutils import escape

SERIES = (  # TSV name, legend, colour
    ("forkload torch order", "forkload, torch order", "#1f77b4"),
    ("forkload bijection", "forkload, bijection", "#2ca02c"),
    ("PyTorch RandomSampler", "PyTorch RandomSampler", "#ff7f0e"),
)
PANEL_W, PANEL_H = 360, 260  # the plotting area of one panel
MARGIN_L, MARGIN_T, GAP = 70, 50, 110
WIDTH = MARGIN_L + 2 * PANEL_W + GAP + 30
HEIGHT = MARGIN_T + PANEL_H + 180


def read_rows(path):
    """The TSV's rows, numbers as floats (None where the cell is empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for row in rows:
        for key in ("n", "create_ms", "epoch0_ms", "epoch1_ms",
                    "peak_rss_mb"):
            row[key] = float(row[key]) if row[key] else None
    return rows


class Axes:
    """Log-log scales: decades lo to hi on each axis, onto a panel."""

    def __init__(self, left, xs, ys):
        self.left = left
        self.x0, self.x1 = decades(xs)
        self.y0, self.y1 = decades(ys)

    def x(self, v):
        t = (math.log10(v) - self.x0) / (self.x1 - self.x0)
        return self.left + t * PANEL_W

    def y(self, v):
        t = (math.log10(v) - self.y0) / (self.y1 - self.y0)
        return MARGIN_T + PANEL_H - t * PANEL_H


def decades(values):
    """The whole decades around the values, at least one apart."""
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)))
    return lo, max(hi, lo + 1)


SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3"
                            "\u2074\u2075\u2076\u2077\u2078\u2079")


def power_label(k):
    """10^k as text: plain from 0.01 to 10000, else 10 with a superscript
    (a character, not a shifted tspan, which some renderers misplace)."""
    if -2 <= k <= 4:
        return ("%.2f" % 10 ** k).rstrip("0").rstrip(".")
    return "10" + str(k).translate(SUPERSCRIPT)


def n_label(n):
    """n as the bench's table writes it: 1e6, 5e7."""
    k = math.floor(math.log10(n) + 1e-9)
    return "%.0fe%d" % (n / 10 ** k, k)


def axes_svg(ax, title, ylabel):
    """A panel's frame, decade grid, tick labels and titles."""
    out = []
    right, bottom = ax.left + PANEL_W, MARGIN_T + PANEL_H
    for k in range(ax.x0, ax.x1 + 1):
        x = ax.x(10 ** k)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" '
                   'class="grid"/>' % (x, MARGIN_T, x, bottom))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (x, bottom + 18, power_label(k)))
    for k in range(ax.y0, ax.y1 + 1):
        y = ax.y(10 ** k)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" '
                   'class="grid"/>' % (ax.left, y, right, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (ax.left - 6, y + 4, power_label(k)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" class="frame"/>'
               % (ax.left, MARGIN_T, PANEL_W, PANEL_H))
    out.append('<text x="%.1f" y="%d" text-anchor="middle" class="title">'
               '%s</text>' % (ax.left + PANEL_W / 2, MARGIN_T - 12,
                              escape(title)))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">samples n'
               '</text>' % (ax.left + PANEL_W / 2, bottom + 38))
    out.append('<text transform="translate(%d %.1f) rotate(-90)" '
               'text-anchor="middle">%s</text>'
               % (ax.left - 52, MARGIN_T + PANEL_H / 2, escape(ylabel)))
    return out


def target_svg(ax, value, label):
    """A dotted horizontal line at one of the issue's targets."""
    y = ax.y(value)
    return ['<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="target"/>'
            % (ax.left, y, ax.left + PANEL_W, y),
            '<text x="%d" y="%.1f" text-anchor="end" class="note">%s</text>'
            % (ax.left + PANEL_W - 4, y + 13, escape(label))]


def series_svg(ax, rows, key, colour, hollow_key=None):
    """A series' line through (n, key), and hollow marks at hollow_key."""
    points = [(ax.x(r["n"]), ax.y(r[key])) for r in rows]
    out = ['<polyline points="%s" fill="none" stroke="%s" '
           'stroke-width="2"/>'
           % (" ".join("%.1f,%.1f" % p for p in points), colour)]
    out += ['<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>'
            % (x, y, colour) for x, y in points]
    if hollow_key is not None:
        out += ['<circle cx="%.1f" cy="%.1f" r="4.5" fill="white" '
                'stroke="%s" stroke-width="1.5"/>'
                % (ax.x(r["n"]), ax.y(r[hollow_key]), colour) for r in rows]
    return out


def legend_svg(epochs):
    """The series' colours, and what the marks are, under the panels."""
    out = []
    y = MARGIN_T + PANEL_H + 70
    x = MARGIN_L
    for _, legend, colour in SERIES:
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" '
                   'stroke-width="2"/>' % (x, y - 4, x + 24, y - 4, colour))
        out.append('<text x="%d" y="%d">%s</text>'
                   % (x + 30, y, escape(legend)))
        x += 220
    if epochs:
        out.append('<text x="%d" y="%d" class="note">Left: lines and dots '
                   'are epoch 0 (its workers forked), hollow marks epoch 1.'
                   '</text>' % (MARGIN_L, y + 20))
    return out


def render(rows):
    """The whole SVG, as a string."""
    run = [r for r in rows if r["epoch0_ms"] is not None]
    if not run:
        raise ValueError("no measured rows")
    times = [r[k] for r in run for k in ("epoch0_ms", "epoch1_ms")] + [50]
    rss = [r["peak_rss_mb"] for r in run] + [100]
    ns = [r["n"] for r in rows]
    left = Axes(MARGIN_L, ns, times)
    right = Axes(MARGIN_L + PANEL_W + GAP, ns, rss)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">'
           % (WIDTH, HEIGHT, WIDTH, HEIGHT),
           '<style>.grid{stroke:#ddd;stroke-width:1}'
           '.frame{fill:none;stroke:#333;stroke-width:1}'
           '.target{stroke:#888;stroke-width:1;stroke-dasharray:2 3}'
           '.title{font-weight:bold;font-size:13px}'
           '.note{fill:#555;font-size:11px}</style>',
           '<rect width="100%" height="100%" fill="white"/>']
    out += axes_svg(left, "From begin to the first batch",
                    "milliseconds")
    out += axes_svg(right, "Peak RSS of the loading process", "MB")
    out += target_svg(left, 50, "target: 50 ms, torch order at 5e7")
    out += target_svg(right, 100, "target: 100 MB, bijection at 1e10")
    for name, _, colour in SERIES:
        mine = sorted((r for r in run if r["series"] == name),
                      key=lambda r: r["n"])
        if mine:
            out += series_svg(left, mine, "epoch0_ms", colour, "epoch1_ms")
            out += series_svg(right, mine, "peak_rss_mb", colour)
    notes = ["%s at n=%s: %s" % (r["series"], n_label(r["n"]), r["note"])
             for r in rows if r["epoch0_ms"] is None]
    for i, note in enumerate(notes):
        out.append('<text x="%d" y="%d" class="note">%s</text>'
                   % (MARGIN_L, MARGIN_T + PANEL_H + 110 + 14 * i,
                      escape(note)))
    out += legend_svg(True)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tsv", nargs="?", default="doc/scale.tsv")
    parser.add_argument("-o", "--output", default="doc/scale.svg")
    args = parser.parse_args(argv)
    try:
        svg = render(read_rows(args.tsv))
    except (OSError, ValueError, KeyError) as exc:
        print("plot_scale.py: %s: %s" % (args.tsv, exc), file=sys.stderr)
        return 1
    with open(args.output, "w") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
