"""Signal this process at its K-th writer step (the attack of attack.py).

Every call of os.open (for writing), os.write, os.fsync, os.replace, os.rename,
os.link, os.unlink, os.mkdir and os.rmdir made from scratchformer/writer/ is a step. With
ATTACK_AT=K and ATTACK_SIGNAL=KILL|INT the process sends itself that signal right
after its K-th step; with ATTACK_COUNT=path it writes the number of steps and their
names there when it exits (a run without an attack)."""

import atexit
import os
import signal
import sys

_at = int(os.environ.get("ATTACK_AT", "0"))
_sig = {"KILL": signal.SIGKILL, "INT": signal.SIGINT}.get(os.environ.get("ATTACK_SIGNAL", ""))
_count_to = os.environ.get("ATTACK_COUNT")
_steps = []
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _from_writer() -> bool:
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return False
        if "scratchformer/writer/" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def _wrap(name, real, counts=lambda *a, **k: True):
    def step(*args, **kwargs):
        out = real(*args, **kwargs)
        if counts(*args, **kwargs) and _from_writer():
            _steps.append(f"{name} {os.path.basename(str(args[0])) if args else ''}")
            if len(_steps) == _at and _sig is not None:
                said = f"attack: {os.environ['ATTACK_SIGNAL']} after step {_at}: {_steps[-1]}\n"
                os.write(2, said.encode())
                os.kill(os.getpid(), _sig)
        return out

    return step


os.open = _wrap("open", os.open, lambda path, flags, *a, **k: bool(flags & _WRITE))
for _name in ("fsync", "replace", "rename", "link", "unlink", "mkdir", "rmdir"):
    setattr(os, _name, _wrap(_name, getattr(os, _name)))

if _count_to:

    def _report():
        with open(_count_to, "w") as f:
            f.write("\n".join(_steps) + "\n")

    atexit.register(_report)
