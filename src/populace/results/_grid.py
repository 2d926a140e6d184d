"""Figure grids shared by the generic figures and scenarios' own (matplotlib imported only
when drawing: importing :mod:`populace.results` must not pay for it)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH = 10.0  # inches; PNGs are saved at 100 dpi


def panel_grid(n: int, height: float = 2.4, *, sharex: bool = False
               ) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` axes in rows of up to 3 (5 past 6 panels), for scenarios' figures
    too. Margins are set by hand: matplotlib's automatic layouts would double the time a
    report takes. ``sharex``: one x scale, shown under the lowest panel of each column."""
    from matplotlib.figure import Figure

    ncols = max(1, min(n, 3 if n <= 6 else 5))
    nrows = math.ceil(n / ncols)
    total = 1.4 + height * nrows
    fig = Figure(figsize=(WIDTH, total))
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.55 / total, top=1 - 0.95 / total,
                        hspace=0.75, wspace=0.28)
    axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        fig.delaxes(ax)
    for ax in axes[:n]:
        ax.tick_params(labelsize=8)
    if sharex:
        for ax in axes[max(0, n - ncols):n]:
            ax.xaxis.set_tick_params(labelbottom=True)
    return fig, axes[:n]
