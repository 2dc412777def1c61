"""PySpark's worker zips compiled in place (headwater.runners.spark.bytecode): the
zip's sources stay byte for byte, imports load the compiled modules, a changed
source is compiled again, tracebacks read as before, and a second run does
nothing."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from headwater.runners.spark import bytecode

SOURCES = {
    "pkg/__init__.py": "VALUE = 1\n",
    "pkg/mod.py": "def boom():\n    raise ValueError('from mod')\n",
    "pkg/broken.py": "def (:\n",  # does not compile: stays source only
    "pkg/data.txt": "not python\n",
}


def _zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _run(archive: Path, code: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(archive), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_compiles_each_source_beside_it_and_keeps_the_rest(tmp_path):
    archive = _zip(tmp_path / "w.zip", SOURCES)
    assert not bytecode.is_compiled(archive)
    assert bytecode.compile_zip(archive) == 2
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        assert {n: z.read(n).decode() for n in SOURCES} == SOURCES
    assert names == {*SOURCES, "pkg/__init__.pyc", "pkg/mod.pyc"}
    assert bytecode.is_compiled(archive)
    before = archive.read_bytes()
    assert bytecode.compile_zip(archive) == 0
    assert archive.read_bytes() == before


def test_imports_load_the_compiled_module_and_tracebacks_read_the_same(tmp_path):
    archive = _zip(tmp_path / "w.zip", SOURCES)
    code = "import pkg.mod as m; print(m.__file__); m.boom()"
    before = _run(archive, code)
    bytecode.compile_zip(archive)
    after = _run(archive, code)
    assert (before.stdout.strip(), after.stdout.strip()) == (
        f"{archive}/pkg/mod.py",
        f"{archive}/pkg/mod.pyc",
    )
    assert f'File "{archive}/pkg/mod.py", line 2, in boom' in after.stderr
    assert after.stderr == before.stderr


def test_a_changed_source_is_compiled_again_not_run_stale(tmp_path):
    archive = _zip(tmp_path / "w.zip", SOURCES)
    bytecode.compile_zip(archive)
    with zipfile.ZipFile(archive) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries["pkg/__init__.py"] = b"VALUE = 2\n"  # the old compiled module stays beside it
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    assert _run(archive, "import pkg; print(pkg.VALUE)").stdout.strip() == "2"


def test_main_compiles_the_named_zips_and_says_so(tmp_path, capsys):
    archive = _zip(tmp_path / "w.zip", SOURCES)
    assert bytecode.main([str(archive)]) == 0
    assert bytecode.main([str(archive)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{archive}: 2 compiled modules added",
        f"{archive}: already compiled",
    ]


def test_the_worker_zips_are_pysparks():
    zips = bytecode.worker_zips()
    assert any(p.name == "pyspark.zip" for p in zips)
    assert all(p.parent.name == "lib" and p.parent.parent.name == "python" for p in zips)
