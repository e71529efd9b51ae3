"""The set-up files agree with each other, and nmt_lib keeps to its allowed imports."""
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {"torch", "numpy", "matplotlib", "pandas", "nmt_lib"}


def pins(lines):
    return {line.strip() for line in lines if re.match(r"^[A-Za-z0-9_.\-]+==", line.strip())}


def test_environment_yml_matches_requirements():
    requirements = pins((ROOT / "requirements.txt").read_text().splitlines())
    env = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.11\s*$", env, re.M), "environment.yml must pin Python 3.11"
    pip_section = env.split("- pip:", 1)[1].splitlines()
    conda_pins = pins(line.strip().lstrip("-").strip() for line in pip_section)
    assert conda_pins == requirements
    for name in ["torch==2.14.1", "torchvision==0.29.1", "d2l==1.0.3"]:
        assert name in requirements


def test_readme_opens_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, re.S)
    assert blocks and blocks[0].split() == ["make", "course"] and blocks[1].split() == ["make", "test"]
    assert "CC-BY 2.0" in readme and "tatoeba" in readme.lower()


def test_ci_runs_make_test_with_the_shared_data():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "../shared/data" in ci and "NMT_DATA_DIR" in ci
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "export_lib.py --check" in test_recipe and "NMT_QUICK=1" in test_recipe and "$(NBVAL)" in test_recipe
    # The browser tests need the built book and Chromium: make test provides both first.
    assert re.search(r"^test: \$\(STAMP\) book chromium$", makefile, re.M)
    assert "apt-get install -y -q chromium" in makefile and "sphinx-build" in makefile
    nbval = re.search(r"^NBVAL := (.*)$", makefile, re.M).group(1)
    assert "--nbval-lax" in nbval and "--nbval-current-env" in nbval and "--nbval-sanitize-with" in nbval


# sacreBLEU is the reference scorer of `python -m nmt_lib evaluate`: imported there, inside the
# function, so that importing nmt_lib never needs it.
LAZY_ONLY = {"sacrebleu"}


def test_nmt_lib_imports_only_torch_numpy_matplotlib_pandas():
    for path in sorted((ROOT / "nmt_lib").glob("*.py")):
        tree = ast.parse(path.read_text())
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                lazy_ok = top in LAZY_ONLY and id(node) in in_function
                assert top in ALLOWED or top in sys.stdlib_module_names or lazy_ok, f"{path.name} imports {name}"
