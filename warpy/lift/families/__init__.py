"""Lift rules, one module per opcode family (keyed like warpy.isa.families)."""
