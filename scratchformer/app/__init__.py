"""The application around the engine: the command line and its commands, the run loop
around the engine's step (logs, checkpoints, signals, resume), data and tokenizers,
checkpoints, translation of text, export to transformers, plots, data parallelism over
MPI, and the one writer of every file the program writes. It stands on the engine
(scratchformer/engine), which never imports it.
"""
