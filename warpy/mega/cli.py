"""`warpy mega ...`: the megakernel's host side from the command line.

    warpy mega show GRAPH [--tokens T] [--arch sm_90a|sm_100a] [--mode static|dynamic] [--all] [--png FILE]
    warpy mega check GRAPH [--tokens T] [--arch ...] [--mode ...] [--vm] [--seed N]
    warpy mega mutate [GRAPH ...] [--count N] [--units U]
    warpy mega run GRAPH [--tokens T] [--units U] [--calls N] [--deadline S] [--hang]   (an sm_90 GPU)
    warpy mega bench [WORKLOAD ...] [--iters N] [--json FILE] [--png FILE]              (an sm_90 GPU, torch)

GRAPH: a named example (mlp3, llama-mlp, mlp-small, llama-small) or FILE.py defining build() or
graph. Errors are one line (WarpyError); the implementations are imported per command.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from warpy.errors import WarpyError

app = typer.Typer(name="mega", help="The megakernel's host side: graph -> tile instructions -> per-unit queues.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

GRAPH_HELP = "A named graph (mlp3, llama-mlp, mlp-small, llama-small) or FILE.py defining build() or graph."


def _schedule(graph: str, tokens: Optional[int], arch: str, mode: str, units: Optional[int] = None,  # type: ignore[no-untyped-def]
              glu: Optional[bool] = None, norm: Optional[bool] = None, rope: Optional[bool] = None):
    """The schedule the interpreter runs: SwiGLU, decode rmsnorms and the projections' ropes fused
    as its rule does (`glu`, `norm`, `rope` None) or as asked."""
    from warpy.kernels.mega import fresh_default, glu_default, norm_default, rope_default
    from warpy.mega.examples import load
    from warpy.mega.schedule import build

    if tokens is not None and tokens < 1:
        raise WarpyError(f"--tokens {tokens} must be at least 1")
    return build(load(graph, tokens), arch, mode, units, glu=glu_default(arch) if glu is None else glu,
                 norm=norm_default(arch) if norm is None else norm, rope=rope_default(arch) if rope is None else rope,
                 fresh=fresh_default(arch))


GLU_HELP = ("SwiGLU's gate and up gemms and their silu_mul as one gemm (default: as the interpreter's rule runs "
            "them, fused on sm_90a; sm_100a runs them unfused).")
NORM_HELP = ("An rmsnorm of decode rows (at most 64) fused into the gemms that read it (default: as the "
             "interpreter's rule runs it; sm_90a only)")
ROPE_HELP = ("Decode projections viewed as heads write them themselves: roped in the epilogue, or into a cache's "
             "rows (default: as the interpreter's rule runs them; sm_90a only)")


def _box(box: tuple[tuple[int, int], ...]) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


@app.command("show")
def show_cmd(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    tokens: Optional[int] = typer.Option(None, "--tokens", "-t", help="Rows of x (T) for the named graphs."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
    mode: str = typer.Option("static", "--mode", help="static (per-unit queues) or dynamic (a work counter / CLC)."),
    every: bool = typer.Option(False, "--all", help="Print every instruction (default: the first 24)."),
    png: Optional[str] = typer.Option(None, "--png", help="Draw the per-unit queues and their waits to FILE.png."),
    glu: Optional[bool] = typer.Option(None, "--glu/--no-glu", help=GLU_HELP),
    norm: Optional[bool] = typer.Option(None, "--norm/--no-norm", help=NORM_HELP),
    rope: Optional[bool] = typer.Option(None, "--rope/--no-rope", help=ROPE_HELP),
) -> None:
    """Print the schedule: nodes, instructions, waves, counters, buffer reuse, the validator's verdict."""
    from warpy.mega.encode import encode
    from warpy.mega.validate import validate

    if png:
        try:
            import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        except ImportError:
            raise WarpyError("--png needs matplotlib (pip install matplotlib)") from None
    s = _schedule(graph, tokens, arch, mode, glu=glu, norm=norm, rope=rope)
    for line in describe(s, every):
        typer.echo(line)
    enc = encode(s)
    typer.echo(f"encoded: {len(s.instrs)} instructions x 256 bytes, {len(enc.maps)} tensor maps")
    p = validate(s)
    typer.echo("validator: cannot hang, cannot race" if p.ok else "validator: " + "; ".join(p.lines(3)))
    if png:
        from warpy.mega.draw import draw

        typer.echo(draw(s, png))


def _decode(s, n, til) -> str:  # type: ignore[no-untyped-def]
    """A gemm's decode tiles (A's box shorter than a CTA's rows: `warpy.mega.tiling.gemm_stage`)."""
    from warpy.mega.encode import gemm_stage_of
    from warpy.mega.tiling import CLUSTER

    if n.kind != "gemm":
        return ""
    tm = til.extents[-2]
    ar, kb = gemm_stage_of(n, til, s.target.unit)
    if ar >= tm // CLUSTER[s.target.unit]:
        return ""
    return f" (decode: A boxes of {ar} rows, {kb} K box{'es' if kb != 1 else ''} a stage)"


def describe(s, every: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """The lines `warpy mega show` prints."""
    prog = s.program
    out = [f"{prog.graph.name}: {s.target.name} ({s.target.gpu}), {s.units} units of {s.cluster} CTA"
           f"{'s' if s.cluster > 1 else ''}, {s.mode} mode"]
    out.append("nodes:")
    for n, til in zip(prog.nodes, s.tilings):
        t = prog.tensors[n.out]
        ins = ", ".join(f"{prog.tensors[o.tensor].name}" + ("" if o.view.is_whole else "[view]") for o in n.operands)
        out.append(f"  {n.id:>3} {n.describe():<30} {t.name}{list(t.shape)} <- {ins}; "
                   f"{len(til.tiles)} tiles of {'x'.join(map(str, til.extents))}" + _decode(s, n, til))
    where = {}
    if s.queues is not None:
        for u, q in enumerate(s.queues):
            for k, i in enumerate(q):
                where[i] = (u, k)
    shown = s.instrs if every else s.instrs[:24]
    out.append(f"instructions ({len(s.instrs)}; unit.position, node, output box, waits counter/target"
               f"[s: before stores], arrives):")
    for i in shown:
        unit = f"{where[i.index][0]}.{where[i.index][1]}" if i.index in where else "-"
        waits = " ".join(f"c{w.counter}/{w.target}{'s' if w.before_store else ''}" for w in i.waits)
        arrives = " ".join(f"c{c}" for c in i.arrives)
        out.append(f"  {i.index:>6} u{unit:<8} n{i.node:<3} {prog.tensors[i.write.tensor].name}{_box(i.box)}"
                   f"  wait {waits or '-'}  arrive {arrives or '-'}")
    if len(shown) < len(s.instrs):
        out.append(f"  ... {len(s.instrs) - len(shown)} more (--all)")
    data = [c for c in s.counters if c.kind == "data"]
    reuse = [c for c in s.counters if c.kind == "reuse"]
    waiters = sum(len(i.waits) for i in s.instrs)
    out.append(f"waves: {s.waves} (estimated {s.makespan * 1e6:.1f} us)")
    out.append(f"counters: {len(s.counters)} ({len(data)} from access regions, {len(reuse)} for reuse), "
               f"{waiters} waits; targets {min((c.target for c in s.counters), default=0)}.."
               f"{max((c.target for c in s.counters), default=0)} arrivals a call")
    out.append(f"buffers: {len(s.buffers)} for {len(prog.tensors)} tensors; reuse: {len(s.reuses)}")
    for r in s.reuses[:8]:
        out.append(f"  buffer {r.buffer}: {prog.tensors[r.new].name} after {prog.tensors[r.old].name}, "
                   f"{r.distance} instructions behind, counter c{r.counter} (target {s.counters[r.counter].target})")
    if len(s.reuses) > 8:
        out.append(f"  ... {len(s.reuses) - 8} more")
    return out


@app.command("check")
def check_cmd(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    tokens: Optional[int] = typer.Option(None, "--tokens", "-t", help="Rows of x (T) for the named graphs."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
    mode: str = typer.Option("static", "--mode", help="static or dynamic."),
    vm: bool = typer.Option(False, "--vm", help="Also run the reference VM (two calls) and compare with numpy."),
    seed: int = typer.Option(0, "--seed", help="The VM's interleaving and the inputs."),
    glu: Optional[bool] = typer.Option(None, "--glu/--no-glu", help=GLU_HELP),
    norm: Optional[bool] = typer.Option(None, "--norm/--no-norm", help=NORM_HELP),
    rope: Optional[bool] = typer.Option(None, "--rope/--no-rope", help=ROPE_HELP),
) -> None:
    """Validate the schedule; with --vm run it on the reference VM against numpy on the whole graph."""
    from warpy.mega.validate import validate

    s = _schedule(graph, tokens, arch, mode, glu=glu, norm=norm, rope=rope)
    p = validate(s)
    for line in p.lines():
        typer.echo(line)
    typer.echo(f"{len(s.instrs)} instructions, {len(s.counters)} counters: "
               + ("cannot hang, cannot race" if p.ok else f"{len(p.items)} problems"))
    if not p.ok:
        raise typer.Exit(1)
    if vm:
        import numpy as np

        from warpy.mega.vm import run

        inputs = s.program.graph.random_inputs(seed)
        ref = s.program.reference(inputs)
        out = run(s, inputs, seed=seed, calls=2)
        if not out.ok:
            for line in out.hang + out.races:
                typer.echo(line)
            raise typer.Exit(1)
        same = all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
        typer.echo(f"reference VM, 2 calls, {out.steps} steps: "
                   + ("equal to numpy on the whole graph" if same else "DIFFERS from numpy"))
        if not same:
            raise typer.Exit(1)


@app.command("run")
def run_cmd(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    tokens: Optional[int] = typer.Option(None, "--tokens", "-t", help="Rows of x (T) for the named graphs."),
    units: int = typer.Option(0, "--units", help="CTAs (queues) of the launch; 0: every SM."),
    calls: int = typer.Option(3, "--calls", help="Calls in a row (the counters carry over, each call its epoch)."),
    deadline: float = typer.Option(10.0, "--deadline", help="Seconds a call may take before it is reported as a hang."),
    hang: bool = typer.Option(False, "--hang", help="Build the interpreter with a dropped arrive (a hang on "
                              "purpose): the run ends at the deadline with where each SM stands."),
    seed: int = typer.Option(0, "--seed", help="The inputs."),
    timeline: bool = typer.Option(False, "--timeline", help="Build the interpreter with each role stamping its "
                                  "steps (%globaltimer) and report the last call: each node's span, the steps "
                                  "per op kind, the latency of each dependency between SMs."),
    trace: Optional[str] = typer.Option(None, "--trace", help="With the timeline, also write it as a Chrome trace "
                                        "(JSON: chrome://tracing or ui.perfetto.dev)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...", help="The interpreter's "
                                         "configuration with fields set by hand (MegaConfig's, e.g. glu=0)."),
) -> None:
    """Run the graph on the GPU through the sm_90a megakernel interpreter: every output element of
    every call compared with the reference (numpy on the lowered graph). Exit status 1 on a
    difference or a hang (the hang's report says where each SM waits)."""
    from warpy.kernels.mega_bench import run_job
    from warpy.runtime.launcher import HangError

    if calls < 1 or deadline <= 0:
        raise WarpyError("--calls must be at least 1 and --deadline positive")
    try:
        ok = run_job(graph, tokens, units, calls, deadline, fault="drop-arrive" if hang else "", seed=seed,
                     echo=typer.echo, timeline=timeline, trace=trace, config=config)
    except HangError as e:
        typer.echo(str(e))
        # the kernel still runs and nothing here can stop it: leave without the interpreter's exit
        # (its destructors free device memory, which waits for the kernel: a frozen shell on the H200)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    raise typer.Exit(0 if ok else 1)


@app.command("bench")
def bench_cmd(
    workloads: Optional[list[str]] = typer.Argument(None, help="Workloads (default: the MLP ones): mlp3-1024 mlp3-1 "
                                                    "llama-1 llama-16 llama-128 llama-2048; by name: the decoder "
                                                    "stack llama-decoder-1k llama-decoder-1k-t16 llama-decoder-8k "
                                                    "llama-decoder-8k-t16."),
    iters: int = typer.Option(30, "--iters", help="Timed calls per method (median)."),
    seed: int = typer.Option(0, "--seed", help="The inputs."),
    compile_budget: float = typer.Option(150.0, "--compile-budget", help="Seconds of torch.compile after which "
                                         "the compiled rows are skipped."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Write every row to FILE.json."),
    png: Optional[str] = typer.Option(None, "--png", help="Draw the table to FILE.png (needs matplotlib)."),
    variants: bool = typer.Option(False, "--variants", help="Also time the Llama MLP with a stage left out "
                                  "(no rmsnorm; no up gemm and silu_mul) through warpy: each op kind's time."),
    timeline: Optional[str] = typer.Option(None, "--timeline", help="Also run each workload once with the "
                                           "roles' stamps: its report printed, its Chrome trace written to "
                                           "DIR/WORKLOAD.json."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...", help="warpy's rows with the "
                                         "interpreter's fields set by hand (MegaConfig's, e.g. glu_split=1)."),
) -> None:
    """The workloads on an sm_90 GPU through the megakernel and through torch eager, a CUDA graph of
    eager, torch.compile and torch.compile(mode="reduce-overhead"): same inputs, every output against
    an fp32 reference, per-call GPU time; a table last. Exit status 1 if any output is off."""
    from warpy.kernels.mega_bench import DEFAULT_WORKLOADS, bench_job

    if iters < 1:
        raise WarpyError("--iters must be at least 1")
    rows = bench_job(workloads or list(DEFAULT_WORKLOADS), iters, seed, compile_budget, json_out, png, variants,
                     echo=typer.echo, timeline=timeline, config=config)
    raise typer.Exit(1 if any(r.over for r in rows) else 0)


@app.command("ab")
def ab_cmd(
    workloads: list[str] = typer.Argument(..., help="Workloads (as `warpy mega bench` names them, e.g. "
                                          "llama-decoder-1k llama-decoder-8k llama-1)."),
    config: list[str] = typer.Option(..., "--config", metavar="KEY=VALUE,...", help="A configuration to time "
                                     "against the rule's (MegaConfig's fields, e.g. fresh=1); repeat for more."),
    rounds: int = typer.Option(3, "--rounds", help="Rounds, each timing every configuration in turn."),
    iters: int = typer.Option(20, "--iters", help="Replays of the CUDA graph of 8 calls a round (median)."),
    seed: int = typer.Option(0, "--seed", help="The inputs."),
) -> None:
    """Time configurations of the megakernel against the rule's on an sm_90 GPU: CUDA graphs of 8
    calls, interleaved rounds, every output against the fp32 reference; a table last (best and median
    round, best against the rule's). Exit status 1 if any output is off."""
    from warpy.kernels.mega_bench import ab_job

    rows = ab_job(workloads, config, rounds, iters, seed, echo=typer.echo)
    raise typer.Exit(1 if any(r.over for r in rows) else 0)


@app.command("mutate")
def mutate_cmd(
    graphs: Optional[list[str]] = typer.Argument(None, help="Graphs to mutate (default: mlp-small llama-small)."),
    count: int = typer.Option(200, "--count", help="Mutants per schedule (each graph static and dynamic)."),
    units: int = typer.Option(4, "--units", help="Units to schedule for (few: long queues and buffer reuse)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """The mutation suite: the validator against the reference VM on broken schedules; counts."""
    from warpy.mega.examples import load
    from warpy.mega.mutate import suite
    from warpy.mega.schedule import build

    scheds = [(f"{g}/{m}", build(load(g), mode=m, units=units)) for g in (graphs or ["mlp-small", "llama-small"])
              for m in ("static", "dynamic")]
    rep = suite(scheds, count, seed)
    for line in rep.lines():
        typer.echo(line)
    t = rep.total
    if t.missed or t.over_rejected or rep.valid_rejected:
        raise typer.Exit(1)


__all__ = ["app", "describe"]
