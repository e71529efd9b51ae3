"""The set-up files agree with each other, and nmt_lib keeps to its allowed imports."""

import ast
import sys

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


def test_nmt_lib_imports_only_torch_numpy_matplotlib_pandas_and_tqdm():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
        # the speedrun's trainer, installed beside nmt_lib, trains assignment 3's runs,
        # whose check reads its settings
        lazy = LAZY_ONLY | ({"speedrun"} if path.parent.name == "checks" else set())
        tree = ast.parse(path.read_text())
        in_function = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                lazy_ok = top in lazy and id(node) in in_function
                assert top in ALLOWED or top in sys.stdlib_module_names or lazy_ok, (
                    f"{path.name} imports {name}"
                )


def test_every_package_of_nmt_lib_and_the_speedrun_is_installed_by_pyproject():
    # A sub-package missing from [tool.setuptools] packages imports in a checkout but
    # not after `pip install .`.
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    setuptools = setuptools["setuptools"]
    data_only = set(setuptools["package-dir"])  # folders mapped in: the published model
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for package in ("nmt_lib", "speedrun")
        for p in (ROOT / package).rglob("__init__.py")
    }
    assert found == set(setuptools["packages"]) - data_only
