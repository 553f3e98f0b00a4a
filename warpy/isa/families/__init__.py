"""Opcode families, one module per family."""
