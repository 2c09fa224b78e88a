"""``openrknn capi build --prefix DIR``: compile openrknn's librknnrt on this machine and install it.

Installs ``DIR/include/{rknn_api.h, rknn_matmul_api.h, rknn_custom_op.h}``, ``DIR/lib/librknnrt.so``,
``DIR/lib/cmake/librknnrt/librknnrtConfig.cmake`` and ``DIR/lib/pkgconfig/librknnrt.pc``. The
library embeds the Python running this command (its venv and the openrknn package it imports), so
build it with the Python that has openrknn installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from openrknn import __version__, log
from openrknn.errors import ConfigError

CAPI_DIR = Path(__file__).resolve().parent
API_HEADER = CAPI_DIR.parent / "codegen" / "templates" / "include" / "rknn_api.h"   # one header for both uses
HEADERS = (API_HEADER, CAPI_DIR / "include" / "rknn_matmul_api.h", CAPI_DIR / "include" / "rknn_custom_op.h")
SOURCES = (CAPI_DIR / "src" / "rknnrt.c",)
LIBRARY = "librknnrt.so"


@dataclass(frozen=True)
class PythonLink:
    """Where this interpreter's headers and shared library are."""

    include: str
    libdir: str
    library: str          # e.g. python3.11 (for -l)
    soname: str           # e.g. libpython3.11.so.1.0 (promoted to RTLD_GLOBAL at start)


def _headers_hint() -> str:
    """Where this interpreter's headers come from: Debian's package, or the interpreter's own install."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    debian = f"sudo apt install libpython{version}-dev (python3-dev for the default python3)"
    if sys.base_prefix == "/usr":
        return f"Debian/Ubuntu: {debian}"
    return (f"this Python ({sys.base_prefix}) is not Debian's: install it with its headers and shared library "
            f"(pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared), or build with Debian's python3 after {debian}")


def find_compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``, ``gcc``, ``clang``."""
    for candidate in [os.environ.get("CC")] + ["cc", "gcc", "clang"]:
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    raise ConfigError("capi build: no C compiler found: install one (Debian/Ubuntu: sudo apt install gcc) or set CC")


def python_link() -> PythonLink:
    """This interpreter's headers and libpython; a clear error naming the Debian package when absent."""
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise ConfigError(f"capi build: Python.h is not in {include}: install the Python headers ({_headers_hint()})")
    version = f"{sys.version_info.major}.{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    soname = sysconfig.get_config_var("INSTSONAME") or f"libpython{version}.so.1.0"
    for folder in (libdir, os.path.join(libdir, multiarch), sysconfig.get_config_var("LIBPL") or ""):
        if folder and (Path(folder) / f"libpython{version}.so").exists():
            return PythonLink(include, folder, f"python{version}", soname)
    raise ConfigError(f"capi build: libpython{version}.so is not in {libdir}: install the shared Python library "
                      f"({_headers_hint()})")


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def compile_command(compiler: str, link: PythonLink, output: Path) -> list[str]:
    package_root = str(CAPI_DIR.parents[1])
    include_dirs = dict.fromkeys(f"-I{header.parent}" for header in HEADERS)
    return [*compiler.split(), "-shared", "-fPIC", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
            *include_dirs, f"-I{link.include}",
            f"-DOPENRKNN_PYTHON={_c_string(sys.executable)}",
            f"-DOPENRKNN_PACKAGE_ROOT={_c_string(package_root)}",
            f"-DOPENRKNN_LIBPYTHON={_c_string(link.soname)}",
            *[str(src) for src in SOURCES], "-o", str(output), f"-Wl,-soname,{LIBRARY}",
            f"-L{link.libdir}", f"-l{link.library}", f"-Wl,-rpath,{link.libdir}", "-ldl", "-lpthread"]


def _pkg_config(prefix: Path) -> str:
    return (f"prefix={prefix}\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}/lib\n\n"
            "Name: librknnrt\nDescription: openrknn's RKNN Runtime C API (runs openrknn .rknn files)\n"
            f"Version: {__version__}\nCflags: -I${{includedir}}\n"
            "Libs: -L${libdir} -lrknnrt -Wl,-rpath,${libdir}\n")


def _cmake_config(prefix: Path) -> str:
    return f"""# openrknn librknnrt {__version__}: find_package(librknnrt) then link librknnrt::librknnrt
get_filename_component(_LIBRKNNRT_PREFIX "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
set(LIBRKNNRT_INCLUDE_DIRS "${{_LIBRKNNRT_PREFIX}}/include")
set(LIBRKNNRT_LIBRARIES "${{_LIBRKNNRT_PREFIX}}/lib/{LIBRARY}")
set(RKNN_RT_LIB "${{LIBRKNNRT_LIBRARIES}}")
if(NOT TARGET librknnrt::librknnrt)
  add_library(librknnrt::librknnrt SHARED IMPORTED)
  set_target_properties(librknnrt::librknnrt PROPERTIES
    IMPORTED_LOCATION "${{LIBRKNNRT_LIBRARIES}}"
    IMPORTED_SONAME "{LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${{LIBRKNNRT_INCLUDE_DIRS}}")
endif()
set(librknnrt_FOUND TRUE)
"""


def _cmake_version() -> str:
    return f"""set(PACKAGE_VERSION "{__version__}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
"""


def build(prefix: str | os.PathLike[str]) -> Path:
    """Compile and install into ``prefix``; the installed library's path.

    Raises:
        ConfigError: no compiler, no Python headers / shared library, or the compiler failed.
    """
    compiler = find_compiler()
    link = python_link()
    root = Path(prefix).resolve()
    include_dir, lib_dir = root / "include", root / "lib"
    with tempfile.TemporaryDirectory(prefix="openrknn-capi-build-") as scratch:   # nothing installed on failure
        staged = Path(scratch) / LIBRARY
        command = compile_command(compiler, link, staged)
        log.debug(" ".join(command))
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ConfigError(f"capi build: the compiler failed ({command[0]}):\n{result.stderr.strip()}")
        include_dir.mkdir(parents=True, exist_ok=True)
        lib_dir.mkdir(parents=True, exist_ok=True)
        for header in HEADERS:
            shutil.copyfile(header, include_dir / header.name)
        shutil.copyfile(staged, lib_dir / f".{LIBRARY}.partial")
        os.replace(lib_dir / f".{LIBRARY}.partial", lib_dir / LIBRARY)   # a running program keeps its old copy
    cmake_dir = lib_dir / "cmake" / "librknnrt"
    cmake_dir.mkdir(parents=True, exist_ok=True)
    (cmake_dir / "librknnrtConfig.cmake").write_text(_cmake_config(root))
    (cmake_dir / "librknnrtConfigVersion.cmake").write_text(_cmake_version())
    (lib_dir / "pkgconfig").mkdir(exist_ok=True)
    (lib_dir / "pkgconfig" / "librknnrt.pc").write_text(_pkg_config(root))
    return lib_dir / LIBRARY


def cmd_capi(args) -> int:  # noqa: ANN001 - argparse namespace
    """``openrknn capi build``."""
    if args.capi_command == "build":
        library = build(args.prefix)
        log.info(f"capi build: installed {library} and its headers, CMake package and pkg-config file "
                 f"under {Path(args.prefix).resolve()} (embeds {sys.executable})")
        return 0
    return 1


def add_parser(sub) -> None:  # noqa: ANN001 - argparse subparsers
    """Register ``openrknn capi`` on the CLI."""
    p = sub.add_parser("capi", help="openrknn's librknnrt: the RKNN Runtime C API for openrknn models")
    capi_sub = p.add_subparsers(dest="capi_command", required=True)
    b = capi_sub.add_parser("build", help="compile librknnrt.so with cc and install headers, library, CMake and "
                                          "pkg-config files")
    b.add_argument("--prefix", required=True, help="install folder (DIR/include, DIR/lib)")
    p.set_defaults(func=cmd_capi)
