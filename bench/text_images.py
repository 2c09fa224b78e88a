"""Text pictures for the OCR models: lines of text drawn on crops of the shared photos (Pillow only).

    from text_images import text_pictures
    pictures = text_pictures(photos_dir, count=8, size=(480, 480), seed=0)   # HxWx3 uint8 arrays

A text detector calibrated and judged on photos without text sees probability maps of almost
nothing, where a cosine says little; these pictures give it text to find.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_WORDS = ("openrknn", "NPU", "RK3588", "invoice", "total", "2026-11-23", "Rockchip", "model", "text", "line",
          "quantized", "int8", "float16", "order 4471", "price 12.50", "welcome", "exit", "station", "A-17")


def text_pictures(photos: Path, count: int, size: tuple[int, int], seed: int = 0) -> list[np.ndarray]:
    """``count`` pictures of ``size`` (height, width): a blurred-down photo crop with 3–7 text lines."""
    rng = np.random.default_rng(seed)
    sources = sorted(Path(photos).glob("*.png")) + sorted(Path(photos).glob("*.jpg"))
    height, width = size
    out = []
    for k in range(count):
        if sources:
            photo = Image.open(sources[k % len(sources)]).convert("RGB")
            photo = photo.resize((width, height))
            base = Image.blend(photo, Image.new("RGB", (width, height), (235, 235, 225)), 0.6)
        else:
            base = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(180, 255, 3)))
        draw = ImageDraw.Draw(base)
        y = int(rng.integers(4, 20))
        for _ in range(int(rng.integers(3, 8))):
            font_size = int(rng.integers(max(10, height // 24), max(14, height // 9)))
            font = ImageFont.load_default(size=font_size)
            words = " ".join(rng.choice(_WORDS, int(rng.integers(1, 4))))
            x = int(rng.integers(4, max(5, width // 3)))
            colour = tuple(int(v) for v in rng.integers(0, 90, 3))
            draw.text((x, y), words, fill=colour, font=font)
            y += int(font_size * rng.uniform(1.3, 2.2))
            if y > height - font_size:
                break
        out.append(np.asarray(base))
    return out
