"""Every check docs/checker.md names (its "What is checked" section) has programs that break exactly
that rule, which the check must report, and correct programs it must pass: corpus cases
(tests/check/corpus, run by test_corpus.py) or named tests. A check listed in the document and not
mapped here, or mapped and not listed, fails; so does a mapping to a case that does not exist, to a
bug case without a specific message to match, or to a "correct" case that expects a problem. With
the corpus run in CI, deleting any listed check makes a test fail (each bug case below matches that
check's own message)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.check.corpus.cases import CASES

ROOT = Path(__file__).resolve().parents[2]

#: check name -> (cases or tests that break it, cases or tests that must pass); "path::test" names a test
CLAIMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "derived-operands": (("derived-sb-base-off", "ring-wrap-past-end"), ("ring-correct-4-stages",)),
    "colouring": (("tests/check/test_check.py::test_colouring_change_is_reported",),
                  ("tests/check/test_check.py::test_gemm_clean[sm_90a-256-256-128-fp32]",)),
    "hang": (("full-barrier-count-2", "expect-tx-over", "parity-not-flipped-producer", "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[count-two]"),
             ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "over-arrival": (("release-arrive-all-lanes", "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[over-arrival]"),
                     ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "uninitialised-barrier": (("mbar-init-dropped", "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[uninitialised]"),
                              ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "reinit": (("mbar-init-twice", "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[reinit]"), ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "tx-bytes": (("expect-tx-over", "expect-tx-short", "expect-tx-short-ring", "tmap-a-box-too-tall", "tx-bytes-short-sm100",
                  "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[tx-over]", "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[tx-under]"),
                 ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "phase-release": (("consumer-initial-parity-1", "empty-count-one-short", "expect-tx-short",
                       "tests/check/test_mutants_check.py::test_one_mbarrier_rule_broken[fresh-parity-1]"), ("ring-correct-4-stages", "tests/check/test_mutants_check.py::test_the_base_is_clean")),
    "barrier-init-order": (("mbar-init-no-sync", "mbar-init-no-fence"), ("ring-correct-4-stages",)),
    "named-generations": (("named-id-shared-by-warpgroups", "named-short-count"), ("named-ids-renumbered",)),
    "named-form": (("named-count-not-whole-warps", "named-id-16"), ("named-ids-renumbered",)),
    "named-at-exit": (("named-count-too-big",), ("named-ids-renumbered",)),
    "cluster-barrier": (("cluster-wait-without-arrive", "cluster-arrive-twice"), ("bulk-copy-larger",)),
    "grid-clusters": (("grid-not-whole-clusters",), ("alloc-fence-mma-warp-dropped",)),
    "cluster-launch-control": (("clc-after-decline",), ("tests/check/test_check.py::test_values_agree_with_numpy[sm_100a-3072-1280-2048-fp32]",)),
    "tensor-map-table": (("tests/kernels/test_mega_tma_table.py::test_what_the_checker_refuses",),
                         ("tests/kernels/test_mega_tma_table.py::test_the_relay_is_clean_and_copies_x_to_z",)),
    "tmem-unwritten": (("umma-n-half-the-tile", "umma-first-accumulates", "epilogue-skips-acc-wait"), ("tc-fences-kept",)),
    "tmem-alloc": (("tmem-alloc-not-power-of-two", "tmem-alloc-twice", "tmem-alloc-after-relinquish", "tmem-slot-misaligned"),
                   ("tmem-freed-after-sync",)),
    "tmem-free": (("tmem-free-wrong-size",), ("tmem-freed-after-sync",)),
    "tmem-exit": (("tmem-not-freed", "tmem-not-freed-example"), ("tmem-freed-after-sync",)),
    "tmem-lanes": (("tmem-lane-other-quarter",), ("tmem-freed-after-sync",)),
    "tmem-bounds": (("ldtm-past-allocation",), ("tmem-freed-after-sync",)),
    "umma-descriptor": (("umma-idesc-n-zero", "umma-2cta-without-pair"), ("tmem-freed-after-sync",)),
    "race": (("empty-wait-skipped", "bf16-odd-n-overlap", "staged-store-wait-count-1", "c-pitch-half", "wgmma-wait-count-2",
              "release-before-wgmma-wait"), ("bf16-odd-n-halves", "ring-correct-4-stages")),
    "sub-word": (("sts-u16-same-half",), ("sts-u16-halves", "bf16-odd-n-halves")),
    "proxy-fence": (("staged-no-proxy-fence-sm90", "staged-fence-after-barrier", "staged-no-proxy-fence-sm100"),
                    ("staged-proxy-fence-twice",)),
    "gpu-scope-fence": (("streamk-release-before-data", "streamk-release-dropped", "streamk-acquire-dropped",
                         "streamk-sm100-release-dropped", "tests/check/test_mutants_check.py::test_one_flag_rule_broken[release-dropped]",
                         "tests/check/test_mutants_check.py::test_one_flag_rule_broken[acquire-dropped]", "tests/check/test_mutants_check.py::test_one_flag_rule_broken[release-before-data]",
                         "tests/check/test_mutants_check.py::test_one_flag_rule_broken[acquire-before-poll]"),
                        ("spin-backoff-streamk", "epochs-carry-over", "tests/check/test_mutants_check.py::test_the_flag_base_is_clean",
                         "tests/check/test_mutants_check.py::test_one_flag_rule_broken[acquire-by-cctl]")),
    "pending-registers": (("acc-read-before-wait", "ldtm-wait-dropped"), ("fence-then-unrelated-move",)),
    "tcgen05-order": (("tc-fence-after-dropped-epilogue", "tc-fence-before-dropped-epilogue", "tc-fence-after-dropped-mma"),
                      ("tc-fences-kept", "tc-fence-after-redundant")),
    "exit-remote": (("mma-warp-skips-drain",), ("alloc-fence-mma-warp-dropped",)),
    "exit-async": (("tma-store-unwaited-at-exit", "tma-store-unwaited-sm100"), ("tma-store-waited-each-tile",)),
    "dependent-launch": (("pdl-load-before-wait",), ("bulk-copy-larger",)),
    "shared-bounds": (("sts-past-buffer",), ("sts-u16-halves",)),
    "global-bounds": (("c-rows-past-end",), ("every-tile-once",)),
    "tma-store-row-end": (("tma-store-ragged-row",), ("tma-store-slice-whole-16",)),
    "tma-inner-start": (("tests/kernels/test_tma_start.py::test_the_checker_reports_exactly_the_starts_the_h200_refuses"
                         "[tma_start_unaligned]",),
                        ("tests/kernels/test_tma_start.py::test_the_checker_reports_exactly_the_starts_the_h200_refuses"
                         "[tma_start_aligned]",)),
    "alignment": (("stg-64-misaligned", "tma-dst-misaligned", "bulk-copy-size", "mbarrier-misaligned"), ("bulk-copy-larger",)),
    "header": (("dynsmem-too-small", "dynsmem-past-target", "tmem-buffer-past-target", "tmap-pitch-wrong",
                "tmap-dtype-wrong", "tmap-dims-too-big"), ("dynsmem-generous",)),
    "operand-k": (("b-box-next-k", "tmap-a-dims-k-short"), ("provenance-correct-persistent",)),
    "operand-unwritten": (("b-box-half-the-tile",), ("provenance-correct-persistent", "ring-correct-4-stages")),
    "operand-layout": (("gmma-swizzle-64-for-128", "umma-sbo-wrong", "gmma-b-swizzle-64"), ("provenance-correct-persistent",)),
    "provenance-rows": (("a-box-m-off-half-tile", "one-k-step-wrong-m", "tma-store-row-col-swapped", "tma-store-n-off-by-tile",
                         "a-rows-same-in-pair"), ("provenance-correct-persistent",)),
    "provenance-k": (("k-loop-one-short-consumer",), ("acc-through-temporary", "provenance-correct-persistent")),
    "coverage": (("tile-index-collides", "persistent-stride-short", "c-second-half-4-rows-down"), ("every-tile-once", "persistent-stride-ok-sm100")),
    "tile-whole": (("epilogue-drops-a-store",), ("provenance-correct-persistent", "every-tile-once")),
    "use-before-def": (("tx-count-never-set", "ctaid-not-read", "first-mma-accumulates", "consumer-elect-dropped"), ("unused-register-reassigned",)),
    "warp-aligned": (("ldtm-by-one-lane", "wgmma-under-lane-guard"), ("setmaxnreg-whole-warpgroup",)),
    "warpgroup-collective": (("wgmma-3-of-4-warps",), ("setmaxnreg-whole-warpgroup",)),
    "setmaxnreg-pool": (("setmaxnreg-consumers-240", "setmaxnreg-producer-keeps-all"), ("setmaxnreg-whole-warpgroup",)),
    "wgmma-fence": (("no-wgmma-fence", "acc-written-after-fence", "rs-fragment-loaded-after-fence"),
                    ("fence-then-unrelated-move", "rs-fragment-loaded-early")),
    "weak-poll": (("spin-weak-load", "flags-weak-poll-streamk", "tests/check/test_mutants_check.py::test_one_flag_rule_broken[weak-poll]"),
                  ("spin-with-backoff", "tests/check/test_mutants_check.py::test_the_flag_base_is_clean")),
    "flag-never-raised": (("streamk-flag-never-raised", "tests/check/test_mutants_check.py::test_one_flag_rule_broken[flag-never-raised]"),
                          ("spin-backoff-streamk", "tests/check/test_mutants_check.py::test_the_flag_base_is_clean")),
    "second-launch": (("flag-not-reset", "epoch-not-advanced"), ("epochs-carry-over",)),
    "schedules": (("tests/check/test_options.py::test_a_verdict_that_differs_between_schedules_is_reported",),
                  ("tests/check/test_options.py::test_seeds_same_verdict_for_named_barriers",)),
    "missed-fault": (("tests/check/test_options.py::test_a_missed_fault_exits_4_and_says_so_first",),
                     ("tests/check/test_check.py::test_fault_detected_or_not_applicable",)),
}


def documented_checks() -> list[str]:
    """The names of the checks docs/checker.md's "What is checked" lists (`- `name` [kind]: ...`)."""
    text = (ROOT / "docs" / "checker.md").read_text()
    section = text.split("\n## What is checked\n", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for line in section.splitlines():
        if line.startswith("- `"):
            head = line.split("[", 1)[0]
            names.extend(re.findall(r"`([a-z0-9-]+)`", head))
    return names


BY_NAME = {c.name: c for c in CASES}


def _exists(ref: str) -> bool:
    """A corpus case's name, or `path::test` naming a test function that exists."""
    if "::" not in ref:
        return ref in BY_NAME
    path, fn = ref.split("::")
    mod = importlib.import_module(path[:-3].replace("/", "."))
    fn, _, param = fn.partition("[")
    func = getattr(mod, fn, None)
    if not callable(func):
        return False
    if not param:
        return True
    marks = [m for m in getattr(func, "pytestmark", []) if m.name == "parametrize"]
    ids = {"-".join(str(v) for v in (vals if isinstance(vals, tuple) else (vals,))) for m in marks for vals in m.args[1]}
    ids |= {i for m in marks for i in m.kwargs.get("ids") or () if isinstance(i, str)}
    return param[:-1] in ids


def test_every_documented_check_is_mapped_and_nothing_else() -> None:
    docs = documented_checks()
    assert len(docs) == len(set(docs)), "a check named twice in docs/checker.md"
    assert set(docs) == set(CLAIMS), (sorted(set(docs) - set(CLAIMS)), sorted(set(CLAIMS) - set(docs)))


@pytest.mark.parametrize("check", sorted(CLAIMS))
def test_each_check_has_breaking_and_correct_programs(check: str) -> None:
    bugs, clean = CLAIMS[check]
    assert bugs and clean, check
    for ref in bugs + clean:
        assert _exists(ref), f"{check}: {ref} is no corpus case or test"
    for ref in bugs:
        if ref in BY_NAME:
            c = BY_NAME[ref]
            assert c.expect != "clean" and c.match, f"{check}: {ref} does not name the problem it must raise"
    for ref in clean:
        if ref in BY_NAME:
            assert BY_NAME[ref].expect == "clean", f"{check}: {ref} is not a correct program"


def test_every_bug_in_the_corpus_names_its_message() -> None:
    """A bug case matches a message, so that another check's report cannot stand in for its own."""
    loose = [c.name for c in CASES if c.expect != "clean" and c.match in ("", ".")]
    assert not loose, loose
