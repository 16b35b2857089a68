"""One run per job folder: a second run refuses, naming the first; a dead run's lease is taken over."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

from batchenum.pipeline.lease import Lease, LeaseError
from batchenum.pipeline.storage import Storage
from test_faults import cli, cli_command, committed, palago_args, reused, wait_for_commits


def test_a_second_run_refuses_and_a_dead_runs_folder_is_taken_over(tmp_path):
    first = subprocess.Popen(cli_command(*palago_args(tmp_path, 24, 64, "--serial")), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        wait_for_commits(tmp_path, 2, first)
        second = cli(*palago_args(tmp_path, 24, 64, "--serial"), check=False)
        assert (tmp_path / "palago" / "_lease.json").exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert second.returncode == 1
    message = second.stderr.strip().splitlines()[-1]
    assert "another run is writing to" in message and f"pid {first.pid}" in message and "started" in message
    kept = committed(tmp_path)
    third = cli(*palago_args(tmp_path, 18, 64, "--serial", "--overwrite"))  # the first is dead: taken over
    assert "taking over the folder from a dead run" in third.stderr and "its process is gone" in third.stderr
    assert kept >= 2 and reused(third) == 0  # other parameters: nothing reused, nothing refused
    assert not (tmp_path / "palago" / "_lease.json").exists()  # released at the end


def test_of_runs_starting_at_once_exactly_one_gets_the_folder(tmp_path):
    folder = Storage.at(str(tmp_path / "job"))
    barrier = threading.Barrier(8)
    outcomes = []

    def start() -> None:
        lease = Lease(folder, say=lambda message: None)
        barrier.wait()
        try:
            lease.__enter__()
            outcomes.append(("won", lease))
        except LeaseError as error:
            outcomes.append(("refused", str(error)))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [lease for outcome, lease in outcomes if outcome == "won"]
    assert len(winners) == 1 and len(outcomes) == 8
    assert all("another run" in message for outcome, message in outcomes if outcome == "refused")
    assert json.loads((tmp_path / "job" / "_lease.json").read_text())["run"] == winners[0].record["run"]
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["_lease.json"]  # no scratch file left
    winners[0].__exit__(None, None, None)
    assert not (tmp_path / "job" / "_lease.json").exists()
