import pytest

from fade import cli, cli_ops


def _registered(parser) -> bool:
    actions = [action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction"]
    return bool(actions) and "ops" in actions[0].choices


@pytest.fixture
def fade_main(monkeypatch):
    """fade.cli.main with the `ops` verb, whether or not fade.cli registers fade.cli_ops yet."""
    original = cli.build_parser

    def build_parser():
        parser = original()
        if not _registered(parser):
            subparsers = next(action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction")
            cli_ops.add_verbs(subparsers)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)
    return cli.main
