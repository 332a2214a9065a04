"""The tests of importing Hugging Face models: their folder builders (gpt2_folders.py)
are importable as a module."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
