"""`warpy mega show --png`: the per-unit queues as a picture (matplotlib, optional).

One row per unit, each instruction a bar at its estimated start and finish, coloured by node; for
schedules small enough to read, a line from each producer an instruction waits on to it.
"""

from __future__ import annotations

from typing import Any

from warpy.errors import WarpyError
from warpy.mega.schedule import Schedule

MAX_LINES = 600


def draw(s: Schedule, path: str) -> str:
    """Write the picture; the line to print. Without matplotlib, a one-line error."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise WarpyError("--png needs matplotlib (pip install matplotlib)") from None
    if s.queues is None:
        raise WarpyError("--png draws per-unit queues; a dynamic schedule has none (use --mode static)")
    start = {i.index: s.finish[i.index] - i.cost for i in s.instrs}
    unit = {i: u for u, q in enumerate(s.queues) for i in q}
    fig, ax = plt.subplots(figsize=(14, max(4, 0.12 * s.units)))
    cmap: Any = plt.get_cmap("tab20")
    for ins in s.instrs:
        ax.barh(unit[ins.index], ins.cost * 1e6, left=start[ins.index] * 1e6, height=0.8,
                color=cmap(ins.node % 20), edgecolor="black", linewidth=0.2)
    lines = 0
    for ins in s.instrs:
        for w in ins.waits:
            for m in s.counters[w.counter].members:
                if lines >= MAX_LINES:
                    break
                ax.plot([s.finish[m] * 1e6, start[ins.index] * 1e6], [unit[m], unit[ins.index]],
                        color="grey", linewidth=0.3, alpha=0.6)
                lines += 1
    ax.set_xlabel("estimated time (us)")
    ax.set_ylabel("unit")
    ax.set_title(f"{s.program.graph.name} on {s.target.name}: {len(s.instrs)} instructions, {s.waves} waves"
                 + ("" if lines < MAX_LINES else f" (first {MAX_LINES} waits drawn)"))
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


__all__ = ["draw"]
