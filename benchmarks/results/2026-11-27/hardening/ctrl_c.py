"""Ctrl-C (a real SIGINT) at 18 moments of `scratchformer train` from its start: the exit
code and what stderr says. Usage: python ctrl_c.py [path of the scratchformer script]"""

import os
import signal
import subprocess
import sys
import tempfile
import time

script = sys.argv[1] if len(sys.argv) > 1 else "scratchformer"
for i in range(18):
    delay = 0.1 * i  # 0.0 .. 1.7 s after the process starts
    with tempfile.TemporaryDirectory() as d:
        argv = [script, "train", "--config", "reverse", "--steps", "3", "--no-progress"]
        argv += ["--run-dir", os.path.join(d, "run"), "--no-test"]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=120)[1]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    print(f"{delay:4.1f} s  exit {p.returncode:3d}  {len(lines)} line(s)  {' | '.join(lines)}")
