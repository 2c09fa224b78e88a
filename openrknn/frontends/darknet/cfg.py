"""Reading a Darknet ``.cfg`` file: ``[section]`` headers followed by ``key=value`` lines."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from openrknn.errors import ModelLoadError
from openrknn.frontends import require_file


@dataclass
class Section:
    """One ``[section]`` of a cfg file.

    Attributes:
        kind: the section name in lower case ('convolutional', 'net', ...).
        line: 1-based line number of the header.
        options: the ``key=value`` pairs, values as written.
        file: cfg file name, for messages.
        index: layer index as Darknet counts it ([net] is -1), set by the loader.
    """

    kind: str
    line: int
    options: dict[str, str] = field(default_factory=dict)
    file: str = ""
    index: int = -1

    @property
    def where(self) -> str:
        """'<file> line <n>, layer <i> [<kind>]' for messages."""
        layer = f", layer {self.index}" if self.index >= 0 else ""
        return f"{self.file} line {self.line}{layer} [{self.kind}]"

    def _bad(self, key: str, value: str, what: str) -> ModelLoadError:
        return ModelLoadError(f"{self.where}: option {key}={value!r} is not {what}")

    def get_int(self, key: str, default: int | None = None) -> int:
        """Integer option ``key`` (``default`` when absent; absent and no default is an error)."""
        if key not in self.options:
            if default is None:
                raise ModelLoadError(f"{self.where}: required option '{key}' is missing")
            return default
        value = self.options[key]
        try:
            return int(value)
        except ValueError as e:
            raise self._bad(key, value, "an integer") from e

    def get_float(self, key: str, default: float) -> float:
        """Float option ``key``."""
        value = self.options.get(key)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError as e:
            raise self._bad(key, value, "a number") from e

    def get_str(self, key: str, default: str) -> str:
        """String option ``key``, lower case and stripped."""
        return self.options.get(key, default).strip().lower()

    def get_ints(self, key: str, default: list[int] | None = None) -> list[int]:
        """Comma separated integer list option ``key``."""
        if key not in self.options:
            if default is None:
                raise ModelLoadError(f"{self.where}: required option '{key}' is missing")
            return list(default)
        value = self.options[key]
        try:
            return [int(v) for v in value.split(",") if v.strip()]
        except ValueError as e:
            raise self._bad(key, value, "a comma separated list of integers") from e


def parse_cfg(path: str) -> list[Section]:
    """Split a cfg file into sections, keeping line numbers.

    Raises:
        ModelLoadError: missing file, an option before the first section, a line that is neither
            a section header nor ``key=value``, or an empty file.
    """
    require_file(path, "Darknet cfg file")
    name = os.path.basename(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    sections: list[Section] = []
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip().replace(" ", "").replace("\t", "")
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ModelLoadError(f"{name} line {number}: malformed section header (expected '[name]')")
            sections.append(Section(line[1:-1].lower(), number, file=name))
        elif "=" in line:
            if not sections:
                raise ModelLoadError(f"{name} line {number}: an option (key=value) comes before any [section]; "
                                     "is it a Darknet .cfg file?")
            key, value = line.split("=", 1)
            sections[-1].options[key.lower()] = value
        else:
            raise ModelLoadError(f"{name} line {number}: expected '[section]' or 'key=value'")
    if not sections:
        raise ModelLoadError(f"{name} has no sections: is it a Darknet .cfg file?")
    return sections
