"""warpy.check"""
