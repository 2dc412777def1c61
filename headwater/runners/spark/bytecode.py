"""PySpark's worker zips, compiled once so that Spark's Python processes start fast.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the
path of every Python process it starts, and the wheel ships those zips as source
only: pip compiles the modules it installs, not the ones inside a zip. So each
process Spark starts compiles PySpark again, about 0.4 s of CPU on the 2-core
development machine (an import of PySpark's streaming worker: 0.66 s from the
zip as shipped, 0.25 s compiled). ``transformWithStateInPandas`` pays it at every
query start, inside the first micro-batch's planning: Spark runs the processor's
``init`` in a new Python process on the driver to learn its state schemas. Spark's
own aggregates start no such process.

``python -m headwater.runners.spark.bytecode`` (run by ``scripts/setup.sh``) adds
to those zips a compiled module next to each source, which ``zipimport`` prefers.
The compiled modules are checked-hash: each import checks the source's hash, so
a changed source is compiled again rather than a stale module run. Run it again
after reinstalling PySpark; it does nothing to a zip that already has them.
"""

from __future__ import annotations

import os
import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

#: ``zipimport`` looks for ``name.pyc`` beside ``name.py`` (not in ``__pycache__``).
PYC = ".pyc"


def worker_zips() -> list[Path]:
    """The zips Spark puts on its Python workers' path, of the PySpark imported."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return sorted(lib.glob("*.zip"))


def is_compiled(path: Path) -> bool:
    """Whether the zip already holds compiled modules."""
    with zipfile.ZipFile(path) as z:
        return any(n.endswith(PYC) for n in z.namelist())


def compile_zip(path: Path) -> int:
    """Add a checked-hash compiled module beside each source of the zip (written
    to a new file that replaces the zip at once). Returns how many it added: 0 for
    a zip that already has them. A source that does not compile stays as it is,
    as an import would compile it then."""
    path = Path(path)
    if is_compiled(path):
        return 0
    added = 0
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        work, out = Path(tmp), Path(tmp) / path.name
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                dst.writestr(info, data)
                if info.filename.endswith(".py") and _compiled(work, path, info.filename, data):
                    dst.write(work / "module.pyc", info.filename + "c", zipfile.ZIP_DEFLATED)
                    added += 1
        os.replace(out, path)
    return added


def _compiled(work: Path, archive: Path, name: str, source: bytes) -> bool:
    """Compile one source to ``work/module.pyc``, naming it as zipimport would
    (``<zip>/<name>``) so that tracebacks read the same."""
    (work / "module.py").write_bytes(source)
    try:
        py_compile.compile(
            str(work / "module.py"),
            cfile=str(work / "module.pyc"),
            dfile=f"{archive}{os.sep}{name}",
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    except py_compile.PyCompileError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Compile the worker zips of the PySpark this interpreter imports."""
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or worker_zips()
    for path in paths:
        if not os.access(path, os.W_OK):
            print(f"{path}: not writable, left as it is", file=sys.stderr)
            continue
        added = compile_zip(path)
        print(f"{path}: {added} compiled modules added" if added else f"{path}: already compiled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
