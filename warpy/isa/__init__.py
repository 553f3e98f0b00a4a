"""warpy.isa"""
