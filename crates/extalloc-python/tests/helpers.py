"""What the volume tests share: work run on threads, and a script run in a child process
that kills itself with SIGKILL."""

import signal
import subprocess
import sys
import threading


def run_in_threads(work, threads=4):
    """Runs work(t) on `threads` threads and returns what they raised (a thread's assert
    is not pytest's: the caller asserts the list is empty)."""
    errors = []

    def run(t):
        try:
            work(t)
        except Exception as e:
            errors.append(e)

    started = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return errors


def run_killed(script, *args):
    """Runs `script` with python -c and `args`; it must end killed by SIGKILL. Returns
    what it printed."""
    run = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True
    )
    assert run.returncode == -signal.SIGKILL, run.stderr
    return run.stdout
