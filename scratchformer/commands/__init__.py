"""Sub-commands of the ``scratchformer`` CLI, one module each (see scratchformer/cli.py)."""
