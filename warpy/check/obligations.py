"""What must hold when the run ends: no warp left blocked (a hang, said with what it waits for),
whatever other CTAs and the CTA's own asynchronous units did to a CTA's shared memory ordered before
that CTA exits (`HappensBefore.exits`), no tensor memory left allocated, and no named barrier left
with arrivals short of its count."""

from __future__ import annotations

from warpy.check.happens_before import HappensBefore
from warpy.check.state import BLOCKED, EXITED, Cta, MBarWait, Problems, Warp


def hangs(warps: list[Warp], problems: Problems) -> None:
    """Every warp still blocked when none can run."""
    for w in warps:
        if w.state != BLOCKED:
            continue
        b = w.block
        who = f"{w.cta.name} warp {w.wid}"
        if b is None:
            problems.add("protocol", f"hang: {who} is blocked")
        elif isinstance(b, MBarWait):
            bar = b.bar
            problems.add("protocol", f"hang: {who} waits on {bar.name} for the phase of parity {b.parity}: it is in phase "
                                     f"{bar.phase}, {bar.pending} of {bar.count} arrivals to come, {bar.tx} bytes")
        else:
            problems.add("protocol", f"hang: {who} waits on {b}")


def at_end(ctas: list[Cta], order: HappensBefore, problems: Problems) -> None:
    order.exits(ctas)
    for cta in ctas:
        if cta.tmem_cols and all(x.state == EXITED for x in cta.warps):
            cols = ", ".join(f"{s}..{s + n - 1}" for s, n in cta.tmem_cols)
            problems.add("protocol", f"{cta.name} exits with tensor-memory columns {cols} still allocated (a "
                                     f"tcgen05.dealloc must free them: the next CTA on the SM cannot allocate them)")
    for cta in ctas:
        for bid, nb in cta.named.items():
            for g, st in sorted(nb.gens.items()):
                if st.arrived:
                    problems.add("named", f"{cta.name}: named barrier {bid} ends with {st.arrived} of "
                                          f"{st.count or 'every running'} threads arrived (generation {g})")
