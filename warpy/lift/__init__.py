"""warpy.lift"""
