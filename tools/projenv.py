"""tools/projenv.py - runs a tool under the project's Python environment (`make deps`: .venv).

The PyTorch tools (torch2plan and what imports tools/torchcap) need PyTorch 2 from the Python
package index, installed by `make deps` into .venv at the repository's root, pinned in
tools/requirements-torch.txt.  They may be started with any interpreter (their shebang is
Debian's /usr/bin/python3): `ensure()` re-executes the script with .venv/bin/python unless it
already runs there, and says how to create the environment when it is missing (exit 2).
VERDICT_PYTHON names another interpreter that has the same packages.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def ensure():
    want = os.environ.get("VERDICT_PYTHON") or VENV_PYTHON
    if os.path.realpath(sys.prefix) == os.path.realpath(os.path.dirname(os.path.dirname(want))):
        return
    if os.environ.get("VERDICT_VENV_REEXEC"):
        return                  # already re-executed once: run where we are
    if not os.path.exists(want):
        sys.stderr.write("%s: the project's Python environment is missing (%s); create it with "
                         "`make deps` (PyTorch %s from the Python package index)\n"
                         % (os.path.basename(sys.argv[0]), want, pinned("torch")))
        sys.exit(2)
    os.environ["VERDICT_VENV_REEXEC"] = "1"
    os.execv(want, [want] + sys.argv)


def pinned(name):
    try:
        with open(os.path.join(ROOT, "tools", "requirements-torch.txt")) as f:
            for line in f:
                if line.lower().startswith(name + "=="):
                    return line.split("==", 1)[1].strip()
    except OSError:
        pass
    return "?"
