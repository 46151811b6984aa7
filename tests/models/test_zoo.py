"""The zoo without torchvision: parameter counts against torchvision's published counts, torchvision's
state-dict key names, output shapes, and the transformer configurations the docs state.

Models are built on the meta device (no memory, no initialisation cost); shapes and counts are the same.
"""

import pytest
import torch

from fade.measure.zoo import SEED_NETWORKS, TORCHVISION_PARAMS, ZOO
from fade.measure.zoo.transformer import BERT_BASE, GPT2_SMALL, bert, gpt2
from fade.measure.zoo.workload import import_function


def build_on_meta(name):
    with torch.device("meta"):
        return import_function(ZOO[name].builder)()


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("name", SEED_NETWORKS)
def test_cnn_has_exactly_torchvisions_parameter_count(name):
    assert parameter_count(build_on_meta(name)) == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", SEED_NETWORKS)
def test_cnn_maps_images_to_1000_logits(name):
    model = build_on_meta(name)
    for size in (ZOO[name].min_size if ZOO[name].min_size > 1 else 32, 224):
        out = model(torch.empty(3, 3, size, size, device="meta"))
        assert tuple(out.shape) == (3, 1000)


@pytest.mark.parametrize(
    "name, keys",
    [
        ("alexnet", ["features.0.weight", "features.10.bias", "classifier.1.weight", "classifier.6.bias"]),
        ("vgg16", ["features.0.weight", "features.28.weight", "classifier.0.weight", "classifier.6.weight"]),
        ("resnet18", ["conv1.weight", "bn1.running_mean", "layer2.0.downsample.0.weight", "layer4.1.bn2.num_batches_tracked", "fc.weight"]),
        ("resnet50", ["layer1.0.conv3.weight", "layer1.0.downsample.1.running_var", "layer4.2.bn3.bias", "fc.bias"]),
        ("mobilenet_v2", ["features.0.0.weight", "features.1.conv.0.0.weight", "features.1.conv.1.weight",
                          "features.2.conv.0.1.running_mean", "features.18.1.bias", "classifier.1.weight"]),
    ],
)  # fmt: skip
def test_cnn_state_dict_uses_torchvisions_key_names(name, keys):
    state = build_on_meta(name).state_dict()
    for key in keys:
        assert key in state, f"{name} lacks torchvision key {key}"


def test_resnet50_state_dict_shapes_match_torchvisions_bottleneck_layout():
    """v1.5: the stride sits in conv2 of the first bottleneck of layers 2-4; shapes as in torchvision."""
    state = build_on_meta("resnet50").state_dict()
    assert tuple(state["layer2.0.conv2.weight"].shape) == (128, 128, 3, 3)
    assert tuple(state["layer3.0.downsample.0.weight"].shape) == (1024, 512, 1, 1)
    assert tuple(state["fc.weight"].shape) == (1000, 2048)
    assert len(state) == 320  # torchvision resnet50: 161 tensors with gradients, 159 batch-norm buffers


def test_gpt2_small_has_the_hugging_face_parameter_count_with_a_tied_head():
    with torch.device("meta"):
        model = gpt2()
        out = model(torch.zeros(2, 16, dtype=torch.long, device="meta"))
    assert parameter_count(model) == 124_439_808 == ZOO["gpt2-small"].params
    assert tuple(out.shape) == (2, 16, GPT2_SMALL.vocab_size)


def test_bert_base_encoder_has_the_hugging_face_parameter_count_plus_a_two_class_head():
    with torch.device("meta"):
        model = bert()
        out = model(torch.zeros(2, 16, dtype=torch.long, device="meta"))
    head = parameter_count(model.classifier)
    assert head == 768 * 2 + 2
    assert parameter_count(model) - head == 109_482_240
    assert parameter_count(model) == ZOO["bert-base"].params
    assert tuple(out.shape) == (2, 2)
    assert BERT_BASE.max_positions == ZOO["bert-base"].max_size == 512


def test_transformer_size_is_configurable():
    with torch.device("meta"):
        small = gpt2(layers=2, hidden=128, heads=4, intermediate=512, vocab_size=1000)
    assert parameter_count(small) < 1_000_000
    with pytest.raises(ValueError, match="multiple of heads"):
        gpt2(hidden=100, heads=12)


def test_same_seed_gives_the_same_weights():
    torch.manual_seed(0)
    first = import_function(ZOO["mobilenet_v2"].builder)()
    torch.manual_seed(0)
    second = import_function(ZOO["mobilenet_v2"].builder)()
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name


def test_every_zoo_entry_builds_from_its_builder_and_counts_what_it_declares():
    for name, entry in ZOO.items():
        assert parameter_count(build_on_meta(name)) == entry.params, name
