"""nmt_lib keeps to its allowed imports; the course installed from its wheel runs."""

import ast
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

ALLOWED = {"torch", "numpy", "matplotlib", "pandas", "tqdm", "nmt_lib"}
# sacreBLEU is the reference scorer of `python -m nmt_lib evaluate`, SentencePiece the
# subword tokenizer (chapter 8b), ipywidgets and IPython the translator app (chapter 8),
# safetensors the published model's weights (nmt_lib.run.published), scipy Student's t
# quantile (chapter 12), pooch the downloads (nmt_lib.base.download): each is imported
# inside the functions that use it, so that importing nmt_lib never needs it.
LAZY_ONLY = set(
    "pooch sacrebleu sentencepiece ipywidgets IPython safetensors scipy".split()
)
SOURCES = {"pyproject.toml", "README.md", "nmt_lib", "speedrun", "models"}


def test_nmt_lib_imports_only_torch_numpy_matplotlib_pandas_and_tqdm():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
        # the speedrun's trainer, installed beside nmt_lib, trains assignment 3's runs,
        # whose check reads its settings
        lazy = LAZY_ONLY | ({"speedrun"} if path.parent.name == "checks" else set())
        t, defs = ast.parse(path.read_text()), (ast.FunctionDef, ast.AsyncFunctionDef)
        inner = {id(n) for f in ast.walk(t) if isinstance(f, defs) for n in ast.walk(f)}
        imports = [n for n in ast.walk(t) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in (n for n in imports if not getattr(n, "level", 0)):  # absolute
            for alias in node.names:
                top = (getattr(node, "module", None) or alias.name).split(".")[0]
                ok = top in ALLOWED or top in sys.stdlib_module_names
                assert ok or top in lazy and id(node) in inner, f"{path} imports {top}"


@pytest.mark.hosted
def test_a_hosted_notebook_runs_chapters_1_and_8_from_an_installed_wheel(
    tmp_path, monkeypatch
):
    import nbformat
    from nbclient import NotebookClient

    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(ROOT, src, ignore=lambda d, n: {*n * (d == str(ROOT))} - SOURCES)
    # `pip install .` as a hosted notebook does (a wheel built, installed not editable),
    # into a folder the kernel's path puts before the checkout's editable install
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site]
    subprocess.run([*pip, "--no-build-isolation", src], check=True)
    monkeypatch.setenv("PYTHONPATH", str(site))
    # every package of nmt_lib/ and speedrun/ installed (pyproject.toml lists them)
    packages = {p.parent.relative_to(src) for p in src.glob("[ns]*/**/__init__.py")}
    assert packages <= {p.parent.relative_to(site) for p in site.rglob("__init__.py")}
    monkeypatch.setenv("NMT_QUICK", "1")
    # chapter 8's models from the user's cache, as a learner's who ran 4b and 7
    for c in ("01_data", "08_evaluation"):
        nb = nbformat.read(shutil.copy(ROOT / f"notebooks/{c}.ipynb", tmp_path), 4)
        nb.cells.append(nbformat.v4.new_code_cell("import nmt_lib; nmt_lib.__file__"))
        NotebookClient(nb, resources={"metadata": {"path": tmp_path}}).execute()
        assert str(site) in nb.cells[-1].outputs[0]["data"]["text/plain"]
