"""openrknn: an open toolkit for Rockchip NPUs (RKNN-Toolkit compatible).

Stages (one folder each): ``frontends`` → ``graph`` → ``quant`` → ``sim`` / ``profile`` /
``analysis``; ``model_file`` stores the result; ``api`` is the thin ``RKNN`` facade.
"""
from __future__ import annotations

__version__ = "0.1.0"
