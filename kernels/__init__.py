"""Kernel programs (installed as warpy.kernels) and the rules that pick a configuration from a shape."""
