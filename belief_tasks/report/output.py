"""Writing the report: Markdown tables backed by CSV files, PNG figures, one style.

Figures use the Okabe-Ito palette (colour-blind safe), labelled axes, titles and
legends; heatmaps use ``cividis`` (perceptually uniform, colour-blind safe).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only: works without a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

#: Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HEATMAP_CMAP = "cividis"


def colour(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def marker(i: int) -> str:
    return MARKERS[i % len(MARKERS)]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "x"


def fmt(x, digits: int = 4) -> str:
    """A table cell: numbers with ``digits`` decimals, NaN/None as an en dash."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        return f"{x:.{digits}f}"
    return str(x)


def pm(value, stderr, digits: int = 4) -> str:
    """``value ± stderr``; the value alone where there is no standard error (``NoStderr``, lm-eval's "N/A", None or
    NaN from a results JSON)."""
    if stderr is None or isinstance(stderr, str) or (isinstance(stderr, float) and math.isnan(stderr)):
        return fmt(value, digits)
    return f"{fmt(value, digits)} ± {fmt(stderr, digits)}"


def markdown_table(df: pd.DataFrame, digits: int = 4, index: bool = False) -> str:
    if index:
        df = df.reset_index()
    header = [str(c) for c in df.columns]
    rows = [[fmt(v, digits).replace("|", "\\|") for v in row] for row in df.itertuples(index=False)]
    align = ["---:" if pd.api.types.is_numeric_dtype(df[c]) else ":---" for c in df.columns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class ReportWriter:
    """The output folder: ``report.md`` from sections, ``tables/*.csv``, ``figures/*.png``."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        (self.out / "tables").mkdir(parents=True, exist_ok=True)
        (self.out / "figures").mkdir(parents=True, exist_ok=True)
        self.files: list[Path] = []

    def table(
        self, df: pd.DataFrame, name: str, caption: str = "", digits: int = 4, csv: pd.DataFrame | None = None
    ) -> str:
        """Write ``tables/<name>.csv`` (``csv`` if given: the unformatted numbers) and return the Markdown table."""
        path = self.out / "tables" / f"{slug(name)}.csv"
        (df if csv is None else csv).to_csv(path, index=False)
        self.files.append(path)
        cap = f"{caption} " if caption else ""
        return f"{markdown_table(df, digits)}\n\n*{cap}CSV: [tables/{path.name}](tables/{path.name})*\n"

    def figure(self, fig, name: str, alt: str) -> str:
        path = self.out / "figures" / f"{slug(name)}.png"
        fig.savefig(path, dpi=130, bbox_inches="tight")
        plt.close(fig)
        self.files.append(path)
        return f"![{alt}](figures/{path.name})\n"

    def write(self, relpath: str, text: str) -> Path:
        path = self.out / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.files.append(path)
        return path


# --------------------------------------------------------------------------- figures


def new_figure(width: float = 6.4, height: float = 4.2):
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def heatmap(
    matrix: pd.DataFrame,
    title: str,
    xlabel: str,
    ylabel: str,
    cbar_label: str,
    vmin: float = 0.0,
    vmax: float = 1.0,
    annotate: bool | None = None,
    digits: int = 2,
):
    """A labelled heatmap (rows = ``matrix.index``, columns = ``matrix.columns``), values written in the cells."""
    import numpy as np

    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(max(4.5, 1.0 + 0.75 * cols), max(3.2, 1.2 + 0.42 * rows)), layout="constrained")
    data = matrix.to_numpy(dtype=float)
    im = ax.imshow(np.ma.masked_invalid(data), cmap=HEATMAP_CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    xlabels = [str(c) for c in matrix.columns]
    tilt = cols > 2 or max(len(x) for x in xlabels) > 10
    ax.set_xticks(
        range(cols), xlabels, rotation=35 if tilt else 0, ha="right" if tilt else "center", rotation_mode="anchor"
    )
    ax.set_yticks(range(rows), [str(r) for r in matrix.index])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    cb = fig.colorbar(im, ax=ax)
    cb.set_label(cbar_label)
    if annotate is None:
        annotate = rows * cols <= 400
    if annotate:
        span = (vmax - vmin) or 1.0
        for i in range(rows):
            for j in range(cols):
                v = data[i, j]
                if np.isnan(v):
                    ax.text(j, i, "–", ha="center", va="center", fontsize=8, color="grey")
                    continue
                light = (v - vmin) / span > 0.6  # cividis is light at the top
                ax.text(
                    j, i, f"{v:.{digits}f}", ha="center", va="center", fontsize=8, color="black" if light else "white"
                )
    return fig


def grouped_bars(
    values: pd.DataFrame,
    errors: pd.DataFrame | None,
    title: str,
    xlabel: str,
    ylabel: str,
    legend_title: str,
    ylim: tuple[float, float] | None = (0.0, 1.0),
):
    """Bars per row of ``values`` (x), one colour per column (series), optional error bars."""
    import numpy as np

    n_groups, n_series = values.shape
    width = 0.8 / max(n_series, 1)
    fig, ax = new_figure(max(6.4, 0.5 * n_groups * max(1, n_series) ** 0.5 + 2), 4.2)
    x = np.arange(n_groups)
    for j, col in enumerate(values.columns):
        err = None if errors is None else errors[col].to_numpy(dtype=float)
        ax.bar(
            x + (j - (n_series - 1) / 2) * width,
            values[col].to_numpy(dtype=float),
            width,
            yerr=err,
            color=colour(j),
            label=str(col),
            capsize=2,
            edgecolor="white",
            linewidth=0.5,
        )
    ax.set_xticks(
        x, [str(i) for i in values.index], rotation=45 if n_groups > 4 else 0, ha="right" if n_groups > 4 else "center"
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(title=legend_title, fontsize=8, title_fontsize=8, loc="best")
    return fig


def line_plot(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    legend_title: str,
    diagonal: bool = False,
    xlim=(-0.03, 1.03),
    ylim=(-0.03, 1.03),
    bands=None,
):
    """One line per ``(label, x, y)``; ``diagonal`` adds y = x (perfect calibration); ``bands``, one
    ``(low, high)`` per series (NaN where a point has none), shades each line's interval."""
    fig, ax = new_figure(5.6, 4.6)
    if diagonal:
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    for i, (label, xs, ys) in enumerate(series):
        ax.plot(xs, ys, marker=marker(i), color=colour(i), label=label, linewidth=1.5, markersize=5, clip_on=False)
        if bands is not None and bands[i] is not None:
            ax.fill_between(xs, bands[i][0], bands[i][1], color=colour(i), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if xlim:
        ax.set_xlim(*xlim)
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(title=legend_title, fontsize=8, title_fontsize=8, loc="best")
    return fig
