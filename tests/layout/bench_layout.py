"""Micro-benchmark of warpy.layout against pycute (CuTe's Python reference), on the same inputs.

    python3 tests/layout/bench_layout.py [--number N] [--repeat R] [--markdown]

Times each operation (the best of R runs of N calls) and, when CuTe's pycute is importable, the same
call in pycute (the runs interleaved with warpy's) and the ratio. pycute is not a dependency of
warpy: without it the comparison column is left out (and the script says so). Not collected by pytest (the name does not start
with test_); tests/layout/test_layout_bench.py runs it once when WARPY_SLOW=1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import warpy.layout as wl  # noqa: E402


def _pycute() -> Any:
    try:
        import pycute  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pycute if hasattr(pycute, "composition") and hasattr(pycute, "Layout") else None


def cases(pc: Any) -> list[tuple[str, Callable[[], object], Callable[[], object] | None]]:
    def both(name: str, w: Callable[[], object], p: Callable[[], object]) -> tuple[str, Callable[[], object], Callable[[], object] | None]:
        return (name, w, p if pc is not None else None)

    P = wl.Layout.parse
    W = wl.Layout  # both constructors called through a local name (no module attribute look-up)
    Q = pc.Layout if pc is not None else None
    out = []
    # construction: a layout seen before (the common case in a generator's loop) ...
    out.append(both("Layout((4,8),(8,1))", lambda: W((4, 8), (8, 1)), lambda: Q((4, 8), (8, 1))))
    out.append(
        both(
            "Layout(((2,4),(3,5)),((1,2),(8,24)))",
            lambda: W(((2, 4), (3, 5)), ((1, 2), (8, 24))),
            lambda: Q(((2, 4), (3, 5)), ((1, 2), (8, 24))),
        )
    )
    out.append(both("Layout((4,8)) (default stride)", lambda: W((4, 8)), lambda: Q((4, 8))))
    # ... and a new one each call (the validation itself)
    counter = iter(range(10**9))
    counter2 = iter(range(10**9))
    out.append(
        both(
            "Layout((n,8),(8,1)), n new each call",
            lambda: W((next(counter) + 1, 8), (8, 1)),
            lambda: Q((next(counter2) + 1, 8), (8, 1)),
        )
    )
    counter3 = iter(range(10**9))
    counter4 = iter(range(10**9))
    out.append(
        both(
            "Layout((n,4,8),(32,8,1)), n new each call",
            lambda: W((next(counter3) + 1, 4, 8), (32, 8, 1)),
            lambda: Q((next(counter4) + 1, 4, 8), (32, 8, 1)),
        )
    )
    counter5 = iter(range(10**9))
    counter6 = iter(range(10**9))
    out.append(
        both(
            "Layout((n,2,4,8),(64,32,8,1)), n new each call",
            lambda: W((next(counter5) + 1, 2, 4, 8), (64, 32, 8, 1)),
            lambda: Q((next(counter6) + 1, 2, 4, 8), (64, 32, 8, 1)),
        )
    )
    counter7 = iter(range(10**9))
    counter8 = iter(range(10**9))
    out.append(
        both(
            "Layout(((2,n),8),((1,2),16)), n new each call",
            lambda: W(((2, next(counter7) + 1), 8), ((1, 2), 16)),
            lambda: Q(((2, next(counter8) + 1), 8), ((1, 2), 16)),
        )
    )
    # ... and the constructor's other paths (none in line: the identity look-up or one general pass)
    c9, c10, c11, c12, c13, c14 = (iter(range(1, 10**9)) for _ in range(6))

    def held(make: Any, counter: Any) -> Callable[[], object]:
        def call() -> object:
            shape = ((2, next(counter)), 8)  # held by a variable: not fresh, and new each call
            return make(shape, ((1, 2), 16))

        return call

    out.append(both("Layout(((2,n),8),((1,2),16)), shape in a variable", held(W, c9), held(Q, c10)))
    out.append(
        both(
            "Layout((((2,n),2),8),(((1,2),4),16)), n new each call",
            lambda: W((((2, next(c11)), 2), 8), (((1, 2), 4), 16)),
            lambda: Q((((2, next(c12)), 2), 8), (((1, 2), 4), 16)),
        )
    )
    out.append(
        both(
            "Layout(((2,n,3),8),((1,2,4),16)), n new each call",
            lambda: W(((2, next(c13), 3), 8), ((1, 2, 4), 16)),
            lambda: Q(((2, next(c14), 3), 8), ((1, 2, 4), 16)),
        )
    )
    c15, c16, c17, c18 = (iter(range(1, 10**9)) for _ in range(4))
    out.append(
        both(
            "Layout((n,2,3,4,5),(1,2,3,4,5)), n new each call",
            lambda: W((next(c15), 2, 3, 4, 5), (1, 2, 3, 4, 5)),
            lambda: Q((next(c16), 2, 3, 4, 5), (1, 2, 3, 4, 5)),
        )
    )
    out.append(both("Layout((2,2,3,4,5),(1,2,3,4,5))", lambda: W((2, 2, 3, 4, 5), (1, 2, 3, 4, 5)), lambda: Q((2, 2, 3, 4, 5), (1, 2, 3, 4, 5))))
    out.append(
        both(
            "Layout((n,(2,4)),(8,(1,2))), n new each call",
            lambda: W((next(c17), (2, 4)), (8, (1, 2))),
            lambda: Q((next(c18), (2, 4)), (8, (1, 2))),
        )
    )
    a, ap = wl.Layout((4, 8), (8, 1)), (Q((4, 8), (8, 1)) if pc else None)
    out.append(both("layout(13)", lambda: a(13), lambda: ap(13)))
    out.append(both("layout((1,3))", lambda: a((1, 3)), lambda: ap((1, 3))))
    out.append(both("crd2idx(13, (4,8), (8,1))", lambda: wl.crd2idx(13, (4, 8), (8, 1)), lambda: pc.crd2idx(13, (4, 8), (8, 1))))
    nested, nestedp = wl.Layout(((2, 4), (3, 5)), ((1, 2), (8, 24))), (Q(((2, 4), (3, 5)), ((1, 2), (8, 24))) if pc else None)
    out.append(both("nested layout(77)", lambda: nested(77), lambda: nestedp(77)))

    def pair(sa: str, sb: str) -> tuple[Any, Any, Any, Any]:
        x, y = P(sa), P(sb)
        return x, y, (Q(x.shape, x.stride) if pc else None), (Q(y.shape, y.stride) if pc else None)

    x, y, xp, yp = pair("(6,2):(8,2)", "(4,3):(3,1)")
    out.append(both("composition((6,2):(8,2), (4,3):(3,1))", lambda: wl.composition(x, y), lambda: pc.composition(xp, yp)))
    x2, y2, x2p, y2p = pair("(3,6,2,8):(1,100,1000,10000)", "16:9")
    out.append(both("composition((3,6,2,8):(..), 16:9)", lambda: wl.composition(x2, y2), lambda: pc.composition(x2p, y2p)))
    x3, y3, x3p, y3p = pair("(8,64):(1,100)", "(2,2,64):(1,1,8)")
    out.append(both("composition, overlapping inner modes", lambda: wl.composition(x3, y3), lambda: pc.composition(x3p, y3p)))
    a4 = P("(12,(4,8)):(59,(13,1))")
    t4 = (P("3:4"), P("8:2"))
    a4p = Q(a4.shape, a4.stride) if pc else None
    t4p = (Q(3, 4), Q(8, 2)) if pc else None
    out.append(both("composition by mode", lambda: wl.composition(a4, t4), lambda: pc.composition(a4p, t4p)))
    a5 = P("(9,(4,8)):(59,(13,1))")
    t5 = (P("3:3"), P("(2,4):(1,8)"))
    a5p = Q(a5.shape, a5.stride) if pc else None
    t5p = (Q(3, 3), Q((2, 4), (1, 8))) if pc else None
    out.append(both("logical_divide by mode", lambda: wl.logical_divide(a5, t5), lambda: pc.logical_divide(a5p, t5p)))
    out.append(both("zipped_divide by mode", lambda: wl.zipped_divide(a5, t5), lambda: pc.zipped_divide(a5p, t5p)))
    x6, y6, x6p, y6p = pair("24:1", "4:1")
    out.append(both("logical_divide(24:1, 4:1)", lambda: wl.logical_divide(x6, y6), lambda: pc.logical_divide(x6p, y6p)))
    x7, y7, x7p, y7p = pair("(2,2):(4,1)", "6:1")
    out.append(both("logical_product((2,2):(4,1), 6:1)", lambda: wl.logical_product(x7, y7), lambda: pc.logical_product(x7p, y7p)))
    x8 = P("4:2")
    x8p = Q(4, 2) if pc else None
    out.append(both("complement(4:2, 24)", lambda: wl.complement(x8, 24), lambda: pc.complement(x8p, 24)))
    x9 = P("((2,(3,4)),(3,2),1):((4,(8,24)),(2,6),12)")
    x9p = Q(x9.shape, x9.stride) if pc else None
    out.append(both("coalesce", lambda: wl.coalesce(x9), lambda: pc.coalesce(x9p)))
    out.append(both("right_inverse((4,8):(8,1))", lambda: wl.right_inverse(a), lambda: pc.right_inverse(ap)))
    out.append(both("left_inverse((4,8):(8,1))", lambda: wl.left_inverse(a), lambda: pc.left_inverse(ap)))
    return out


def best(fs: list[Callable[[], object]], number: int, repeat: int, timer: Callable[[], float] = time.perf_counter) -> list[float]:
    """Microseconds a call, the best of `repeat` runs of `number` calls each; the functions' runs
    interleaved, so that a busy spell of a shared machine slows both sides of a comparison."""
    out = [float("inf")] * len(fs)
    for _ in range(repeat):
        for i, f in enumerate(fs):
            out[i] = min(out[i], timeit.timeit(f, number=number, timer=timer) / number * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per repeat (default 20000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of N calls, the best counts (default 5)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by this process's CPU time (time.process_time), not the wall clock: on a shared machine "
                    "it leaves out the time other jobs hold the core")
    args = ap.parse_args(argv)
    pc = _pycute()
    timer = time.process_time if args.cpu_time else time.perf_counter
    if pc is None:
        print("pycute (CuTe's Python reference) is not installed: timings of warpy only, no comparison")
    rows = []
    for name, w, p in cases(pc):
        if p is None:
            rows.append((name, best([w], args.number, args.repeat, timer)[0], None))
        else:
            tw, tp = best([w, p], args.number, args.repeat, timer)
            rows.append((name, tw, tp))
    if args.markdown:
        print("| operation | warpy (us) | pycute (us) | ratio |")
        print("|---|---:|---:|---:|")
        for name, tw, tp in rows:
            print(f"| `{name}` | {tw:.2f} | {'' if tp is None else f'{tp:.2f}'} | {'' if tp is None else f'{tw / tp:.2f}'} |")
    else:
        for name, tw, tp in rows:
            cmp = "" if tp is None else f"  pycute {tp:8.2f} us  ratio {tw / tp:5.2f}"
            print(f"{name:45s} warpy {tw:8.2f} us{cmp}")
    worst = max((tw / tp for _, tw, tp in rows if tp), default=None)
    if worst is not None:
        print(f"slowest relative to pycute: {worst:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
