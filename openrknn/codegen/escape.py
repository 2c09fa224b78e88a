"""Escaping of every value codegen writes into generated CMake, C/C++ and Markdown.

Model file names and tensor names come from whoever made the model, so none is pasted raw:

* ``c_string``: a C/C++ string literal; every byte outside printable ASCII, and ``"``, ``\\`` and ``?``
  (trigraphs), is written as a three-digit octal escape, so the literal ends exactly where it should.
* ``inert_text``: for comments (``#`` in CMake, ``//`` in C++) and Markdown code spans: printable
  ASCII only (no newline can end the comment and start code), with ``\\``, backquote, ``|``, ``$``,
  ``@``, ``[`` and ``]`` shown as ``\\xNN`` (no line continuation, CMake bracket comment or variable
  reference, template delimiter, or Markdown table break).
"""
from __future__ import annotations

_COMMENT_UNSAFE = set("\\`|$@[]")


def c_string(text: str) -> str:
    """``text`` as a C/C++ string literal, quotes included."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(char if 0x20 <= byte < 0x7F and char not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def inert_text(text: str) -> str:
    """``text`` made safe inside a one-line comment or a Markdown code span (readable, not executable)."""
    out = []
    for char in text:
        safe = 0x20 <= ord(char) < 0x7F and char not in _COMMENT_UNSAFE
        out.append(char if safe else "".join(f"\\x{b:02x}" for b in char.encode("utf-8")))
    return "".join(out)
