"""The notebooks run without d2l installed: the cells that compare with d2l say so in one line and skip."""
import os
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
USES_D2L = ["01_data", "03_scoring", "04a_bleu", "05_multihead", "06_positional", "10_fast"]


@pytest.mark.parametrize("name", USES_D2L)
def test_the_chapter_runs_in_quick_mode_without_d2l(name, tmp_path, monkeypatch):
    hidden = tmp_path / "site"
    (hidden / "d2l").mkdir(parents=True)
    (hidden / "d2l" / "__init__.py").write_text('raise ImportError("d2l is hidden by the test")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hidden), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("NMT_QUICK", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.delenv("NMT_FIG_DIR", raising=False)
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / ".kernel"))
    client = NotebookClient(nb, km=km, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()              # raises CellExecutionError if any cell fails
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "d2l is not installed: skipping" in text
