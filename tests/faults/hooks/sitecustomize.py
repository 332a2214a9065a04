"""Imported at the start-up of a test's subprocess that has this folder on PYTHONPATH
(``fault_hooks.faults_env``): installs the faults its environment names."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for fault_hooks
import fault_hooks  # noqa: E402

fault_hooks.install_from_env()
