"""The scorecard as one self-contained HTML page (figures embedded), for the report.

The page opens on its own in a browser and inside Snakemake's HTML report
(which shows HTML results in a frame): a summary of verdicts, the scorecard
table, then one section per claim with its statement, the paper's quoted
value, ours, the verdict and its reason, and the claim's figure.
"""

from __future__ import annotations

import base64
import html
import io

from gnnflow.plots.scorecard import COLORS, claim_figure
from gnnflow.results.claims import Claims
from gnnflow.results.scorecard import VERDICTS, Verdict, counts, scorecard_frame

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #212121; max-width: 1100px; }
h1 { font-size: 1.35em; } h2 { font-size: 1.1em; margin-top: 1.8em; border-top: 1px solid #ddd; padding-top: .8em; }
table { border-collapse: collapse; font-size: .85em; margin: .6em 0; }
th, td { border: 1px solid #ccc; padding: .3em .5em; vertical-align: top; text-align: left; }
th { background: #f5f5f5; }
.verdict { color: white; border-radius: .3em; padding: .1em .4em; white-space: nowrap; font-size: .9em; }
.note { color: #555; font-size: .9em; }
img.claim { max-width: 100%; border: 1px solid #eee; margin: .4em 0; }
"""


def _chip(verdict: str) -> str:
    return f'<span class="verdict" style="background:{COLORS[verdict]}">{html.escape(verdict)}</span>'


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_page(claims: Claims, verdicts: list[Verdict], title: str = "") -> str:
    """The scorecard page as HTML text."""
    frame = scorecard_frame(verdicts)
    labels = list(dict.fromkeys(v.label for v in verdicts))
    esc = html.escape
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Scorecard: {esc(claims.paper)}</title>",
           f"<style>{CSS}</style></head><body>",
           f"<h1>Scorecard: {esc(claims.paper)}</h1>"]
    if title:
        out.append(f"<p>{esc(title)}</p>")
    out.append("<p class='note'>Each claim quotes the paper's own number and where it stands (table or figure, "
               "dataset, hardware). Only <b>ours</b> is measured here; the paper's values are quotations, drawn "
               "as labelled reference marks (band, dashed line, diamonds), never as measurements. Verdicts: "
               + ", ".join(_chip(v) for v in VERDICTS) + ".</p>")
    summary = counts(verdicts)
    out.append("<table><tr><th>results</th>" + "".join(f"<th>{_chip(v)}</th>" for v in VERDICTS) + "</tr>")
    for label in labels:
        out.append(f"<tr><td>{esc(label)}</td>" + "".join(f"<td>{summary[label][v]}</td>" for v in VERDICTS)
                   + "</tr>")
    out.append("</table>")
    cols = ["claim", "in the paper", "paper (quoted)"] + [c for lb in labels for c in
                                                              (f"ours ({lb})", f"verdict ({lb})")]
    out.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in cols) + "</tr>")
    for _, row in frame.iterrows():
        cells = []
        for c in cols:
            text = str(row[c])
            if c == "claim":
                cells.append(f"<td><a href='#{esc(text)}'>{esc(text)}</a></td>")
            elif c.startswith("verdict"):
                cells.append(f"<td>{_chip(text)}</td>")
            else:
                cells.append(f"<td>{esc(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    by_claim: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_claim.setdefault(v.claim.id, []).append(v)
    for (_, row), claim in zip(frame.iterrows(), claims.claims, strict=True):
        vs = by_claim[claim.id]
        out.append(f"<h2 id='{esc(claim.id)}'>{esc(claim.id)}: {esc(claim.statement)}</h2>")
        out.append(f"<p><b>Where in the paper:</b> {esc(claim.where())}<br>"
                   f"<b>Paper (quoted):</b> {esc(row['paper (quoted)'])}"
                   + (f" — “{esc(claim.paper.quote)}”" if claim.paper.quote else "") + "<br>"
                   f"<b>Measured here as:</b> {esc(row['measured here as'])}</p>")
        out.append("<ul>" + "".join(
            f"<li>{esc(v.label)}: ours <b>{esc(str(row[f'ours ({v.label})']))}</b> {_chip(v.verdict)} "
            f"{esc(str(row[f'why ({v.label})']))}</li>" for v in vs) + "</ul>")
        fig = claim_figure(claim, vs)
        if fig is not None:
            out.append(f"<img class='claim' alt='{esc(claim.id)}: ours beside the paper' "
                       f"src='data:image/png;base64,{_png(fig)}'>")
    out.append("</body></html>")
    return "\n".join(out)
