"""A producer end used to free a stage."""

from _common import setup

p, sa, stage = setup()
out = stage.producer()
with out.stage():
    out.wait_empty()
    out.free()  # mypy: error
