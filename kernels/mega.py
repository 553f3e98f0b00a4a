"""The megakernel kernel family: a `warpy.mega` graph run by one persistent interpreter launch.

- problem (`MegaProblem`): a graph (a named example of `warpy.mega.examples` or FILE.py), the
  tokens (rows of x) for the named graphs, the target, and the units (queues, one CTA each on
  sm_90a): 2 by default, so that the host checker, which runs the first and the last CTA of a
  launch, runs every CTA; 0 for every SM (what a run on the GPU uses);
- configuration (`MegaConfig`): the schedule's mode (static queues), and a seeded interpreter
  fault for the tests that show the checker catching it;
- `build`: the interpreter program for that launch (`kernels/mega_sm90.py`): its header declares the
  graph's buffers, the table of its tensor maps, the instruction queue, the counters, the status
  words and the call number;
- `bind`: the parameters from device memory by name (`buf<b>` each buffer of the schedule, `queue`,
  `counters`, `status`) and the call number;
- `expectation`: the inputs the checker fills the buffers with and `Program.reference` (what the
  reference VM computes tile by tile, exactly) to compare the outputs with.

`warpy check mega GRAPH [TOKENS]` and `warpy hb mega GRAPH` go through the generic path;
`check_launch` is the same check with each problem message naming the SM, the role and the
instruction it was found at (and a counter wait nothing will meet reported as the hang it is).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import attrs
import numpy as np

from warpy.check.expect import Verdict
from warpy.errors import WarpyError
from warpy.memo import forgettable
from warpy.isa.program import Program
from warpy.layout.tma import TmaBox
from warpy.mega.fields import OPCODES
from warpy.mega.schedule import Counter
from warpy.numeric import from_bits, to_bits
from warpy.target import target

from .family import checked_overrides
from .mega_sm90 import SM90_FAULTS as FAULTS, ROLE_CODES, STATUS_ROLE_WORDS, STATUS_WORDS, Launch
from .mega_sm90 import build as build_sm90
from .mega_common import BACKOFF_FIRST_NS, BACKOFF_MAX_NS

#: the targets with an interpreter: sm_90a (`kernels/mega_sm90.py`) and sm_100a (`kernels/mega_sm100.py`)
ARCHS = ("sm_90a", "sm_100a")

#: units `choose` schedules for: the checker runs the first and the last CTA, so every one
CHECK_UNITS = 2
#: a buffer the launch owns (not an input) starts as this bf16 pattern (a NaN), so that an element
#: read before it is written cannot pass for a value
POISON = 0x7FC1


#: above this many tile steps (a gemm tile's K stages, 1 for any other tile) on CHECK_UNITS units,
#: `warpy check mega GRAPH` without UNITS checks the launch on every SM instead (the checker runs its
#: first and last CTA, the others' counters and data modelled): every CTA of mlp3 on 2 units would
#: be hours of the checker
CHECK_STEPS = 1000


def check_units(problem: "MegaProblem") -> int:
    """The units `warpy check mega` uses when none are given: CHECK_UNITS (every CTA simulated) for
    graphs of at most CHECK_STEPS tile steps, else 0 (every SM; the first and last CTA simulated)."""
    from warpy.mega.schedule import build as schedule
    from warpy.mega.tiling import gemm_a_rows

    if problem.arch != "sm_90a":
        return CHECK_UNITS
    s = schedule(problem.load(), problem.arch, "static", units=CHECK_UNITS)
    steps = 0
    for ins in s.instrs:
        node, t = s.program.nodes[ins.node], s.tilings[ins.node]
        steps += -(-s.program.tensors[node.operands[0].tensor].shape[-1] // t.k_step) if node.kind == "gemm" else 1
    return CHECK_UNITS if steps <= CHECK_STEPS else 0


def _target_name(value: str) -> str:
    return target(value).name


@attrs.frozen
class MegaProblem:
    """A graph to run: a named example (`warpy.mega.examples`) or FILE.py, the tokens of the named
    graphs (None: the graph's own), the target. Refused in one line when it cannot run."""

    graph: str
    tokens: Optional[int] = None
    arch: str = attrs.field(default="sm_90a", converter=_target_name)
    units: int = CHECK_UNITS

    def __attrs_post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise WarpyError(f"the megakernel interpreter exists for {' and '.join(ARCHS)}, not {self.arch}")
        if self.tokens is not None and (isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1):
            raise WarpyError(f"tokens must be a positive integer, not {self.tokens!r}")
        if isinstance(self.units, bool) or not isinstance(self.units, int) or self.units < 0:
            raise WarpyError(f"units must be 0 (every SM) or a positive integer, not {self.units!r}")
        self.load()  # an unknown graph is refused here

    @property
    def n_units(self) -> int:
        from warpy.mega.tiling import units

        return self.units or units(target(self.arch))

    def load(self) -> Any:
        from warpy.mega.examples import load

        return load(self.graph, self.tokens)

    def __str__(self) -> str:
        return (f"{self.graph}" + (f" T={self.tokens}" if self.tokens else "") + f" {self.arch} "
                + (f"{self.units} units" if self.units else "every SM"))


FENCES = ("each", "once")


@attrs.frozen
class MegaConfig:
    """The schedule's mode (static queues only on sm_90a for now), `fence`: each tensor map's
    descriptor fenced before each instruction's copies through it ("each") or once per CTA and role
    ("once": a bitmap in shared memory), and `fault`: an interpreter built with a seeded bug
    (`kernels.mega_sm90.FAULTS`; "" none)."""

    mode: str = "static"
    fence: str = "each"
    fault: str = ""
    #: the roles stamp each instruction's steps with %globaltimer (`warpy mega run --timeline`)
    timeline: bool = False
    #: sm_90a: a gemm whose weight nothing in the launch writes prefetches the weight's stages past
    #: the ones it copies before its waits into L2, before its waits (`Gemm.load_early`). Off: on the
    #: H200 it made the Llama MLP slower at every T (T = 1: 906 µs against 845; docs/performance.md)
    prefetch: bool = False
    #: sm_90a: SwiGLU's gate and up gemms and their silu_mul lowered to one gemm with two weights
    #: (`warpy.mega.lower`, `Node.glu`): a dependency level less a layer. The rule (`choose`) turns it
    #: on for sm_90a: on the H200 the Llama MLP ran 11-15% faster with it at T = 1, 16 and 128
    #: (docs/performance.md); `--config glu=0` runs the gemms unfused
    glu: bool = False
    #: sm_90a: an rmsnorm of at most `warpy.mega.lower.NORM_ROWS` rows fused into the gemms that read
    #: it (`warpy.mega.lower`, `Node.norm`): each decode tile normalises the rows of A it loads, a
    #: dependency level less each time (`--config norm=0` runs the rmsnorm as a node)
    norm: bool = False
    #: the ceiling (ns, a power of two from BACKOFF_FIRST_NS to BACKOFF_MAX_NS) of the NANOSLEEP
    #: back-off between two polls of a counter that has not reached its target
    #: (`InterpBase.counter_wait`); the wait writes its status words for the host once the back-off
    #: reaches BACKOFF_MAX_NS whatever the ceiling. The rule (`backoff_default`) takes 128 on sm_90a
    backoff: int = BACKOFF_MAX_NS
    #: sm_90a: the fused gate/up gemm's two warpgroups split each stage's k16 steps (alternate ones)
    #: rather than its columns: each a 64 x tile_n accumulator pair, half as many wgmmas of twice the
    #: N, the partial sums added in the epilogue (`kernels.mega_gemm.k_split`). Off: on the H200 the
    #: Llama MLP ran 1.5 % faster with it (T = 1, 603 -> 594 µs) and the decoder stack's interpreter
    #: spills with it (refused by the build); the fused tiles are bound by the HBM (docs/performance.md)
    glu_split: bool = False
    #: sm_90a: decode attention whose caches' last rows were just appended runs two partial nodes, one
    #: over the old rows (which nothing in the launch writes: its K and V copies are early, issued
    #: before the tile's counter waits) and one over the appended rows (`warpy.mega.lower.fresh_rows`).
    #: The rule (`fresh_default`) turns it on for sm_90a since the projections write K and V into the
    #: caches themselves (`rope`); before, the decoder stack ran 1k 1165.6 -> 1170.9 µs, 8k 1285.2 ->
    #: 1275.8 with it (the appended rows' tile ended the level; docs/performance.md)
    fresh: bool = False
    #: sm_90a: a decode projection viewed as heads writes them itself (`warpy.mega.lower(rope=True)`):
    #: roped (its rope's tables in the epilogue: q, and k into its cache's rows) or as they are (v
    #: into its cache's rows): no rope or copy node after the projections, a dependency level less a
    #: decoder layer. The rule (`rope_default`) turns it on for sm_90a
    rope: bool = False

    def describe(self) -> str:
        f = f", seeded fault {self.fault}" if self.fault else ""
        t = ", a timeline of each instruction's steps" if self.timeline else ""
        t += ", the weights prefetched into L2" if self.prefetch else ""
        t += ", gate/up gemms fused with their silu_mul" if self.glu else ""
        t += ", decode rmsnorms fused into their gemms" if self.norm else ""
        t += f", counter polls backing off up to {self.backoff} ns" if self.backoff != BACKOFF_MAX_NS else ""
        t += ", the fused gate/up gemm's K steps split between its warpgroups" if self.glu_split else ""
        t += ", decode attention's old and appended rows as two partial nodes" if self.fresh else ""
        t += ", the rope and the cache appends in the projections' epilogues" if self.rope else ""
        return (f"sm_90a megakernel interpreter: {self.mode} queues, 7 pages of 32 KiB, two instruction slots, "
                f"descriptors fenced {'once a CTA' if self.fence == 'once' else 'each instruction'}{f}{t}")


def choose(problem: MegaProblem) -> MegaConfig:
    """The rule: static queues, descriptors fenced each instruction, SwiGLU fused where the target
    has the fused body (sm_90a), the counter polls' back-off ceiling the target's (`backoff_default`)."""
    return MegaConfig(glu=glu_default(problem.arch), norm=norm_default(problem.arch), backoff=backoff_default(problem.arch),
                      rope=rope_default(problem.arch), fresh=fresh_default(problem.arch))


def fresh_default(arch: str) -> bool:
    """Whether the rule runs decode attention's old and appended cache rows as two partial nodes
    (`MegaConfig.fresh`) on `arch`: on sm_90a, where, once the projections wrote K and V into the
    caches themselves (`rope`), the H200 ran the Llama decoder stack 0.2-0.6 % faster with it (two runs
    of CUDA graphs of 8 calls: 1k 1105.8 -> 1099.6 µs, 8k 1186.2 -> 1183.8 and 1185.9 -> 1181.8;
    docs/performance.md)."""
    return arch == "sm_90a"


def rope_default(arch: str) -> bool:
    """Whether the rule lets decode projections write their heads (roped, or into a cache's rows;
    `MegaConfig.rope`) on `arch` (the host's `warpy mega show` and `check` follow it): on sm_90a, where
    the H200 ran the Llama decoder stack 4 % faster with it (context 1k 1157.5 -> 1110.1 µs, 8k 1238.7
    -> 1192.2; CUDA graphs of 8 calls, outputs within the same tolerance; docs/performance.md)."""
    return arch == "sm_90a"


def norm_default(arch: str) -> bool:
    """Whether the rule fuses a decode rmsnorm into the gemms after it on `arch` (the host's `warpy
    mega show` and `check` follow it): on sm_90a, where the H200 ran the Llama decoder stack 9-10 %
    faster with it (context 8k 1575 -> 1430 µs, 1k 1445 -> 1306) and the Llama MLP 7 % (T = 1 701 ->
    652, T = 16 708 -> 656), CUDA graphs of calls, outputs within the same tolerance
    (docs/performance.md)."""
    return arch == "sm_90a"


def backoff_default(arch: str) -> int:
    """The counter polls' back-off ceiling the rule takes, ns: 128 on sm_90a, where a dependency
    between SMs is a poll of a counter in L2 and the waiter had backed off to 1 µs before the level
    it waits for ended (on the H200, 2026-12-02, CUDA graphs of calls: the Llama decoder stack at
    context 8k 1660 -> 1554 µs, 1k 1538 -> 1433, the Llama MLP at T = 1 730 -> 703; 32 and 64 ns within
    1 % of 128; docs/performance.md); BACKOFF_MAX_NS elsewhere (sm_100a: not measured)."""
    return 128 if arch == "sm_90a" else BACKOFF_MAX_NS


def glu_default(arch: str) -> bool:
    """Whether the rule fuses SwiGLU's gate and up gemms on `arch` (the host's `warpy mega show` and
    `check` follow it, so that they show what runs)."""
    return arch == "sm_90a"


def configure(problem: MegaProblem, overrides: Union[str, Mapping[str, object], None]) -> MegaConfig:
    cfg = choose(problem)
    items = checked_overrides(cfg, overrides)
    out = attrs.evolve(cfg, **items)  # type: ignore[arg-type]
    if problem.arch == "sm_100a":
        from .mega_sm100 import FAULTS as FAULTS_100

        if out.mode not in ("static", "dynamic"):
            raise WarpyError(f"mode {out.mode!r} is not static or dynamic (cluster launch control)")
        if out.fault and out.fault not in FAULTS_100:
            raise WarpyError(f"fault {out.fault!r} is not one of {', '.join(FAULTS_100)}")
        if out.timeline:
            raise WarpyError("the timeline is the sm_90a interpreter's (sm_100a runs on no GPU here to time)")
        if out.glu:
            raise WarpyError("glu: the fused gate/up gemm is the sm_90a interpreter's; sm_100a runs them unfused")
        if out.norm:
            raise WarpyError("norm: the rmsnorm fused into its gemms is the sm_90a interpreter's; sm_100a runs it as a node")
        if out.backoff != cfg.backoff:
            raise WarpyError("backoff: the poll back-off's ceiling is the sm_90a interpreter's (sm_100a runs on no GPU here)")
        if out.glu_split:
            raise WarpyError("glu_split: the fused gate/up gemm is the sm_90a interpreter's; sm_100a runs them unfused")
        if out.fresh:
            raise WarpyError("fresh: decode attention's old and appended rows as two partial nodes is the sm_90a "
                             "interpreter's; sm_100a runs one")
        if out.rope:
            raise WarpyError("rope: the rope fused into its projection is the sm_90a interpreter's; sm_100a runs it "
                             "as a node")
        return out
    if out.mode != "static":
        raise WarpyError(f"mode {out.mode!r}: the sm_90a interpreter runs static queues (dynamic mode is not written yet)")
    if out.fault and out.fault not in FAULTS:
        raise WarpyError(f"fault {out.fault!r} is not one of {', '.join(FAULTS)}")
    if out.fence not in FENCES:
        raise WarpyError(f"fence {out.fence!r} is not one of {', '.join(FENCES)}")
    if not BACKOFF_FIRST_NS <= out.backoff <= BACKOFF_MAX_NS or out.backoff & (out.backoff - 1):
        raise WarpyError(f"backoff={out.backoff}: the poll back-off's ceiling is a power of two from "
                         f"{BACKOFF_FIRST_NS} to {BACKOFF_MAX_NS} ns")
    return out


@attrs.frozen
class Plan:
    """A problem's schedule and encoding for one configuration, and what the interpreter needs."""

    problem: MegaProblem
    config: MegaConfig
    schedule: Any
    encoded: Any
    launch: Launch

    @property
    def per_unit(self) -> np.ndarray:
        return np.asarray(self.encoded.per_unit(self.schedule), dtype=np.uint32)

    @property
    def queue_words(self) -> np.ndarray:
        """The `queue` parameter's words: (waves, units, 64) in static mode, the instructions in
        global order (dynamic mode: cluster launch control hands out their indices); on sm_100a with
        the stop instruction appended (`kernels.mega_sm100.with_stop`)."""
        words = np.asarray(self.encoded.words, dtype=np.uint32) if self.schedule.queues is None else self.per_unit
        if self.problem.arch == "sm_100a":
            from .mega_sm100 import with_stop

            return np.asarray(with_stop(words))
        return words

    def buffer_bytes(self, b: int) -> int:
        return int(self.schedule.buffers[b].nbytes)


@lru_cache(maxsize=32)
def plan(problem: MegaProblem, config: MegaConfig) -> Plan:
    """Schedule, encode and check that every instruction has a body (one-line refusals)."""
    from warpy.mega.encode import decode, encode
    from warpy.mega.schedule import build as schedule
    from warpy.mega.tiling import gemm_a_rows, gemm_pair_a_rows

    from .mega_ops import bodies

    table: dict[int, Any] = dict(bodies(rope=True))
    if problem.arch == "sm_100a":
        from .mega_sm100_ops import bodies as sm100_bodies

        table = sm100_bodies()
    units = problem.n_units
    s = schedule(problem.load(), problem.arch, config.mode, units=units, glu=config.glu, norm=config.norm,
                 fresh=config.fresh, rope=config.rope)
    enc = encode(s)
    names = {v: k for k, v in OPCODES.items()}
    for ins, f in zip(s.instrs, decode(enc.words)):
        body = table.get(f["opcode"])
        node = s.program.nodes[ins.node]
        if body is None:
            raise WarpyError(f"{problem.graph}: instruction {ins.index} ({node.describe()}) is a {names[f['opcode']]}, "
                             f"which the {problem.arch} interpreter has no body for yet")
        why = body.refuse(f)
        if why is not None:
            raise WarpyError(f"{problem.graph}: instruction {ins.index} ({node.describe()}): {why}")
    name = re.sub(r"\W", "_", f"mega_{target(problem.arch).short}_{problem.graph.rsplit('/', 1)[-1].removesuffix('.py')}"
                  f"_t{problem.tokens or 0}_u{units}" + (f"_{config.fault}" if config.fault else "")
                  + ("_fence1" if config.fence == "once" else "") + ("_tl" if config.timeline else "")
                  + ("_glu" if any(n.glu for n in s.program.nodes) else "")  # (a graph with nothing to fuse: no suffix)
                  + ("_norm" if any(n.norm for n in s.program.nodes) else "")
                  + ("_rope" if any(n.rope for n in s.program.nodes) else ""))
    maps = tuple((m.index, m.buffer, m.offset, m.tma) for m in enc.maps)
    bufs = tuple(sorted({(m.buffer, s.buffers[m.buffer].nbytes) for m in enc.maps}))
    gemms = [(n, t) for n, t in zip(s.program.nodes, s.tilings) if n.kind == "gemm"]
    if problem.arch == "sm_100a":
        # a code path per (tile_m, tile_n, rows of a CTA's A box: `gemm_pair_a_rows`, short for decode)
        tiles100 = tuple(sorted({(t.extents[-2], t.extents[-1],
                                  gemm_pair_a_rows(t.extents[-2], t.extents[-1], n.operands[0].view.shape[0]))
                                 for n, t in gemms}))
        launch100 = Launch(name, units, max(s.waves, 1), len(s.counters), maps, bufs, config.fault or None, ctas=2,
                           mode=config.mode, instructions=len(s.instrs), gemm_tiles=tiles100)
        return Plan(problem, config, s, enc, launch100)
    # sm_90a: a code path per (tile_m, tile_n, rows of A's box)
    # (tile_m, tile_n, rows of A's box, 1): a fused gate/up gemm's path (`Node.glu`: two weights);
    # (.., glu, 1): a normed gemm's (`Node.norm`); (.., glu, norm, 1): a roped gemm's (`Node.rope`)
    tiles = tuple(sorted({(t.extents[-2], t.extents[-1],
                           gemm_a_rows(t.extents[-2], t.extents[-1], n.operands[0].view.shape[0], 2 if n.glu else 1))
                          + ((int(n.glu), int(n.norm), 1) if n.rope else (int(n.glu), 1) if n.norm else (1,) if n.glu
                             else ()) for n, t in gemms}))
    launch = Launch(name, units, max(s.waves, 1), len(s.counters), maps, bufs, config.fault or None,
                    gemm_tiles=tiles, fence_once=config.fence == "once",
                    instructions=len(s.instrs), timeline=config.timeline, prefetch=config.prefetch,
                    glu_split=config.glu_split, rope=any(n.kind == "rope" for n in s.program.nodes), backoff_ns=config.backoff)
    return Plan(problem, config, s, enc, launch)


forgettable(plan.cache_clear)


def build(problem: MegaProblem, config: Optional[MegaConfig] = None) -> Program:
    pl = plan(problem, config if config is not None else choose(problem))
    if problem.arch == "sm_100a":
        from .mega_sm100 import build as build_sm100

        return build_sm100(pl.launch)
    return build_sm90(pl.launch)


# -- the data: inputs, the reference, the comparison ------------------------------------------------


def inputs(pl: Plan, seed: int = 0) -> dict[str, np.ndarray]:
    """The graph's inputs (values of bf16, float32 arrays)."""
    return {k: np.asarray(v, dtype=np.float32) for k, v in pl.schedule.program.graph.random_inputs(seed).items()}


def buffer_images(pl: Plan, values: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Each buffer's bytes at launch (uint16 words): the inputs where they live, the poison elsewhere."""
    prog, s = pl.schedule.program, pl.schedule
    out = {b: np.full(max(pl.buffer_bytes(b) // 2, 1), POISON, dtype=np.uint16) for b, _ in pl.launch.buffers}
    for t in prog.tensors:
        b = s.buffer_of[t.id]
        if t.kind in ("input", "state") and b in out:
            out[b][: t.size] = to_bits(np.asarray(values[t.name], dtype=np.float32).ravel(), t.dtype)
    return out


def outputs_of(pl: Plan, images: Mapping[int, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs (float32 arrays) from the buffers' bytes after a run."""
    prog, s = pl.schedule.program, pl.schedule
    out = []
    for i in prog.outputs:
        t = prog.tensors[i]
        raw = np.asarray(images[s.buffer_of[i]]).view(np.uint16)[: t.size]
        out.append(np.asarray(from_bits(raw, t.dtype), dtype=np.float32).reshape(t.shape))
    return out


def compare(pl: Plan, got: Sequence[np.ndarray], want: Sequence[np.ndarray],
            values: Mapping[str, np.ndarray]) -> tuple[int, int, list[str]]:
    """(elements compared, elements that differ, one line per output that differs), the run's
    inputs `values`: outputs of elementwise chains must equal the reference; those fed by an fp32 sum
    (gemm, rmsnorm) or MUFU math within a few bf16 steps of their magnitude or their condition
    (`kernels.mega_common.compare_close`: the tensor core's and the checker's summation orders are
    not the float64 reference's), on both targets."""
    from .mega_common import compare_close

    prog = pl.schedule.program
    n, bad, _, msgs = compare_close(prog, prog.outputs, got, want, values)
    return n, bad, msgs


def all_tensors(prog: Any, values: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor of a lowered program as `Program.reference` computes it (inputs and each node's
    output), by tensor id."""
    arrays: dict[int, np.ndarray] = prog.run(values)
    return arrays


class MegaExpectation:
    """What the checker needs (`warpy.check.expect`): the queue's words, the inputs in their buffers
    (poison in the others), zero counters (call 1); the outputs must equal `Program.reference`
    (within `compare`'s few bf16 steps where an fp32 sum or MUFU math feeds them), and at the end
    every counter must hold its arrivals for the call."""

    def __init__(self, pl: Plan, seed: int = 0) -> None:
        self.pl = pl
        self.values = inputs(pl, seed)
        self._unit_of: Optional[dict[int, int]] = None  # (`outside_share`) instruction -> its unit
        self._counter: dict[int, Counter] = {}
        self.images = buffer_images(pl, self.values)
        #: the checker runs the first and last CTA only (sm_90a, more than 2 units): the others'
        #: counters are modelled by the checker (raised flags) and their data here: every buffer that
        #: holds one tensor starts with that tensor's reference values, so the simulated CTAs read
        #: what the others would have written; only what the simulated CTAs wrote is compared
        self.partial = pl.problem.arch == "sm_90a" and pl.launch.units > 2
        if self.partial:
            s = pl.schedule
            arrays = all_tensors(s.program, self.values)
            holders: dict[int, list[int]] = {}
            for t in s.program.tensors:
                holders.setdefault(s.buffer_of[t.id], []).append(t.id)
            for b, ts in holders.items():
                t = s.program.tensors[ts[0]]
                if len(ts) == 1 and t.kind not in ("input", "state") and b in self.images:
                    bits = np.asarray(to_bits(np.asarray(arrays[t.id], dtype=np.float32).ravel(), t.dtype))
                    words = bits.view(np.uint16)  # (fp32: two words an element)
                    self.images[b][: words.size] = words

    @property
    def resident(self) -> Optional[int]:
        """The SMs the checker's machine has (`warpy.check.report.check_program`): on sm_100a the
        launch's units' clusters, so that cluster launch control hands the rest of a dynamic grid
        (a cluster an instruction) to them; None: the target's."""
        return 2 * self.pl.launch.units if self.pl.problem.arch == "sm_100a" else None

    def configured(self, config: MegaConfig) -> "MegaExpectation":
        """The expectation of the program `config` builds (its queue: static or dynamic)."""
        return MegaExpectation(plan(self.pl.problem, config))

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        if source == "queue":
            return self.pl.queue_words.ravel()
        m = re.fullmatch(r"buf(\d+)", source)
        if m and int(m.group(1)) in self.images:
            img = self.images[int(m.group(1))]
            out = np.zeros(nbytes // 2, dtype=np.uint16)
            out[: img.size] = img[: out.size]
            return out
        return None

    def outside_share(self, source: str, offset: int, want: int, ctas: Sequence[int]) -> Optional[int]:
        """What the units other than `ctas` add to a counter by the time its waiter may pass on
        `want` (target x call): one arrival an instruction of theirs that arrives on it, each call
        (`warpy.check.flags`). sm_90a static queues only (a CTA is a unit); None elsewhere."""
        s = self.pl.schedule
        if source != "counters" or offset % 4 or s.queues is None or self.pl.problem.arch != "sm_90a":
            return None
        if self._unit_of is None:
            self._unit_of = {i: u for u, q in enumerate(s.queues) for i in q}
            self._counter = {c.id: c for c in s.counters}
        c = self._counter.get(offset // 4)
        if c is None or c.target <= 0 or want % c.target or c.target != len(c.members):
            return None
        sim = set(ctas)
        return sum(1 for i in c.members if self._unit_of[i] not in sim) * (want // c.target)

    def compare(self, run: Any) -> Verdict:
        pl = self.pl
        images = {b: run.gmem[f"buf{b}"] for b, _ in pl.launch.buffers}
        got = outputs_of(pl, images)
        want = pl.schedule.program.reference(self.values)
        if self.partial:  # the elements the simulated CTAs wrote (both bytes of each)
            s = pl.schedule
            masks = []
            for i in s.program.outputs:
                t = s.program.tensors[i]
                w = np.asarray(run.gwritten[f"buf{s.buffer_of[i]}"])[: 2 * t.size].reshape(-1, 2).all(axis=1)
                masks.append(w.reshape(t.shape))
            n = int(sum(int(m.sum()) for m in masks))
            if s.reuses:
                # the others' data is modelled only in buffers that hold one tensor: where a buffer is
                # reused, the simulated CTAs read poison in place of what the others wrote, and what
                # they compute from it is not compared (every CTA simulated compares it)
                return Verdict(0, 0, messages=[] if n else ["values: the simulated CTAs wrote no output element"],
                               data={f"out{i}": g for i, g in enumerate(got)}, unmodelled=n)
            # (an element no simulated CTA wrote compares as the reference's own)
            _, bad, msgs = compare(pl, [np.where(m, g, w) for g, m, w in zip(got, masks, want)], want, self.values)
            msgs = [m + " (of the elements the first and last CTA wrote)" for m in msgs]
            if n == 0:
                msgs.append("values: the simulated CTAs wrote no output element")
            return Verdict(n, bad, 0, msgs, {f"out{i}": g for i, g in enumerate(got)})
        n, bad, msgs = compare(pl, got, want, self.values)
        counters = np.asarray(run.gmem["counters"]).view(np.uint32)
        for c in pl.schedule.counters:
            have = int(counters[c.id]) if c.id < counters.size else 0
            if have != c.target:
                msgs.append(f"values: counter {c.id} holds {have} after the call, not its {c.target} arrivals")
        raised = getattr(getattr(run, "flags", None), "raised_outside", 0)
        if raised:
            msgs.append(f"values: {raised} counter waits were met by no simulated CTA (every CTA is simulated: on "
                        f"the GPU they hang)")
        return Verdict(n, bad, 0, msgs, {f"out{i}": g for i, g in enumerate(got)})


def expectation(problem: MegaProblem, config: Optional[MegaConfig] = None) -> MegaExpectation:
    return MegaExpectation(plan(problem, config if config is not None else choose(problem)))


# -- binding ----------------------------------------------------------------------------------------


def bind(header: Any, memory: Mapping[str, Any], call: int, *, encode: Optional[Callable[..., Any]] = None,
         upload: Optional[Callable[[bytes], Any]] = None) -> list[Any]:
    """The interpreter's parameters by name: `buf<b>` each buffer's memory, `queue` (the per-unit
    words), `counters` (zero before call 1), `status` (host-visible words), and `call` (1, 2, ...:
    the counters are never reset, a wait of call c waits for target x c). The table of maps is
    encoded over the buffers and uploaded once per distinct binding (`warpy.runtime.bind.map_table`)."""
    from warpy.runtime.bind import bind_params, encode_cached

    kw: dict[str, Any] = {"encode": encode or encode_cached}
    if upload is not None:
        kw["upload"] = upload
    return bind_params(header, memory, {"call": call}, **kw)


@attrs.frozen
class MegaFamily:
    """The megakernel family (`warpy.kernels.family.KernelFamily`)."""

    name: str = "mega"

    def problem(self, dims: Sequence[Union[int, str]], *, arch: str, **options: Any) -> MegaProblem:
        """`mega GRAPH [TOKENS [UNITS]]` from the command line (other options, such as a GEMM's output
        type, do not apply and are ignored)."""
        if not 1 <= len(dims) <= 3 or not isinstance(dims[0], str):
            raise WarpyError("mega takes a graph (a named example or FILE.py), then optionally its tokens and "
                             "units: warpy check mega ew-small [6 [2]]")
        nums = list(dims[1:])
        for what, v in zip(("tokens", "units"), nums):
            if not isinstance(v, int):
                raise WarpyError(f"mega's {what} must be an integer, not {v!r}")
        tokens = int(nums[0]) if nums else None
        units = int(nums[1]) if len(nums) > 1 else check_units(MegaProblem(dims[0], tokens or None, arch=arch))
        return MegaProblem(dims[0], tokens or None, arch=arch, units=units)

    def choose(self, problem: MegaProblem) -> MegaConfig:
        return choose(problem)

    def configure(self, problem: MegaProblem, overrides: Union[str, Mapping[str, object], None]) -> MegaConfig:
        return configure(problem, overrides)

    def build(self, problem: MegaProblem, config: Any = None) -> Program:
        return build(problem, config)

    def bind(self, header: Any, problem: MegaProblem, memory: Mapping[str, Any], *, scratch: Any = None,
             encode: Optional[Callable[..., Any]] = None) -> list[Any]:
        return bind(header, memory, int(memory.get("call", 1)), encode=encode)

    def expectation(self, problem: MegaProblem) -> MegaExpectation:
        return expectation(problem)


FAMILY = MegaFamily()


# -- the check with each message placed in the megakernel ---------------------------------------------


ROLE_OF_WARP = {0: "controller", 1: "loader", 2: "storer", 3: "recycler"}
SLOW_QUANTUM = 4  # instructions a turn for the warps of the CTA `check_launch` slows down


def where(pl: Plan, cta: int, warp: int, regs: Mapping[str, Any]) -> str:
    """`SM c, the loader, at instruction N (wave k: node n, op)` for a warp of the interpreter."""
    if pl.problem.arch == "sm_100a":
        from .mega_sm100 import where as where_100

        return where_100(pl, cta, warp, regs)
    role = ROLE_OF_WARP.get(warp, "consumers")
    it = regs.get("it")
    if it is None:
        return f"SM {cta}, the {role}, before its first instruction"
    k = int(np.asarray(it).ravel()[0]) if isinstance(it, np.ndarray) else int(it)
    q = pl.per_unit
    if not 0 <= k < q.shape[0]:
        return f"SM {cta}, the {role}, after its last instruction"
    from warpy.mega.fields import unpack

    f = unpack([int(x) for x in q[k, cta]])
    if f["opcode"] == 0 and f["index"] == 0 and not f["n_operands"] and (k > 0 or cta > 0):
        return f"SM {cta}, the {role}, at wave {k} (a noop: its queue has ended)"
    node = pl.schedule.program.nodes[f["node"]]
    return f"SM {cta}, the {role}, at instruction {f['index']} (wave {k}: node {node.id} {node.describe()})"


def check_launch(problem: MegaProblem, config: Optional[MegaConfig] = None, *, values: bool = True,
                 coloured: bool = True, seed: int = 0, slow: Optional[int] = None) -> Any:
    """Check the interpreter on the problem's launch on the host (every CTA when units <= 2), each
    problem message followed by where it was found: the SM, the role and the megakernel instruction
    of the warp that found it; a counter wait that no CTA meets (the rest of the grid would raise
    it, but every CTA is simulated) is reported as a hang naming the waiter. `slow`: run that CTA's
    warps a few instructions a turn (the others a few hundred), so that the other CTAs' instructions
    overtake its: a wait that passes before its producers arrived then reads what they have not
    written yet (the checker runs one interleaving; this picks a hostile one)."""
    import time

    from warpy.check.machine import Machine
    from warpy.check.report import Report
    from warpy.check.state import BLOCKED, FlagWait

    cfg = config if config is not None else choose(problem)
    pl = plan(problem, cfg)
    prog = build(problem, cfg)
    expect = MegaExpectation(pl, seed)
    named = prog.kernel()
    t0 = time.monotonic()
    # sm_100a: a machine of `units` clusters (cluster launch control hands the rest of a dynamic
    # grid to them)
    m = Machine(named, values=values, expect=expect, resident=expect.resident)
    current: dict[str, Any] = {}
    add = m.problems.add

    def annotated(kind: str, msg: str) -> None:
        w = current.get("w")
        if w is not None and kind != "values":
            msg = f"{msg} [found by {where(pl, w.cta.linear, w.wid, w.regs)}]"
        add(kind, msg)

    m.problems.add = annotated  # type: ignore[method-assign]
    run_warp = m.launch.run_warp

    def tracked(mm: Any, w: Any, quantum: int) -> int:
        current["w"] = w
        return run_warp(mm, w, SLOW_QUANTUM if w.cta.linear == slow else quantum)

    m.launch.run_warp = tracked  # type: ignore[method-assign,assignment]
    raise_outside = m.flags.raise_outside
    snapshots: dict[str, np.ndarray] = {}

    def hang(mm: Any, warps: list[Any]) -> bool:
        current["w"] = None
        if raise_outside(mm, warps):  # a partial run: the rest of the grid has arrived, the run goes on
            return True
        words = np.asarray(m.gmem["counters"]).view(np.uint32) if values else None
        if values and "hang_status" not in snapshots:  # the status words as a dump on the GPU would read them
            snapshots["hang_status"] = np.asarray(m.gmem["status"]).view(np.uint32).copy()
            snapshots["hang_counters"] = np.asarray(words).copy()
        for w in warps:
            if w.state == BLOCKED and isinstance(w.block, FlagWait):
                addr = int(w.block.addrs[0])
                src, off = m.global_memory.source(addr)
                seen = int(words[off // 4]) if words is not None else m.global_memory.shadow.get(addr, 0)
                want = w.regs.get("wait_want", "?")
                want = int(np.asarray(want).ravel()[0]) if not isinstance(want, str) else want
                add("protocol", f"hang: {where(pl, w.cta.linear, w.wid, w.regs)} waits on counter {off // 4} for "
                                f"{want} arrivals and has {seen}; no CTA will arrive")
        return False

    m.flags.raise_outside = hang  # type: ignore[method-assign,assignment]
    m.run()
    current["w"] = None
    rep = Report(named.header.kernel, m.derived.checked, m.problems, m.steps, time.monotonic() - t0,
                 stores=m.global_memory.stores_seen, uses_pdl=m.code.uses_pdl)
    rep.values_on = values
    if values:
        verdict = expect.compare(m)
        rep.values_checked, rep.values_wrong, rep.data = verdict.checked, verdict.wrong, {**verdict.data, **snapshots}
        rep.values_partial, rep.values_unmodelled = verdict.partial, verdict.unmodelled
        for vmsg in verdict.messages:
            m.problems.add("values", vmsg)
    if coloured:  # the coloured text must compute what the named one does, line for line
        mc = Machine(prog.coloured(), values=False, expect=expect, resident=expect.resident)
        mc.run()
        for wa, wb in zip(m.warps, mc.warps):
            for k in range(max(len(wa.trace), len(wb.trace))):
                va = wa.trace[k][1] if k < len(wa.trace) else None
                vb = wb.trace[k][1] if k < len(wb.trace) else None
                if va != vb:
                    line = (wa.trace[k] if k < len(wa.trace) else wb.trace[k])[0] + 1
                    m.problems.add("coloured", f"{wa.cta.name} warp {wa.wid}, line {line}: the named text computes "
                                               f"{va}, the coloured one {vb}")
                    break
        for kind, msgs in mc.problems.msgs.items():
            for msg in msgs:
                if kind != "wrong" and msg not in m.problems.msgs[kind]:
                    m.problems.add(kind, "coloured: " + msg)
    return rep


__all__ = ["MegaProblem", "MegaConfig", "MegaFamily", "FAMILY", "Plan", "plan", "choose", "configure",
           "build", "bind", "expectation", "MegaExpectation", "inputs", "buffer_images", "outputs_of", "compare",
           "check_launch", "where", "STATUS_WORDS", "STATUS_ROLE_WORDS", "ROLE_CODES", "CHECK_UNITS", "CHECK_STEPS",
           "check_units", "all_tensors"]
