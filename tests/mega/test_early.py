"""Operands a loader may copy before its load-stage waits (`Instr.early`, the instruction's `early`
bits): exactly the reads no instruction of the launch writes (graph inputs and weights), derived
from the dependency sets; the validator refuses an early read of a tensor the launch writes."""

from __future__ import annotations

from warpy.mega import build, encode, validate
from warpy.mega.encode import decode
from warpy.mega.examples import load


def test_early_reads_are_the_inputs_and_reach_the_instruction() -> None:
    s = build(load("llama-small", 16), "sm_90a", units=4)
    prog = s.program
    fields = decode(encode(s).words)
    seen_weight = seen_temp = 0
    for ins, f in zip(s.instrs, fields):
        for k, acc in enumerate(ins.reads):
            is_input = prog.tensors[acc.tensor].kind == "input"
            assert (k in ins.early) == is_input, (ins.index, k)
            seen_weight += is_input
            seen_temp += not is_input
        node = prog.nodes[ins.node]
        if node.kind == "gemm":  # slot 2 is the weight (an input), slot 1 the activation (a temp or x)
            assert f["early"] >> 2 & 1 == 1
            assert f["early"] >> 1 & 1 == int(prog.tensors[ins.reads[0].tensor].kind == "input")
        assert f["early"] >> f["n_operands"] == 0  # no bit past the slots in use
    assert seen_weight and seen_temp
    assert validate(s).ok


def test_the_validator_refuses_an_early_read_of_what_the_launch_writes() -> None:
    s = build(load("mlp-small"), "sm_90a", units=2)
    prog = s.program
    victim = next(ins for ins in s.instrs
                  if any(prog.tensors[a.tensor].kind != "input" for a in ins.reads))
    k = next(k for k, a in enumerate(victim.reads) if prog.tensors[a.tensor].kind != "input")
    victim.early = victim.early + (k,)
    problems = validate(s)
    assert not problems.ok
    assert any("before its waits (early)" in line for line in problems.lines())
