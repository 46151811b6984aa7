import pytest

from fade import cli
from fade.cli import ops as cli_ops


def _registered(parser) -> bool:
    actions = [action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction"]
    return bool(actions) and "ops" in actions[0].choices


@pytest.fixture
def fade_main(monkeypatch):
    """fade.cli.main with the `ops` verb, whether or not fade.cli registers fade.cli.ops yet."""
    original = cli.build_parser

    def build_parser():
        parser = original()
        if not _registered(parser):
            subparsers = next(action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction")
            cli_ops.add_verbs(subparsers)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)
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
