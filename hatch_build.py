"""Build hook: compile latscope's optional C modules where a C compiler is at hand.

Each module of :data:`EXTENSIONS` is a hot path whose Python code stays the reference and the fallback (see
``latscope.compiled``). Without a C compiler or Python's headers, or with ``LATSCOPE_PURE_PYTHON=1`` at install
time, a module is left out and the package works the same, at more CPU. Which ones a platform gets: the read path
of kernel-stamped connections is Linux's (kernel receive stamps are); the template fit builds on any POSIX system.

* a regular wheel (``pip install .``) gets the compiled modules inside their packages and a platform tag;
* an editable install (``pip install -e .``) compiles them in place, next to their sources (ignored by git): after
  editing a C source, install again.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: (C source, the platforms it is built on as ``sys.platform`` prefixes); latscope.compiled.MODULES names them by
#: import name
EXTENSIONS = {
    "src/latscope/wire/_rawread.c": ("linux",),
    "src/latscope/dialects/_templatefit.c": ("linux", "darwin", "freebsd"),
}


def compile_extension(root: Path, source: str, out_dir: Path) -> Path | None:
    """Compile ``source`` into ``out_dir``; the built file, or None (with the reason on stderr) where it cannot."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = out_dir / (Path(source).stem + suffix)
    # built beside the target and moved over it: a process that loaded the old file keeps its copy intact
    partial = target.with_name(target.name + ".partial")
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not compiler or shutil.which(compiler[0]) is None:
        print(f"latscope: no C compiler ({compiler[0] if compiler else 'cc'}): {source} left out", file=sys.stderr)
        return None
    command = [
        *compiler,
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        # macOS links an extension without libpython: its symbols are the interpreter's, found when it is loaded
        *(["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []),
        f"-I{sysconfig.get_paths()['include']}",
        str(root / source),
        "-o",
        str(partial),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"latscope: compiling {source} failed ({exc}): left out", file=sys.stderr)
        return None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        print(f"latscope: compiling {source} failed: left out\n{done.stderr}", file=sys.stderr)
        return None
    os.replace(partial, target)
    return target


class CompiledModulesHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds the compiled modules to the wheel where they build; the wheel stays pure Python where none does."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._temp: str | None = None
        if self.target_name != "wheel" or os.environ.get("LATSCOPE_PURE_PYTHON", "") not in ("", "0"):
            return
        root = Path(self.root)
        any_built = False
        for source, platforms in EXTENSIONS.items():
            if not sys.platform.startswith(platforms):
                continue
            if version == "editable":
                built = compile_extension(root, source, (root / source).parent)
            else:
                if self._temp is None:
                    self._temp = tempfile.mkdtemp(prefix="latscope-build-")
                built = compile_extension(root, source, Path(self._temp))
                if built is not None:
                    package = Path(source).parent.relative_to("src")
                    build_data["force_include"][str(built)] = str(package / built.name)
            any_built = any_built or built is not None
        if any_built:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
