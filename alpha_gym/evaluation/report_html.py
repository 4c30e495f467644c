"""The pieces every report page is made of: embedded PNG plots, escaped tables, one stylesheet.

A page is one self-contained HTML file: plots are base64 PNGs, there is no script and nothing is
fetched, so it opens the same offline, in a browser on a cluster's login node, or as a CI artifact.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;
color:#222;padding:0 1em}table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}code{font-size:12px}img{max-width:100%;display:block;margin:1em 0}
.note{color:#666;font-size:13px}tr.sel{background:#fff4d6}tr.bad{color:#999}td.pos{color:#1a7f37}
td.neg{color:#b42318}nav a{margin-right:1em}h2{border-bottom:1px solid #eee;padding-bottom:.2em;margin-top:2em}"""


def mpl():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def png(fig) -> str:
    """The figure as a base64 PNG string; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    mpl().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def arr(xs) -> np.ndarray:
    """Floats with None as NaN."""
    return np.array([np.nan if x is None else float(x) for x in xs], dtype=np.float64)


def fmt(x, spec="+.3f") -> str:
    """A number formatted, "n/a" for None/NaN, anything else escaped."""
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    try:
        return format(x, spec)
    except (TypeError, ValueError):
        return html.escape(str(x))


def esc(x) -> str:
    return html.escape(str(x))


def img(b64: str | None, alt: str) -> str:
    return "" if b64 is None else f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}"/>'


def kv_table(rows: list[tuple[str, str]]) -> str:
    """A two-column table: escaped label, value already HTML."""
    body = "".join(f'<tr><th class="l">{html.escape(k)}</th><td>{v}</td></tr>' for k, v in rows)
    return f"<table>{body}</table>"


def table(headers: list[str], rows: list[list[str]], left=frozenset(), classes=None) -> str:
    """Escaped headers; cells are HTML already. `left`: column indexes aligned left; `classes`: per-row class."""
    head = "".join(f'<th class="{"l" if i in left else ""}">{html.escape(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cls = f' class="{classes[r]}"' if classes and classes[r] else ""
        cells = "".join(f'<td class="{"l" if i in left else ""}">{c}</td>' for i, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def page(title: str, parts: list[str]) -> str:
    """A whole HTML document around the given parts (empty parts are dropped)."""
    head = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>")
    return "\n".join([head, *(p for p in parts if p), "</body></html>"])


def write_page(path: Path, text: str) -> Path:
    """Write atomically (a reader never sees half a page)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
