"""Where a submission's code runs when it is graded, apart from the answers: a kernel in a temporary folder that
holds a copy of the course's `nmt_lib` and nothing else of the repository (no model answers, hidden tests or
graders). In that copy the course's own implementations of what the assignment asks for are stubs that raise,
written into its source before the kernel starts, so no reference to them, however a submission keeps it (a
default argument, a closure, a partial, its code object, its source, a second import), reaches working code.
PyTorch's attention is refused, whatever name reaches it, while the submission's functions are called (in the
assignments whose tasks are attention); and only
plain data (tensors, numbers, strings, lists, tuples, dicts) comes back, read with `torch.load(weights_only=True)`,
so the graders, which compare outside, never run the submission's objects.

    with Sandbox("A2", notebook) as box:        # runs the notebook's code cells in the kernel
        box.call("repetition_penalty", logits, generated, 2.0)   # a plain value, or CheckFailed
"""
import ast
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import nbformat
import torch

from nmt_lib.checks import CheckFailed

ROOT = Path(__file__).resolve().parent.parent
WITHHELD = {  # per assignment: module of nmt_lib -> the names a task asks the student to write instead
    "A1": {"multihead": ("MultiHeadAttention",), "attention": ("attend", "DotProductAttention")},
    "A2": {"decoding": ("greedy_decode", "greedy_decode_nocache", "beam_search", "beam_step"),
           "evaluation": ("beam_trace",), "fast": ("greedy_decode_fast",)},
    "A3": {},
}
REFUSE_ATTENTION = {"A1"}  # the assignments whose tasks are attention itself (A2's model may use PyTorch's)
# Run first in the kernel: the editable install's finder would reach the repository's own nmt_lib.
PRELUDE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
for _name in [m for m in sys.modules if m.split(".")[0] == "nmt_lib"]:
    del sys.modules[_name]
sys.path.insert(0, {box!r})
"""
# Defined after the submission's cells: calls one of its names on a request and saves the answer.
PROBE = '''def _nmt_probe(request, answer, refuse_attention):
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class NoAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", str(func))
            if refuse_attention and ("scaled_dot_product" in name or func is F.multi_head_attention_forward):
                raise RuntimeError(f"PyTorch's attention ({name}) is not yours: write your own")
            return func(*args, **(kwargs or {}))

    req = torch.load(request, weights_only=True)
    try:
        with NoAttention():
            result = {"value": globals()[req["name"]](*req["args"], **req["kwargs"])}
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"}
    torch.save(result, answer)
'''


def withhold(source: str, names) -> str:
    """`source` with each top-level function or class in `names` replaced by a stub that raises (a class stub
    also refuses to be subclassed)."""
    tree = ast.parse(source)
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            why = f"the course's {node.name} is withheld while this assignment is graded: write your own"
            tree.body[i] = ast.parse(textwrap.dedent(f"""
                class {node.name}:
                    def __init_subclass__(cls, **kwargs):
                        raise TypeError({why!r})

                    def __init__(self, *args, **kwargs):
                        raise NotImplementedError({why!r})
                """ if isinstance(node, ast.ClassDef) else f"""
                def {node.name}(*args, **kwargs):
                    raise NotImplementedError({why!r})
                """)).body[0]
    return ast.unparse(ast.fix_missing_locations(tree))


def course_copy(assignment: str, folder: Path) -> Path:
    """A copy of `nmt_lib` in `folder` with the assignment's withheld names stubbed; returns `folder`."""
    shutil.copytree(ROOT / "nmt_lib", folder / "nmt_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for module, names in WITHHELD[assignment].items():
        path = folder / "nmt_lib" / f"{module}.py"
        path.write_text(withhold(path.read_text(encoding="utf-8"), names), encoding="utf-8")
    return folder


class Sandbox:
    """The submission's notebook run, cell after cell, in a kernel inside a copy of the course (see the module's
    docstring); `call` then asks it for one of its names' results on plain arguments."""

    def __init__(self, assignment: str, notebook: Path, *, timeout: int = 600):
        self.assignment, self.notebook, self.timeout = assignment, Path(notebook), timeout
        self.errors = []                                  # the first line of each error the cells raised

    def __enter__(self):
        from jupyter_client.manager import KernelManager
        from nbclient import NotebookClient

        self._work = tempfile.TemporaryDirectory(prefix="nmt-sandbox-")
        self.folder = course_copy(self.assignment, Path(self._work.name))
        nb = nbformat.read(self.notebook, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        self._nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PRELUDE.format(box=str(self.folder)))]
                                            + code + [nbformat.v4.new_code_cell(PROBE)])
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(self.folder / ".kernel"))
        self._client = NotebookClient(self._nb, km=km, timeout=self.timeout, allow_errors=True,
                                      resources={"metadata": {"path": str(self.folder)}})
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}      # the repository stays off the path
        self._kernel = self._client.setup_kernel(cwd=str(self.folder), env=env)
        self._kernel.__enter__()
        for index, cell in enumerate(self._nb.cells):
            self._client.execute_cell(cell, index)
            self.errors += [f"{o.get('ename')}: {(o.get('evalue') or '').splitlines()[:1]}"
                            for o in cell.outputs if o.get("output_type") == "error"]
        self._calls = 0
        return self

    def __exit__(self, *exc):
        try:
            self._kernel.__exit__(*exc)
            self._client.km.shutdown_kernel(now=True)
        finally:
            self._work.cleanup()

    def call(self, name: str, *args, **kwargs):
        """`name(*args, **kwargs)` in the submission's kernel: its value, which must be plain data, or
        `CheckFailed` with what it raised."""
        self._calls += 1
        request, answer = self.folder / f"request-{self._calls}.pt", self.folder / f"answer-{self._calls}.pt"
        torch.save({"name": name, "args": list(args), "kwargs": kwargs}, request)
        refuse = self.assignment in REFUSE_ATTENTION
        cell = nbformat.v4.new_code_cell(f"_nmt_probe({str(request)!r}, {str(answer)!r}, {refuse})")
        self._nb.cells.append(cell)
        self._client.execute_cell(cell, len(self._nb.cells) - 1)
        try:
            result = torch.load(answer, weights_only=True)
        except FileNotFoundError:
            raise CheckFailed(f"`{name}`: the submission's kernel gave no answer") from None
        except Exception:
            raise CheckFailed(f"`{name}` returned something that is not plain data (tensors, numbers, "
                              "strings, lists, dicts)") from None
        if "error" in result:
            raise CheckFailed(f"`{name}` raised {result['error']}")
        return result["value"]
