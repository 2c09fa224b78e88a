"""openrknn's librknnrt: the documented RKNN Runtime C API (seed 002 §3.3, §3.5, §5) over ``openrknn.runtime``.

``openrknn capi build --prefix DIR`` compiles ``src/rknnrt.c`` (a thin C layer that embeds CPython)
and installs it with its headers; ``bridge.py`` implements each call. See docs/c-api.md.
"""
