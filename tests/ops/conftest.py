import pytest

from fade import cli


@pytest.fixture
def fade_main():
    """fade.cli.main, where `fade ops` is registered."""
    return cli.main


@pytest.fixture(autouse=True, scope="module")
def _cudnn_flags_stay_settable():
    """The in-process sweep imports torch.testing._internal.common_utils, whose import calls
    torch.backends.disable_global_flags(): from then on no code in this pytest process may set
    torch.backends.cudnn.* (the model bench and the tuner do). The isolated sweep keeps that inside its
    worker; for the in-process tests, restore the switch when the module is done."""
    yield
    import torch.backends

    # the flag is a global of torch/backends/__init__.py; `torch.backends` itself is a wrapper module
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
