"""Write an accuracy analysis to ``output_dir``: dumps, error_analysis.txt, CSV, JSON and a PNG plot.

Layout::

    output_dir/
      golden/<file>.txt         float model, every layer: the values flattened, one per line
                                (scripts read them with np.genfromtxt, as with the vendor's toolkit)
      golden/npy/<file>.npy     the same tensor with its shape (float32), named as the vendor names it
      simulator/<file>.txt      simulator, every layer (dequantized to float)
      simulator/npy/<file>.npy
      map_name_to_file.txt      tensor name -> <file>.txt
      error_analysis.txt        the guide's table (seed 002 §3.2.2)
      error_analysis.csv/.json  the same numbers
      error_analysis.png        cosine per layer, worst layers marked
      error_analysis.html       the same plot and tables as one self-contained page (inline SVG)
"""
from __future__ import annotations

import csv
import json
import os
import re

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from openrknn.analysis.accuracy import AnalysisResult, LayerError
from openrknn.report import accuracy_html, write_html

HEADER = """# simulator_error: calculate the output error of each layer of the simulator (compared to the 'golden' value).
#              entire: output error of each layer between 'golden' and 'simulator', these errors will accumulate layer by layer.
#              single: single-layer output error between 'golden' and 'simulator', can better reflect the single-layer accuracy of the simulator.
"""
_NAME_WIDTH = 58


def _cell(cos: float | None, euc: float | None) -> str:
    if cos is None or euc is None:
        return " " * 20
    return f"{cos:.5f} | {euc:<8.5g}"[:20].ljust(20)


RUNTIME_HEADER = """# runtime_error: calculate the output error of each layer of the runtime.
#              entire: output error of each layer between 'golden' and 'runtime', these errors will accumulate layer by layer.
#              single_sim: single-layer output error between 'simulator' and 'runtime', can better reflect the single-layer accuracy of runtime.
"""


def format_table(rows: list[LayerError], header: str = HEADER, title: str = "simulator_error",
                 columns: tuple[str, str] = ("entire", "single")) -> str:
    """The ``error_analysis.txt`` body in the guide's layout (``single_*`` fields fill the second column).

    The board section uses ``RUNTIME_HEADER``, ``title='runtime_error'``, ``columns=('entire', 'single_sim')``.
    """
    width = max(_NAME_WIDTH, max((len(f"[{r.op_type}] {r.tensor}") for r in rows), default=0) + 2)
    lines = [header,
             f"{'layer_name':<{width}}{title:^42}".rstrip(),
             f"{'':<{width}}{columns[0]:^20}{columns[1]:^20}".rstrip(),
             f"{'':<{width}}{'cos      euc':^20}{'cos      euc':^20}".rstrip(),
             "-" * (width + 42)]
    for row in rows:
        lines.append(f"{'[' + row.op_type + '] ' + row.tensor:<{width}}{_cell(row.entire_cos, row.entire_euc)}  "
                     f"{_cell(row.single_cos, row.single_euc)}".rstrip())
    return "\n".join(lines) + "\n"


def safe_file_name(tensor: str, used: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", tensor)[:120] or "tensor"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}_{n}"
    used.add(name)
    return name


def write_report(result: AnalysisResult, output_dir: str, dumps: bool = True) -> str:
    """Write every artefact; returns the path of error_analysis.txt.

    ``dumps=False`` (``accuracy_analysis(output_dir=None)``): only ``error_analysis.txt`` and
    ``map_name_to_file.txt``, as rknn-toolkit2 writes then — no per-tensor files.
    """
    os.makedirs(output_dir, exist_ok=True)
    if dumps:
        for sub in ("golden", "simulator"):
            os.makedirs(os.path.join(output_dir, sub, "npy"), exist_ok=True)
    used: set[str] = set()
    mapping = []
    for row in tqdm(result.rows, desc="I accuracy_analysis: writing dumps", unit="tensor", disable=None if dumps else True,
                    leave=False):
        file_name = safe_file_name(row.tensor, used)
        mapping.append((row.tensor, file_name))
        for sub, values in (("golden", result.golden), ("simulator", result.simulator)):
            if dumps and row.tensor in values:
                write_tensor(np.asarray(values[row.tensor], np.float32), os.path.join(output_dir, sub), file_name)
    with open(os.path.join(output_dir, "map_name_to_file.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{tensor} {file_name}.txt\n" for tensor, file_name in mapping)
    text_path = os.path.join(output_dir, "error_analysis.txt")
    with open(text_path, "w", encoding="utf-8") as handle:
        handle.write(format_table(result.rows))
    if not dumps:
        return text_path
    with open(os.path.join(output_dir, "error_analysis.json"), "w", encoding="utf-8") as handle:
        json.dump([r.to_dict() for r in result.rows], handle, indent=1)
    with open(os.path.join(output_dir, "error_analysis.csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(LayerError("", "").to_dict()))
        writer.writeheader()
        writer.writerows(r.to_dict() for r in result.rows)
    plot_cosines(result, os.path.join(output_dir, "error_analysis.png"))
    write_html(os.path.join(output_dir, "error_analysis.html"), accuracy_html(result))
    return text_path


def write_tensor(array: np.ndarray, folder: str, file_name: str) -> None:
    """``folder/<file_name>.txt`` (flattened, one value per line) and ``folder/npy/<file_name>.npy``."""
    np.save(os.path.join(folder, "npy", file_name + ".npy"), array)
    flat = array.reshape(-1)
    with open(os.path.join(folder, file_name + ".txt"), "w", encoding="ascii") as handle:
        for start in range(0, flat.size, 65536):   # %-formatting a tuple is C speed; chunks bound the memory
            chunk = flat[start:start + 65536].tolist()
            handle.write(("%.9g\n" * len(chunk)) % tuple(chunk))   # %.9g: float32 round-trips exactly


def plot_cosines(result: AnalysisResult, path: str, width: int = 1000, height: int = 420) -> None:
    """Cosine per layer (entire: blue line, single: orange dots), the worst single layers labelled red."""
    rows = [r for r in result.rows if r.entire_cos is not None or r.single_cos is not None]
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = 60, width - 20, 30, height - 40
    values = [v for r in rows for v in (r.entire_cos, r.single_cos) if v is not None and np.isfinite(v)]
    low = min(min(values, default=0.99), 0.99)
    low = max(-1.0, low - (1 - low) * 0.05)
    draw.rectangle([left, top, right, bottom], outline="black")
    for frac in (0.0, 0.5, 1.0):
        value = low + (1 - low) * frac
        y = bottom - (bottom - top) * frac
        draw.line([left - 4, y, left, y], fill="black")
        draw.text((4, y - 6), f"{value:.4f}", fill="black")
    draw.text((left, 8), "cosine per layer: entire (blue), single (orange); worst layers in red", fill="black")

    def xy(i: int, v: float) -> tuple[float, float]:
        x = left + (right - left) * (i + 0.5) / max(1, len(rows))
        return x, bottom - (bottom - top) * (v - low) / (1 - low or 1)

    entire = [xy(i, r.entire_cos) for i, r in enumerate(rows) if r.entire_cos is not None and np.isfinite(r.entire_cos)]
    if len(entire) > 1:
        draw.line(entire, fill=(40, 90, 200), width=2)
    for i, r in enumerate(rows):
        if r.single_cos is not None and np.isfinite(r.single_cos):
            x, y = xy(i, r.single_cos)
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=(240, 140, 20))
    for r in result.worst(3):
        i = rows.index(r)
        x, y = xy(i, r.single_cos if np.isfinite(r.single_cos) else low)   # NaN (fp16 overflow): on the floor
        draw.ellipse([x - 4, y - 4, x + 4, y + 4], outline="red", width=2)
        draw.text((min(x + 6, right - 200), min(y + 4, bottom - 14)), f"{r.tensor[:30]} {r.single_cos:.4f}", fill="red")
    draw.text((left, bottom + 10), f"{len(rows)} layers (graph order)", fill="black")
    img.save(path)
