"""What the attention programs' tests check the same way on both targets (tests/kernels/
test_attention.py for sm_90a, test_attention_sm100.py for sm_100a): the host checker with values
against the family's expectation, and the CTA -> tile schedule a program emits against its model
(`tile_of`) and the model against what the mask means for the CTA's rows (brute force).

Imported by those tests as a module of their folder (pytest puts a test file's folder on sys.path).
"""

from __future__ import annotations

import itertools
from typing import Optional

from warpy.check.report import check_program
from warpy.isa.interp import Machine, run
from warpy.isa.program import Program
from warpy.kernels import attention as A
from warpy.kernels.attention_common import AttentionBuilder
from warpy.kernels.schedule import cdiv


def check(prob: A.AttentionProblem, program: Optional[Program] = None,
          coloured: bool = False) -> tuple[int, int, bool, str]:
    """(values checked, values wrong, clean, summary and the report's start) of the checker with
    values on `program` (the rule's by default), the coloured text too where asked."""
    prog = program if program is not None else A.build(prob)
    rep = check_program(prog, expect=A.FAMILY.expectation(prob), values=True, coloured=coloured)
    return rep.values_checked, rep.values_wrong, rep.ok, rep.summary() + "\n" + rep.text()[:3000]


def emitted_tiles(prog: AttentionBuilder) -> list[tuple[int, ...]]:
    """What the program's `tile` emits, run for every CTA: (m_block, head, kv_head, batch, n_blocks,
    n_unmasked)."""
    p = Program("tiles", prog.target.name, threads=32)
    t = prog.tile(p)
    lines = list(p.kernel().lines)
    out = []
    for x in range(prog.grid):
        m = run(lines, Machine(sreg={"SR_CTAID.X": x}))
        vals = [m.v[r.name] for r in (t.m_block, t.h, t.hkv, t.b)]
        vals += [x if isinstance(x, int) else m.v[x.name] for x in (t.n_blocks, t.n_unmasked)]
        out.append(tuple(vals))
    return out


def meaning(prob: A.AttentionProblem, m_block: int, bn: int, bm: int) -> tuple[int, int]:
    """Brute force: the key blocks some query of the CTA's bm rows sees, and how many leading ones
    all of them see whole."""
    rows = range(bm * m_block, min(bm * m_block + bm, prob.S_q))
    seen = [j for j in range(prob.S_kv) if any(not prob.causal or j <= i for i in rows)]
    n_blocks = cdiv(max(seen) + 1, bn)
    whole = 0
    while (whole + 1) * bn <= prob.S_kv and all(not prob.causal or (whole + 1) * bn - 1 <= i for i in rows):
        whole += 1
    return n_blocks, min(whole, n_blocks)


def assert_schedule_is_the_model_and_the_mask(prog: AttentionBuilder) -> list[tuple[int, int, int, int, int, int]]:
    """The emitted schedule is the model, the model visits every (batch, head, query block) once,
    reads the key/value head of the query head's group, and its key-block counts are the mask's
    meaning. Returns the model."""
    prob = prog.p
    model = [prog.tile_of(x) for x in range(prog.grid)]
    assert emitted_tiles(prog) == model
    assert sorted((b, h, m) for m, h, _, b, _, _ in model) == list(itertools.product(range(prob.B), range(prob.H_q),
                                                                                      range(prog.m_blocks)))
    for m_block, h, hkv, _, n_blocks, n_free in model:
        assert hkv == h // prob.group
        assert (n_blocks, min(n_free, n_blocks)) == meaning(prob, m_block, prog.bn, prog.bm)
    return model
