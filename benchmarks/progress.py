"""What a person watching a run sees, and when: at a terminal (tmux), off a terminal (a pipe) and in
a Jupyter kernel.

Each place runs the same job into a fresh folder with a fresh numba cache (so the first shards
compile the kernels, as on a fresh install) and prints:

- ``first``: seconds from the start to the first progress output;
- ``updates``: how many times the output changed (distinct screens in tmux, lines in a pipe,
  output messages in Jupyter), and the longest gap between two of them;
- the last screen or lines, to see whether anything (Ray's own warnings) broke the progress line.

    python benchmarks/progress.py                       # all three places, palago --max-n 22
    python benchmarks/progress.py --where pipe --max-n 20

Needs tmux for ``terminal`` and the test extra (nbclient, ipykernel) for ``jupyter``.  Figures,
not assertions: compare runs made one after the other on the same machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

POLL = 0.1  # seconds between two looks at the tmux pane


def run_in_pipe(args: list[str], env: dict) -> list[tuple[float, str]]:
    """(seconds since start, line) for every line the run writes on standard error, read from a pipe."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "batchenum", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in process.stderr]
    process.wait()
    return lines


def run_in_tmux(args: list[str], env: dict, work: str) -> list[tuple[float, str]]:
    """(seconds since start, screen) for every distinct screen of a tmux pane running the command."""
    session = f"progress-bench-{os.getpid()}"
    done = os.path.join(work, "done")
    exports = " ".join(
        f"{key}={shlex.quote(value)}"
        for key, value in env.items()
        if key.startswith(("NUMBA_", "RAY_", "PATH", "VIRTUAL_ENV", "HOME"))
    )
    command = (
        f"env {exports} {shlex.quote(sys.executable)} -m batchenum {shlex.join(args)} > /dev/null; "
        f"touch {shlex.quote(done)}; sleep 600"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "40", command], check=True)
    started = time.monotonic()
    screens: list[tuple[float, str]] = []
    try:
        finished = False
        while not finished:
            finished = os.path.exists(done)  # one last look after the command ended
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout.rstrip()
            if screen and (not screens or screens[-1][1] != screen):
                screens.append((time.monotonic() - started, screen))
            time.sleep(POLL)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    return screens


def run_in_jupyter(max_n: int, out: str, env: dict, no_head_start: bool) -> list[tuple[float, str]]:
    """(seconds since the cell started, text) for every output message of a notebook cell that runs
    the job through ``batchenum.run``, in a real IPython kernel driven by nbclient."""
    import nbformat
    from nbclient import NotebookClient

    code = (
        f"import batchenum\nbatchenum.run('palago', max_n={max_n}, out={out!r}, quiet=False, "
        f"head_start={not no_head_start})"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    seen: list[tuple[float, str]] = []
    client = NotebookClient(notebook, timeout=1800, kernel_name="python3")
    original = client.output

    def output(outs, msg, display_id, cell_index):  # every message of the cell, timed as it arrives
        if msg["header"]["msg_type"] in ("stream", "display_data", "update_display_data", "comm_msg", "comm_open"):
            content = msg["content"]
            text = content.get("text") or str(content.get("data", {}).get("text/plain", ""))[:200] or str(content)[:200]
            seen.append((time.monotonic(), text.replace("\r", "\\r").rstrip()))
        return original(outs, msg, display_id, cell_index)

    client.output = output
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with client.setup_kernel():  # the kernel's start is not timed; the cell's imports are
            started = time.monotonic()
            client.execute_cell(notebook.cells[0], 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [(moment - started, text) for moment, text in seen]


def report(where: str, events: list[tuple[float, str]], show: int) -> None:
    if not events:
        print(f"{where}: no output at all")
        return
    gaps = [b[0] - a[0] for a, b in zip(events, events[1:])]
    print(
        f"{where}: first output at {events[0][0]:.1f} s, {len(events)} updates until {events[-1][0]:.1f} s, "
        f"longest gap {max(gaps, default=0.0):.1f} s"
    )
    for moment, text in events[:show] + ([(None, "...")] if len(events) > 2 * show else []) + events[-show:]:
        shown = text if moment is None else f"{moment:6.1f}  " + text.replace("\n", "\n        ")
        print("   ", shown[:2000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=22)
    parser.add_argument("--where", choices=["terminal", "pipe", "jupyter"], action="append")
    parser.add_argument("--show", type=int, default=4, help="updates shown from the start and from the end")
    parser.add_argument("--warm", action="store_true", help="keep one numba cache: no compiling after the first place")
    parser.add_argument("--no-head-start", action="store_true", help="leave every shard to Ray's workers")
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="progress-bench-")
    cache = os.path.join(work, "numba-cache")
    try:
        for where in options.where or ["terminal", "pipe", "jupyter"]:
            if not options.warm:
                shutil.rmtree(cache, ignore_errors=True)
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            out = os.path.join(work, where)
            args = [
                "run",
                "palago",
                "--max-n",
                str(options.max_n),
                "--out",
                out,
                *(["--no-head-start"] if options.no_head_start else []),
            ]
            if where == "terminal":
                events = run_in_tmux(args, env, work)
            elif where == "pipe":
                events = run_in_pipe(args, env)
            else:
                events = run_in_jupyter(options.max_n, out, env, options.no_head_start)
            report(where, events, options.show)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
