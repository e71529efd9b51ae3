"""The set-up files agree with each other, and nmt_lib keeps to its allowed imports."""
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {"torch", "numpy", "matplotlib", "pandas", "tqdm", "nmt_lib"}


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


# sacreBLEU is the reference scorer of `python -m nmt_lib evaluate`, SentencePiece the subword tokenizer
# (chapter 8b), ipywidgets and IPython the translator app (chapter 8): each is imported inside the functions
# that use it, so that importing nmt_lib never needs it.
LAZY_ONLY = {"sacrebleu", "sentencepiece", "ipywidgets", "IPython"}


def test_nmt_lib_imports_only_torch_numpy_matplotlib_pandas_and_tqdm():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
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


def test_every_module_stays_small_and_keeps_its_private_names():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
        text = path.read_text()
        assert len(text.splitlines()) <= 300, f"{path.name} has {len(text.splitlines())} lines; split it"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt_lib"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def notebook_cells(path):
    import json
    return json.loads(path.read_text())["cells"]


def test_every_chapter_opens_with_a_hidden_setup_cell_then_its_title_goals_and_a_summary():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = notebook_cells(path)
        setup, title = cells[0], cells[1]
        source = "".join(setup["source"])
        assert setup["cell_type"] == "code" and source.startswith("%matplotlib inline"), path.name
        assert "remove-cell" in setup["metadata"].get("tags", []), f"{path.name}: the book would show the setup cell"
        assert title["cell_type"] == "markdown" and "".join(title["source"]).startswith("# "), path.name
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert "**Learning goals.**" in text and "**Builds on:**" in text and "\n## Summary" in text, path.name


def test_the_teaching_chapters_use_the_plain_blocks():
    seventh = (ROOT / "notebooks" / "07_transformer.ipynb").read_text()
    assert "FastDropout" not in seventh
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in notebook_cells(path) if c["cell_type"] == "code")
        for switch in ("fast_dropout=True", 'loss="sliced"', "fused_adam=True", "fused=True"):
            assert switch not in code, f"{path.name} switches on {switch}; chapter 10 is where speed-ups live"


def test_every_chapter_from_1_on_ends_with_exercises():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if path.name.startswith("00_"):
            continue
        headings = [line for c in notebook_cells(path) if c["cell_type"] == "markdown"
                    for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
        assert "## Exercises" in headings, f"{path.name} has no exercises"
        assert headings.index("## Exercises") > headings.index("## Summary"), \
            f"{path.name}: the exercises come after the summary"


def test_a_chapter_with_exercises_has_its_solutions_executed_beside_it():
    chapters = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                if any("## Exercises" in "".join(c["source"]) for c in notebook_cells(p))]
    assert chapters, "no chapter has exercises"
    for path in chapters:
        solutions = ROOT / "solutions" / path.name
        assert solutions.is_file(), f"{path.name} has exercises but no {solutions.relative_to(ROOT)}"
        code = [c for c in notebook_cells(solutions) if c["cell_type"] == "code"]
        assert code and all(c.get("outputs") or c.get("execution_count") for c in code), \
            f"{solutions.name} is not executed"
        assert f"solutions/{path.name}" in "".join("".join(c["source"]) for c in notebook_cells(path))
