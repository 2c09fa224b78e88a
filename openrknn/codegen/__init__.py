"""C/C++ deployment demo generation (``RKNN.codegen``, seed 002 §5.12); templates live in ``templates/``."""
from __future__ import annotations

from openrknn.codegen.generator import generate_demo

__all__ = ["generate_demo"]
