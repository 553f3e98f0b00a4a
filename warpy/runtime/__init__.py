"""warpy.runtime"""
