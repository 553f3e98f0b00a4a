"""The GEMM rule here is the hand-fitted model (tests/hand_fitted_rule.py)."""

from hand_fitted_rule import _gemm_rule_without_the_sweep_table  # noqa: F401  (an autouse fixture)
