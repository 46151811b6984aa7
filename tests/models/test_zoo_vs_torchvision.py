"""Each zoo CNN against torchvision's own build: the same parameter count, the same state-dict keys with the
same shapes, and the same output shape. Skipped where torchvision is not installed (it has no CPU-only
wheel on PyPI for every platform); run it on a machine that has it:

    pip install torchvision && python -m pytest tests/models/test_zoo_vs_torchvision.py -v
"""

import pytest
import torch

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed here; the CPU tests check the counts")

from fade.measure.zoo import SEED_NETWORKS, TORCHVISION_PARAMS, ZOO  # noqa: E402
from fade.measure.zoo.workload import import_function  # noqa: E402


def build_both(name):
    torch.manual_seed(0)
    ours = import_function(ZOO[name].builder)()
    torch.manual_seed(0)
    theirs = getattr(torchvision.models, name)(weights=None)
    return ours, theirs


@pytest.mark.parametrize("name", SEED_NETWORKS)
def test_parameter_count_equals_torchvisions(name):
    ours, theirs = build_both(name)
    count = sum(p.numel() for p in theirs.parameters())
    assert sum(p.numel() for p in ours.parameters()) == count == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", SEED_NETWORKS)
def test_state_dict_keys_and_shapes_equal_torchvisions(name):
    ours, theirs = build_both(name)
    our_shapes = {key: tuple(value.shape) for key, value in ours.state_dict().items()}
    their_shapes = {key: tuple(value.shape) for key, value in theirs.state_dict().items()}
    assert list(our_shapes) == list(their_shapes)  # same keys in the same order
    assert our_shapes == their_shapes


@pytest.mark.parametrize("name", SEED_NETWORKS)
def test_torchvision_weights_load_and_give_the_same_output(name):
    """Loading torchvision's (random) weights into ours gives the same logits: the same computation."""
    ours, theirs = build_both(name)
    ours.load_state_dict(theirs.state_dict())
    ours.eval()
    theirs.eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        out, expected = ours(x), theirs(x)
    assert out.shape == expected.shape == (2, 1000)
    torch.testing.assert_close(out, expected)
