"""Where a submission's code runs: a Jupyter kernel in mount, PID, network and IPC
namespaces of its own (bubblewrap), where the answers are not. It sees the Python
environment read-only (a virtual environment at /env), the course's `nmt_lib` with the
withheld implementations stubbed (read-only at /course), the corpus read-only, its own
folder and an empty /tmp: no network, no other process, not the repository, the course
folder or the other submissions. It talks to the grader over IPC sockets in a folder of
their own, has memory and file-size limits, and every process it starts ends with it.

    km = JailedKernelManager(kernel_name="python3", lib=str(folder_holding_nmt_lib))

nbgrader's autograde runs its kernels the same way (`JailedExecute` in the course's
nbgrader_config.py; the stubbed copy named by NMT_JAIL_LIB). Where no namespace can be
made, `make grade` refuses unless the teacher passes --no-isolation, which sets
NMT_NO_ISOLATION: kernels then run as the teacher, and can read the answers.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache

from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors import Execute
from traitlets import Bool, Unicode

from nmt_lib.base.download import default_data_dir

# a kernel's limits: 8 GiB of address space, files of 1 GiB, a /tmp of 1 GiB
LIMITS = ["prlimit", f"--as={8 * 2**30}", f"--fsize={2**30}", "--"]
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/sys")
DATA = str(default_data_dir())
# the variables a kernel keeps; PYTHONPATH, PYTHONPYCACHEPREFIX and the rest go
KEPT = ("NMT_THREADS", "OMP_NUM_THREADS", "NMT_QUICK", "LANG")


@cache
def unavailable() -> str | None:
    """Why no kernel can be isolated here, or None."""
    if sys.platform != "linux" or not shutil.which("bwrap"):
        return (
            "bubblewrap (bwrap) is needed to grade apart from the answers: install it"
            " (apt install bubblewrap), or grade in a Linux VM or container"
        )
    test = ["bwrap", "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true"]
    run = subprocess.run(test, capture_output=True, text=True)
    if run.returncode != 0:
        return f"bubblewrap cannot make namespaces here ({run.stderr.strip()})"
    return None


def jail(cmd: list, cwd: str, lib: str, sockets: str, writes: str) -> list:
    """`cmd`, a Python kernel's command, run by bubblewrap where it sees only what the
    module's docstring lists, and `writes` as its folder `cwd`."""
    venv = sys.prefix != sys.base_prefix
    python = "/env/bin/python" if venv else sys.executable
    sees = ["--ro-bind", sys.base_prefix, sys.base_prefix]
    sees += ["--ro-bind", sys.prefix, "/env"] if venv else []
    for folder in SYSTEM:
        sees += ["--ro-bind-try", folder, folder]
    sees += ["--ro-bind", lib, "/course", "--bind", sockets, sockets]
    sees += ["--ro-bind-try", DATA, DATA]  # the corpus, which A3's cells translate
    sees += ["--bind", writes, cwd, "--chdir", cwd]
    bwrap = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    # the kernel's parent is bwrap's init, PID 1 here: no parent to watch, no banner
    bwrap += ["--die-with-parent", "--setenv", "JPY_PARENT_PID", "1"]
    bwrap += ["--proc", "/proc", "--dev", "/dev"]
    bwrap += ["--size", str(2**30), "--tmpfs", "/tmp", *sees, *LIMITS]
    return [*bwrap, *(python if part == sys.executable else part for part in cmd)]


def kernel_env(jailed: bool, lib: str) -> dict:
    """A kernel's environment: what it needs, and nothing that points elsewhere."""
    env = {k: os.environ[k] for k in KEPT if k in os.environ}
    venv = jailed and sys.prefix != sys.base_prefix
    bin = "/env/bin" if venv else os.path.dirname(sys.executable)
    path = {"PYTHONPATH": "/course" if jailed else lib, "NMT_DATA_DIR": DATA}
    return env | path | {"PATH": f"{bin}:/usr/bin:/bin", "HOME": "/tmp"}


class JailedKernelManager(AsyncKernelManager):
    """A kernel in the jail, connected over IPC sockets in a folder of its own. Its
    folder is a copy unless `own_folder`: the kernel may leave links there, which code
    outside that writes or copies into the folder (nbgrader's) would follow."""

    lib = Unicode(
        os.environ.get("NMT_JAIL_LIB", ""), help="the stubbed nmt_lib's folder"
    )
    own_folder = Bool(False, help="the kernel writes in its real folder")

    async def _async_pre_start_kernel(self, **kw):
        # interrupted by a message, which the kernel turns into its own SIGINT: a signal
        # from here would reach bwrap, which it ends
        self.kernel_spec.interrupt_mode = "message"
        # removed however the kernel left it (TemporaryDirectory resets permissions)
        self._folder = tempfile.TemporaryDirectory(prefix="nmt-kernel-")
        self._sockets = self._folder.name
        self.transport, self.ip = "ipc", f"{self._sockets}/kernel"
        self.connection_file = f"{self._sockets}/kernel.json"
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        jailed = not os.environ.get("NMT_NO_ISOLATION")
        kw["env"] = kernel_env(jailed, self.lib)
        if not jailed:
            return cmd, kw
        cwd = writes = kw.get("cwd") or os.getcwd()
        if not self.own_folder:
            writes = shutil.copytree(cwd, f"{self._sockets}/folder", symlinks=True)
        return jail(cmd, cwd, self.lib, self._sockets, writes), kw

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            self._folder.cleanup()


class JailedExecute(Execute):
    """nbgrader's Execute, its kernels in the jail."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", JailedKernelManager)
        super().__init__(*args, **kwargs)
