"""`python -m tests.check.corpus [NAME...]`: run the corpus (or the named cases, with the checker's
messages) and print each verdict, then caught / missed / false alarms by class."""

from __future__ import annotations

import sys
import time

from tests.check.corpus.cases import CASES


def main(names: list[str]) -> int:
    todo = [c for c in CASES if not names or c.name in names]
    by_cls: dict[str, list[int]] = {}
    bad = 0
    t_all = time.monotonic()
    for c in todo:
        t0 = time.monotonic()
        try:
            rep = c.run()
            why = c.verdict(rep)
        except Exception as e:  # a case that does not build or apply is a failure of the corpus
            rep = None
            why = f"error: {type(e).__name__}: {e}"
        dt = time.monotonic() - t0
        row = by_cls.setdefault(c.cls, [0, 0, 0, 0])  # bugs caught, bugs missed, clean ok, false alarms
        if c.expect == "clean":
            row[2 if why is None else 3] += 1
        else:
            row[0 if why is None else 1] += 1
        bad += why is not None
        print(f"{'ok  ' if why is None else 'FAIL'} {c.cls:<10} {c.name:<40} {dt:5.2f} s" + ("" if why is None else f"  {why}"))
        if names and rep is not None:
            for line in rep.messages(6):
                print("     ", line)
    print(f"\n{'class':<12}{'bugs caught':>12}{'missed':>8}{'clean ok':>10}{'false alarms':>14}")
    tot = [0, 0, 0, 0]
    for cls, row in sorted(by_cls.items()):
        print(f"{cls:<12}{row[0]:>12}{row[1]:>8}{row[2]:>10}{row[3]:>14}")
        tot = [a + b for a, b in zip(tot, row)]
    print(f"{'all':<12}{tot[0]:>12}{tot[1]:>8}{tot[2]:>10}{tot[3]:>14}   ({len(todo)} cases, "
          f"{time.monotonic() - t_all:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
