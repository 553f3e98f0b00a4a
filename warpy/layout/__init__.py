"""warpy.layout: the typed layout algebra (pure Python; imports nothing else of warpy or CUDA)."""

from warpy.layout.core import Layout, LayoutError
from warpy.layout.swizzle import Swizzle, SwizzledLayout

__all__ = ["Layout", "LayoutError", "Swizzle", "SwizzledLayout"]
