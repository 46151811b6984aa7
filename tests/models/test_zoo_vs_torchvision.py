"""Each zoo image classifier against torchvision's own build: the same parameter count, the same state-dict keys
with the same shapes, the same modules with the same settings (norm eps and momentum, activations, dropout and
stochastic-depth probabilities), the same initial weights from the same seed, and the same outputs from the
same weights, in eval mode and in training mode (dropout and stochastic depth drawing the same random numbers).
Skipped where torchvision is not installed (it has no CPU-only wheel on PyPI for every platform); run it on a
machine that has it:

    pip install torchvision && python -m pytest tests/models/test_zoo_vs_torchvision.py -v
"""

import pytest
import torch

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed here; the CPU tests check the counts")

from fade.measure.zoo import MORE_NETWORKS, SEED_NETWORKS, TORCHVISION_PARAMS, ZOO  # noqa: E402
from fade.measure.zoo.workload import import_function  # noqa: E402

IMAGE_NETWORKS = SEED_NETWORKS + MORE_NETWORKS


def build_both(name):
    torch.manual_seed(0)
    ours = import_function(ZOO[name].builder)()
    torch.manual_seed(0)
    theirs = getattr(torchvision.models, name)(weights=None)
    return ours, theirs


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_parameter_count_equals_torchvisions(name):
    ours, theirs = build_both(name)
    count = sum(p.numel() for p in theirs.parameters())
    assert sum(p.numel() for p in ours.parameters()) == count == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_state_dict_keys_and_shapes_equal_torchvisions(name):
    ours, theirs = build_both(name)
    our_shapes = {key: tuple(value.shape) for key, value in ours.state_dict().items()}
    their_shapes = {key: tuple(value.shape) for key, value in theirs.state_dict().items()}
    assert list(our_shapes) == list(their_shapes)  # same keys in the same order
    assert our_shapes == their_shapes


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
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


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_modules_and_their_settings_equal_torchvisions(name):
    """Leaf module by leaf module, their reprs: eps and momentum of every norm, each activation (and whether it
    is in place), dropout and stochastic-depth probabilities, kernel sizes, strides, groups and biases."""
    ours, theirs = build_both(name)

    def leaves(model):
        return [repr(module) for module in model.modules() if not list(module.children())]

    assert leaves(ours) == leaves(theirs)


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_the_same_seed_gives_torchvisions_initial_weights(name):
    """torchvision's initialisation, drawn in the same order: the state dicts are equal, tensor for tensor."""
    ours, theirs = build_both(name)
    their_state = theirs.state_dict()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, their_state[key]), key


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_training_mode_outputs_equal_torchvisions(name):
    """Dropout and stochastic depth in training mode: from the same RNG state, the same logits."""
    ours, theirs = build_both(name)
    ours.load_state_dict(theirs.state_dict())
    ours.train()
    theirs.train()
    x = torch.randn(2, 3, 224, 224)
    torch.manual_seed(3)
    out = ours(x)
    torch.manual_seed(3)
    expected = theirs(x)
    torch.testing.assert_close(out, expected)
