"""Where a submission's code runs when it is graded, apart from the answers: a kernel in
the jail (grading/jail.py), which sees a copy of the course's `nmt_lib` and nothing else
of the repository. In that copy the course's implementations of what the assignment
asks for are stubs that raise, written into its source, so no reference to them reaches
working code. PyTorch's attention is refused at its dispatcher (where the task is
attention), and only plain data comes back (`torch.load(weights_only=True)`), so the
graders, which compare outside, never run the submission's objects.

    with Sandbox("A2", notebook) as box:  # runs the notebook's code cells in the kernel
        # a plain value, or the error it raised
        box.call("repetition_penalty", logits, generated, 2.0)
        # a Remote: the module stays in the kernel
        mine = box.call("MyLocalAttention", 16, 4)
        mine.load_state_dict(course.state_dict())
        mine(x)
        mine.gradients([x], g, ["W_q.weight"])

A course Transformer crosses as its settings and weights, a pandas table as its index
and columns; an error as its name and message, rebuilt here as that builtin exception.
No answer, or one that is not plain data, is `CheckFailed`. Assignment 3's runs come in
as a copy (`carry`); its graders read the originals outside.
"""

import ast
import os
import shutil
import stat
import tempfile
from pathlib import Path

import nbformat
import torch
from jupyter_core.utils import run_sync
from torch import nn

from nmt_lib.checks import CheckFailed

ROOT = Path(__file__).resolve().parent.parent
# per assignment: module of nmt_lib -> the names that compute what a task asks the
# student to write (tests/test_grade.py finds them by what they compute)
WITHHELD = {
    "A1": {
        "multihead": ("MultiHeadAttention",),
        "attention": ("attend", "DotProductAttention"),
        "fast": ("tiled_attention",),  # chapter 10's: attention, a tile at a time
        "checks/transformer": ("_multihead",),  # chapter 5's grader's, with its weights
    },
    "A2": {
        "decoding": (
            "greedy_decode",
            "greedy_decode_nocache",
            "beam_search",
            "beam_step",
        ),
        "evaluation": ("beam_trace",),
        "fast": ("greedy_decode_fast",),
    },
    "A3": {},
}
# the assignments whose tasks are attention itself (A2's model may use PyTorch's)
REFUSE_ATTENTION = {"A1"}
# Run first in A1's kernel: PyTorch's attention refused at the dispatcher, which every
# call reaches (any thread, torch function mode, TorchScript or alias), and its
# multi-head attention, which can take another path, in Python. Code that undoes it
# has to name what the teacher's reading list names (grading/export.py).
REFUSAL = """import ctypes
import warnings
import torch

def _refuse(*args, **kwargs):
    raise RuntimeError("PyTorch's attention is not yours: write your own")

_nmt_refusal = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():  # "overriding a previously registered kernel"
    warnings.simplefilter("ignore")
    for _op in torch._C._jit_get_all_schemas():
        if any(w in _op.name for w in ("attention", "multi_head", "encoder_layer")):
            _name = _op.name.split("::")[1]
            _name += f".{_op.overload_name}" if _op.overload_name else ""
            for _key in ("CompositeImplicitAutograd", "CPU"):
                _nmt_refusal.impl(_name, _refuse, _key)
torch.nn.functional.multi_head_attention_forward = _refuse
import torch.nn.attention.flex_attention as _flex  # a higher-order operator

_flex.flex_attention = _refuse
# the refusal lasts while the library lives: kept by a reference no name holds
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_nmt_refusal))
del _nmt_refusal, _op, _name, _key, _refuse, _flex
"""
# Defined after the submission's cells: runs one request (call a name, describe or read
# one, call a kept object's method, or take gradients of its output) and saves the
# answer; objects stay behind a handle, a course Transformer is built here.
PROBE = """def _nmt_probe(request, answer, _objects={}):
    import torch

    def built(value):
        if isinstance(value, dict) and "__transformer__" in value:
            from nmt_lib.transformer import Transformer, TransformerConfig

            model = Transformer(TransformerConfig(**value["__transformer__"]))
            model.load_state_dict(value["state"])
            return model.eval()
        if isinstance(value, dict) and "__object__" in value:
            return _objects[value["__object__"]]
        return value

    def plain(value):
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, torch.nn.Module):
            _objects[len(_objects)] = value
            return {"__object__": len(_objects) - 1}
        if isinstance(value, (list, tuple)):
            return (
                type(value)(plain(v) for v in value)
                if type(value) in (list, tuple)
                else [plain(v) for v in value]
            )
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
            return value.item()  # a numpy number: a Python one
        # a table: its index and columns, as lists
        if type(value).__name__ == "DataFrame":
            return {
                "__table__": {
                    "index": plain(list(value.index)),
                    "names": list(value.index.names),
                    "columns": {
                        str(c): plain(value[c].tolist()) for c in value.columns
                    },
                }
            }
        return value

    req = torch.load(request, weights_only=True)
    args = [built(a) for a in req["args"]]
    kwargs = {k: built(v) for k, v in req["kwargs"].items()}
    try:
        if req["kind"] == "call":
            value = globals()[req["name"]](*args, **kwargs)
            # the arguments after the call: changed in place?
            value = {"value": value, "args": args}
        # what a name is, for the graders' refusals
        elif req["kind"] == "describe":
            obj = globals().get(req["name"])
            value = {
                "defined": req["name"] in globals(),
                "none": obj is None,
                "module": str(getattr(obj, "__module__", "__main__")),
                "callable": callable(obj),
            }
        # a name's value, which must be plain data
        elif req["kind"] == "value":
            value = globals()[req["name"]]
        elif req["kind"] == "method":
            value = getattr(_objects[req["handle"]], req["name"])(*args, **kwargs)
        # "gradients": of sum(output * weights) for inputs, parameters
        else:
            obj = _objects[req["handle"]]
            inputs = [a.clone().requires_grad_() for a in args[: req["inputs"]]]
            out = obj(*inputs, *args[req["inputs"] :], **kwargs)
            out = out[0] if isinstance(out, (tuple, list)) else out
            wrt = inputs + [obj.get_parameter(name) for name in req["name"]]
            value = list(
                torch.autograd.grad(
                    (out * req["weights"]).sum(), wrt, allow_unused=True
                )
            )
        result = {"value": plain(value)}
    except Exception as e:
        import traceback

        # the learner's line, as learner_call finds it (its LIBRARY written out: the
        # submission may have taken nmt_lib off the path)
        lines = [
            f.line
            for f in traceback.extract_tb(e.__traceback__)[1:]
            if not any(
                part in f.filename
                for part in ("site-packages", "dist-packages", "nmt_lib")
            )
            and f.line
        ]
        result = {
            "error": type(e).__name__,
            "message": str(e).strip(),
            "line": lines[-1] if lines else "",
        }
    torch.save(result, answer)
"""


# What a withheld function or class becomes: it raises (a class refuses subclasses).
STUBS = {
    ast.FunctionDef: """def {name}(*args, **kwargs):
    raise NotImplementedError({why!r})
""",
    ast.ClassDef: """class {name}:
    def __init_subclass__(cls, **kwargs):
        raise TypeError({why!r})

    def __init__(self, *args, **kwargs):
        raise NotImplementedError({why!r})
""",
}


def withhold(source: str, names) -> str:
    """`source` with each top-level function or class in `names` made its stub."""
    tree = ast.parse(source)
    for i, node in enumerate(tree.body):
        if type(node) in STUBS and node.name in names:
            why = (
                f"the course's {node.name} is withheld while this assignment is graded:"
                " write your own"
            )
            stub = STUBS[type(node)].format(name=node.name, why=why)
            tree.body[i] = ast.parse(stub).body[0]
    return ast.unparse(ast.fix_missing_locations(tree))


def course_copy(assignment: str, folder: Path) -> Path:
    """A copy of `nmt_lib` in `folder`, the assignment's withheld names stubbed."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "nmt_lib", folder / "nmt_lib", ignore=ignore)
    for module, names in WITHHELD[assignment].items():
        path = folder / "nmt_lib" / f"{module}.py"
        path.write_text(
            withhold(path.read_text(encoding="utf-8"), names), encoding="utf-8"
        )
    return folder


# A cell past the timeout: the kernel is interrupted (nbclient's timeout needs an async
# kernel manager), the cell reads as this error, and the next cell runs.
TIMED_OUT = dict(
    ename="CellTimeoutError", evalue="stopped: it ran past the timeout", traceback=[]
)


class Sandbox:
    """The submission's notebook run cell after cell in a kernel inside a copy of the
    course; `call` then asks for a name's result on plain arguments. One kernel serves
    every call: a submission that breaks it only fails its own later calls."""

    def __init__(
        self, assignment: str, notebook: Path, *, timeout: int = 600, carry=()
    ):
        self.assignment, self.timeout = assignment, timeout
        self.notebook = Path(notebook)
        self.carry = carry  # folders beside the notebook that its cells read
        self.errors = []  # the first line of each error the cells raised

    def __enter__(self):
        from nbclient import NotebookClient

        from grading.hidden import grade_cells
        from grading.jail import JailedKernelManager

        self._work = tempfile.TemporaryDirectory(prefix="nmt-sandbox-")
        lib = course_copy(self.assignment, Path(self._work.name) / "lib")
        self.folder = Path(self._work.name) / "work"  # the kernel's, and what it sees
        self.folder.mkdir()
        for folder in self.carry:  # a copy: the graders read the originals
            if (self.notebook.parent / folder).is_dir():
                src, dest = self.notebook.parent / folder, self.folder / folder
                shutil.copytree(src, dest, symlinks=True)  # a link stays one
        nb = nbformat.read(self.notebook, as_version=4)
        # the public check cells, known by their grade ids, are the student's feedback;
        # the graders run outside
        checks = {cell for cell in grade_cells(self.assignment) if "-points-" in cell}
        code = [
            c
            for c in nb.cells
            if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("grade_id") not in checks
        ]
        first = [REFUSAL] if self.assignment in REFUSE_ATTENTION else []
        self._nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(c) for c in first]
            + code
            + [nbformat.v4.new_code_cell(PROBE)]
        )
        # its own folder: the files it answers in (the grader follows no link there)
        km = JailedKernelManager(kernel_name="python3", lib=str(lib), own_folder=True)
        self._client = NotebookClient(
            self._nb,
            km=km,
            timeout=self.timeout,
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout=TIMED_OUT,
            resources={"metadata": {"path": str(self.folder)}},
        )
        self._kernel = self._client.setup_kernel(cwd=str(self.folder))
        self._kernel.__enter__()
        for index, cell in enumerate(self._nb.cells):
            self._client.execute_cell(cell, index)
            self.errors += [
                (
                    f"cell {index}: stopped after {self.timeout} s"
                    if o.get("ename") == "KeyboardInterrupt"
                    else (
                        f"cell {index}: {o.get('ename')}:"
                        f" {((o.get('evalue') or '').splitlines() or [''])[0]}"
                    )
                )
                for o in cell.outputs
                if o.get("output_type") == "error"
            ]
        self._calls = 0
        return self

    def __exit__(self, *exc):
        try:
            self._kernel.__exit__(*exc)
            run_sync(self._client.km.shutdown_kernel)(now=True)
        finally:
            self._work.cleanup()

    def call(self, name: str, *args, **kwargs):
        """`name(*args, **kwargs)` in the submission's kernel: its value as plain data
        (a `Remote` for an object it built), or the error it raised."""
        answer = self._ask("call", name, args, kwargs)
        # what the call did to the arguments it was given
        for mine, after in zip(args, answer["args"]):
            if (
                isinstance(mine, torch.Tensor)
                and isinstance(after, torch.Tensor)
                and not torch.equal(mine, after)
            ):
                with torch.no_grad():
                    mine.copy_(after)
        return answer["value"]

    def describe(self, name: str) -> dict:
        """Whether `name` is defined, None, callable in the kernel; its module."""
        return self._ask("describe", name, (), {})

    def value(self, name: str):
        """The value of `name` in the submission's kernel, which must be plain data."""
        return self._ask("value", name, (), {})

    def _ask(self, kind: str, name, args, kwargs, **more):
        self._calls += 1
        request = self.folder / f"request-{self._calls}.pt"
        answer = self.folder / f"answer-{self._calls}.pt"
        args, kwargs = [sent(a) for a in args], {k: sent(v) for k, v in kwargs.items()}
        try:  # a new file: never through a link the kernel left at its name
            with open(request, "xb") as f:
                torch.save(
                    dict(kind=kind, name=name, args=args, kwargs=kwargs, **more), f
                )
        except FileExistsError:
            raise CheckFailed(
                f"`{name}`: the submission's kernel took the grader's file"
            )
        cell = nbformat.v4.new_code_cell(
            f"_nmt_probe({str(request)!r}, {str(answer)!r})"
        )
        self._nb.cells.append(cell)
        self._client.execute_cell(cell, len(self._nb.cells) - 1)
        try:  # a file, not a link or a pipe the kernel left
            fd = os.open(answer, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError("not a file")
                result = torch.load(f, weights_only=True)
        except FileNotFoundError:
            why = [
                f"{o.get('ename')}: {o.get('evalue')}"
                for o in cell.outputs
                if o.get("output_type") == "error"
            ]
            raise CheckFailed(
                f"`{name}`: the submission's kernel gave no answer"
                f" ({'; '.join(why) or 'no error'})"
            )
        except Exception:
            raise CheckFailed(
                f"`{name}` returned something that is not plain data (tensors, numbers,"
                " strings, lists, dicts)"
            ) from None
        if "error" in result:
            raise raised(result["error"], result["message"], result.get("line", ""))
        try:
            return received(self, result["value"])
        except Exception as e:  # a table that is not one: a forged or broken value
            raise CheckFailed(
                f"`{name}` came back as something that is not what it claims ({e})"
            ) from None


class Remote(nn.Module):
    """An object the submission built, kept in its kernel, where its calls run; an
    `nn.Module` here, as the graders check."""

    def __init__(self, box: Sandbox, handle: int):
        super().__init__()
        self._box, self._handle = box, handle

    def _method(self, name, *args, **kwargs):
        return self._box._ask("method", name, args, kwargs, handle=self._handle)

    def forward(self, *args, **kwargs):
        return self._method("__call__", *args, **kwargs)

    def load_state_dict(self, state, strict=True):
        missing, unexpected = self._method("load_state_dict", state, strict=strict)
        return nn.modules.module._IncompatibleKeys(missing, unexpected)

    def eval(self):
        self._method("eval")
        return self

    def gradients(self, inputs, weights, parameters=(), *args, **kwargs):
        """The gradients of sum(output * weights) for `inputs` (the first arguments)
        and the named `parameters`, in the kernel; None where none reaches."""
        return self._box._ask(
            "gradients",
            list(parameters),
            [*inputs, *args],
            kwargs,
            handle=self._handle,
            inputs=len(inputs),
            weights=weights,
        )


# The builtin exceptions a submission's error comes back as; another is a RuntimeError.
BUILTIN_ERRORS = {
    e.__name__: e
    for e in [ValueError, TypeError, RuntimeError, IndexError, KeyError, NameError]
    + [NotImplementedError, AssertionError, AttributeError, ZeroDivisionError]
    + [FileNotFoundError, ModuleNotFoundError, ImportError]
}


def raised(name: str, message: str, line: str = "") -> Exception:
    """The submission's error rebuilt from its name, message and line (no pickle)."""
    error = BUILTIN_ERRORS.get(name)
    error = error(message) if error else RuntimeError(f"{name}: {message}")
    error.learner_line = line
    return error


def sent(value):
    """`value` as plain data for the kernel: a Transformer, a `Remote` as its handle."""
    from dataclasses import asdict

    from nmt_lib.transformer import Transformer

    if isinstance(value, Remote):
        return {"__object__": value._handle}
    if isinstance(value, Transformer):
        return {"__transformer__": asdict(value.cfg), "state": value.state_dict()}
    if isinstance(value, (list, tuple)):
        return type(value)(sent(v) for v in value)
    return value


def received(box: Sandbox, value):
    """An answer with each handle made a `Remote`, each table a DataFrame."""
    if isinstance(value, dict) and set(value) == {"__object__"}:
        return Remote(box, value["__object__"])
    if isinstance(value, dict) and set(value) == {"__table__"}:
        import pandas as pd

        table = value["__table__"]
        index = (
            pd.MultiIndex.from_tuples(table["index"], names=table["names"])
            if len(table["names"]) > 1
            else pd.Index(table["index"], name=table["names"][0])
        )
        return pd.DataFrame(table["columns"], index=index)
    if isinstance(value, (list, tuple)):
        return type(value)(received(box, v) for v in value)
    if isinstance(value, dict):
        return {k: received(box, v) for k, v in value.items()}
    return value
