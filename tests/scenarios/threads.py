"""Two runs at once (what ``batchenum.run`` does), from two threads of this process, each into its
own folder, both on the private local Ray.

Usage: python threads.py OUT_DIR MAX_N HEAD_START (1, as batchenum.run does; 0: both connect to Ray
at once, whatever the machine's speed).  The last stdout line is "RESULT " and JSON: per run, its
outcome (ok and its shards, or the error) and seconds; then whether Ray is still
initialised once both have returned.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress


def main(out: str, max_n: str, head_start: str) -> None:
    outcomes: dict[str, dict] = {}
    barrier = threading.Barrier(2)

    def one(name: str) -> None:
        barrier.wait()
        started = time.monotonic()
        try:
            options = RunOptions(out=os.path.join(out, name), workers=2, head_start=head_start == "1")
            result = run_job(PalagoJob.create(max_n=int(max_n), shards=32), options, Progress("palago", quiet=True))
            outcome = {"ok": True, "shards": result.shards}
        except Exception as error:  # the test reports it
            outcome = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        outcomes[name] = {**outcome, "seconds": round(time.monotonic() - started, 1)}

    threads = [threading.Thread(target=one, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ray = sys.modules.get("ray")
    print("RESULT " + json.dumps({"runs": outcomes, "ray_initialised": bool(ray and ray.is_initialized())}))


if __name__ == "__main__":
    main(*sys.argv[1:])
