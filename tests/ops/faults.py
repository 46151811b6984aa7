"""Op wrappers that misbehave on purpose, for the sweep's fault-injection tests. The sweep loads this file in
its worker through the hidden `--inject FILE` option and calls `wrap_op` for every op, so a faulty op goes
through exactly the path a real one does; only the device call is replaced, the CPU reference stays true."""

import os
import time

HANG_OP = "abs"  # sleeps far past any test timeout
ABORT_OP = "neg"  # os.abort(): the worker dies of SIGABRT
WRONG_OP = "sin"  # returns the right result plus one


def wrap_op(op_id, call):
    if op_id == HANG_OP:
        return hang
    if op_id == ABORT_OP:
        return abort
    if op_id == WRONG_OP:
        return lambda *args, **kwargs: call(*args, **kwargs) + 1
    return None


def hang(*args, **kwargs):
    time.sleep(3600)


def abort(*args, **kwargs):
    os.abort()
