"""The engine: the Transformer of "Attention Is All You Need" without autograd, every
backward pass written by hand. It imports nothing of the application or the exercises
(tests/test_floors.py keeps it so). Its floors, each importing only those below it:

    backend, errors, memory   NumPy or CuPy (the only module that imports them), error
                              types and input checks, host memory
    device/                   the primitives whose best form depends on the backend
    dispatch                  each op's table and the choice of what runs
    ops/, parity              one file per op family: the reference pairs, the faster
                              forms, the registration; the parity harness
    nn/                       modules that own parameters and gradients
    models/                   the Transformer, the language model, the classifier
    optim/, decode/           Adam, schedules, clipping, loss scaling; greedy and beam
                              search over a key/value state, one options object
    step, gradcheck           one optimizer step (micro-batches, precision, clipping, the
                              update); finite-difference gradient checks
"""
