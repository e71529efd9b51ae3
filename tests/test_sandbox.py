"""The grading sandbox (grading/sandbox.py): a submission's code runs in the jail, with
a copy of the course whose withheld implementations are stubs, PyTorch's attention is
refused, and only plain data comes back. Each attack below got full marks from an
earlier grader."""

import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, write_notebook
from grading.sandbox import Sandbox
from nmt_lib.checks import CheckFailed

ATTACKS = """
import functools, importlib, inspect, sys, threading, types
import torch
import torch.nn.functional as F
from nmt_lib.decoding import beam_step
from pathlib import Path


def right(scores, logp, finished):        # an honest answer that uses nothing withheld
    return scores + 1


def default_argument(scores, logp, finished, _step=beam_step):
    return _step(scores, logp, finished, 2)


def closure():
    kept = beam_step
    return lambda scores, logp, finished: kept(scores, logp, finished, 2)


closure = closure()
partial = functools.partial(beam_step, eos_id=2)
kept_in = {"steps": [beam_step]}


def from_a_container(scores, logp, finished):
    return kept_in["steps"][0](scores, logp, finished, 2)


code_copy = types.FunctionType(beam_step.__code__, beam_step.__globals__)
source = {}
exec(inspect.getsource(beam_step), {**vars(sys.modules["nmt_lib.decoding"])}, source)


def from_source(scores, logp, finished):
    return source["beam_step"](scores, logp, finished, 2)


def second_import(scores, logp, finished):
    for name in [m for m in sys.modules if m.startswith("nmt_lib")]:
        del sys.modules[name]
    decoding = importlib.import_module("nmt_lib.decoding")
    return decoding.beam_step(scores, logp, finished, 2)


def off_the_path(scores, logp, finished):
    # the copy taken off the path: the installed course instead?
    sys.path[:] = [p for p in sys.path if p not in ("", ".", "/course")]
    for name in [m for m in sys.modules if m.startswith("nmt_lib")]:
        del sys.modules[name]
    decoding = importlib.import_module("nmt_lib.decoding")
    return decoding.beam_step(scores, logp, finished, 2)


def pytorch_attention(q):
    return F.scaled_dot_product_attention(q, q, q)


def aten_attention(q):
    return torch.ops.aten._scaled_dot_product_attention_math(q, q, q)[0]


def torch_module_attention(q):
    return torch.nn.MultiheadAttention(q.shape[-1], 1, batch_first=True)(q, q, q)[0]


def in_a_thread(q):                       # a torch function mode is the thread's own
    done = []

    def run():
        try:
            done.append(pytorch_attention(q))
        except RuntimeError as e:
            done.append(e)

    thread = threading.Thread(target=run)
    thread.start(), thread.join()
    if isinstance(done[0], Exception):
        raise done[0]
    return done[0]


def without_torch_function(q):
    with torch._C.DisableTorchFunction():
        return pytorch_attention(q)


def flex(q):                              # a higher-order operator, not an aten one
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q[None], q[None], q[None])[0]


@torch.jit.script
def scripted(q):
    return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def seen(path):                           # what the kernel finds by path
    return Path(path).exists()


def processes():
    return sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())


class Doubled(torch.nn.Module):           # a module the submission writes
    def __init__(self, width):
        super().__init__()
        self.W = torch.nn.Linear(width, width)

    def forward(self, x):
        return 2 * self.W(x)


def logits(model, src, src_len, tgt_in):  # a function given a course model
    return model(src, src_len, tgt_in)


def in_place(logits):                     # changes what it was given
    logits.mul_(2)
    return logits


answers = {1: "b", 2: "c"}


class Sneaky:
    def __reduce__(self):
        return (print, ("this ran",))


def not_plain(q):
    return Sneaky()
"""


# the grader's probe cells rewritten, so they call without torch functions
TRANSFORMER = """
def rewrite(lines):
    wrap = "with torch._C.DisableTorchFunction(): "
    return [wrap + line if line.startswith("_nmt_probe(") else line for line in lines]


get_ipython().input_transformers_post.append(rewrite)
"""


def sandbox(assignment, folder, *more):
    notebook = write_notebook(folder / "submission.ipynb", ATTACKS, *more)
    return Sandbox(assignment, notebook, timeout=120)


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    with sandbox("A2", tmp_path_factory.mktemp("a2")) as a2:
        yield a2


@pytest.fixture(scope="module")
# for the attacks that take the course off the kernel's path
def attacked_box(tmp_path_factory):
    with sandbox("A2", tmp_path_factory.mktemp("attacked")) as a2:
        yield a2


@pytest.fixture(scope="module")
def attention_box(tmp_path_factory):
    with sandbox("A1", tmp_path_factory.mktemp("a1"), TRANSFORMER) as a1:
        yield a1


def test_the_kernel_sees_the_course_s_copy_and_not_the_repository_or_the_teacher(box):
    assert box.errors == [] and box.call("seen", "/course/nmt_lib/decoding.py")
    for path in (ROOT, ROOT / "grading" / "hidden.py", Path.home() / ".cache"):
        assert not box.call("seen", str(path)), path
    assert not box.call("seen", str(Path(sys.prefix).parent / "grading"))
    assert len(box.call("processes")) <= 3  # bwrap's init, the kernel, perhaps a child


def test_an_honest_answer_comes_back_as_plain_data(box):
    scores, finished = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool)
    got = box.call("right", scores, torch.zeros(2, 3, 5), finished)
    assert torch.equal(got, scores + 1)


KEPT = "default_argument closure partial from_a_container code_copy from_source"


@pytest.mark.parametrize("name", KEPT.split() + ["second_import"])
def test_the_course_s_own_implementation_is_withheld_however_it_is_kept(
    attacked_box, name
):
    args = (
        torch.zeros(1, 2),
        torch.log_softmax(torch.randn(1, 2, 5), -1),
        torch.zeros(1, 2, dtype=torch.bool),
    )
    with pytest.raises(NotImplementedError, match="the course's beam_step is withheld"):
        attacked_box.call(name, *args)


def test_the_repository_s_course_is_not_reached_by_the_editable_install_s_finder(
    attacked_box,
):
    args = (
        torch.zeros(1, 2),
        torch.log_softmax(torch.randn(1, 2, 5), -1),
        torch.zeros(1, 2, dtype=torch.bool),
    )
    with pytest.raises(ModuleNotFoundError, match="No module named 'nmt_lib'"):
        attacked_box.call("off_the_path", *args)


@pytest.mark.parametrize(
    "name",
    ["pytorch_attention", "aten_attention", "torch_module_attention"]
    + ["in_a_thread", "without_torch_function", "scripted", "flex"],
)
def test_pytorch_s_attention_is_refused_whatever_name_or_path_reaches_it(
    attention_box, box, name
):
    # A1's probes pass through the submission's input transformer
    with pytest.raises(RuntimeError, match="PyTorch's attention"):
        attention_box.call(name, torch.randn(1, 3, 4))
    # allowed where attention is not the task
    assert box.call(name, torch.randn(1, 3, 4)).shape == (1, 3, 4)


def test_an_object_that_would_run_code_when_loaded_does_not_come_back(box):
    with pytest.raises(CheckFailed, match="not plain data"):
        box.call("not_plain", torch.zeros(1))


def test_a_module_the_submission_builds_stays_in_its_kernel_and_answers_there(box):
    local = torch.nn.Linear(4, 4)
    mine = box.call("Doubled", 4)
    # nothing of it came back
    assert isinstance(mine, torch.nn.Module) and not list(mine.parameters())
    keys = mine.load_state_dict(
        {f"W.{k}": v for k, v in local.state_dict().items()}, strict=False
    )
    assert keys.missing_keys == keys.unexpected_keys == []
    x, g = torch.randn(3, 4), torch.randn(3, 4)
    assert torch.allclose(mine(x), 2 * local(x))
    dx, dW = mine.gradients([x], g, ["W.weight"])
    xg = x.clone().requires_grad_()
    want = torch.autograd.grad((2 * local(xg) * g).sum(), (xg, local.weight))
    assert torch.allclose(dx, want[0]) and torch.allclose(dW, want[1])


def test_a_course_model_crosses_as_its_settings_and_weights(box):
    from nmt_lib.checks.a2 import random_translator, sources

    model, (src, src_len) = random_translator(), sources()
    tgt_in = torch.tensor([[1, 4, 5]] * src.shape[0])
    assert torch.allclose(
        box.call("logits", model, src, src_len, tgt_in),
        model(src, src_len, tgt_in),
        atol=1e-6,
    )


def test_a_call_that_changes_its_arguments_changes_them_here_too(box):
    logits, twice = torch.ones(2, 3), 2 * torch.ones(2, 3)
    got = box.call("in_place", logits)
    assert torch.equal(got, twice) and torch.equal(logits, twice)


def test_the_graders_can_ask_what_a_name_is_and_read_a_plain_value(box):
    about = dict(defined=True, none=False, module="nmt_lib.decoding", callable=True)
    assert box.describe("beam_step") == about
    assert not box.describe("nothing")["defined"]
    assert box.value("answers") == {1: "b", 2: "c"}


def test_a_link_the_kernel_leaves_at_the_grader_s_file_is_not_followed(tmp_path):
    target = tmp_path / "written-by-the-grader"
    plant = (
        f"for n in range(1, 4):\n    os.symlink({str(target)!r}, f'request-{{n}}.pt')"
    )
    notebook = write_notebook(tmp_path / "links.ipynb", ATTACKS, "import os\n" + plant)
    with Sandbox("A2", notebook, timeout=120) as box:
        with pytest.raises(CheckFailed, match="took the grader's file"):
            box.describe("right")
    assert not target.exists()
