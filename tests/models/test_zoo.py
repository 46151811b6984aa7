"""The zoo without torchvision: parameter counts against torchvision's published counts, torchvision's
state-dict key names, output shapes, and the transformer configurations the docs state.

Models are built on the meta device (no memory, no initialisation cost); shapes and counts are the same.
Issue 27's ten networks also run a training forward and backward on the CPU at 32 px
(test_more_network_trains_a_step_on_the_cpu).
"""

import pytest
import torch
import torch.nn.functional as F

from fade.measure.zoo import MORE_NETWORKS, SEED_NETWORKS, TORCHVISION_PARAMS, ZOO
from fade.measure.zoo.transformer import BERT_BASE, GPT2_SMALL, bert, gpt2
from fade.measure.zoo.vision_more import regnet_stages
from fade.measure.zoo.vit import vit_b_16
from fade.measure.zoo.workload import import_function

IMAGE_NETWORKS = SEED_NETWORKS + MORE_NETWORKS


def build_on_meta(name):
    with torch.device("meta"):
        return import_function(ZOO[name].builder)()


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
def test_cnn_has_exactly_torchvisions_parameter_count(name):
    assert parameter_count(build_on_meta(name)) == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", IMAGE_NETWORKS)
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
        ("convnext_small", ["features.0.0.bias", "features.0.1.weight", "features.1.0.layer_scale",
                            "features.1.0.block.0.weight", "features.1.0.block.2.weight", "features.1.2.block.5.bias",
                            "features.2.0.weight", "features.2.1.weight", "features.5.26.layer_scale",
                            "features.7.2.block.3.weight", "classifier.0.weight", "classifier.2.bias"]),
        ("densenet161", ["features.conv0.weight", "features.norm0.running_var",
                         "features.denseblock1.denselayer1.norm1.weight", "features.denseblock3.denselayer36.conv2.weight",
                         "features.transition3.conv.weight", "features.norm5.bias", "classifier.weight"]),
        ("mobilenet_v3_small", ["features.0.0.weight", "features.1.block.0.0.weight", "features.1.block.1.fc1.bias",
                                "features.1.block.1.fc2.weight", "features.1.block.2.1.running_mean",
                                "features.12.0.weight", "classifier.0.weight", "classifier.3.bias"]),
        ("mobilenet_v3_large", ["features.1.block.0.0.weight", "features.2.block.0.1.weight",
                                "features.4.block.2.fc1.weight", "features.16.1.bias", "classifier.3.weight"]),
        ("resnext50_32x4d", ["layer1.0.conv2.weight", "layer4.2.bn3.bias", "fc.weight"]),
        ("wide_resnet50_2", ["layer1.0.conv2.weight", "layer3.0.downsample.1.running_var", "fc.bias"]),
        ("mnasnet1_0", ["layers.0.weight", "layers.7.running_mean", "layers.8.0.layers.0.weight",
                        "layers.13.0.layers.7.bias", "layers.15.weight", "classifier.1.weight"]),
        ("efficientnet_b0", ["features.0.0.weight", "features.1.0.block.0.0.weight", "features.1.0.block.1.fc1.weight",
                             "features.2.0.block.2.fc2.bias", "features.2.1.block.3.1.running_var",
                             "features.8.0.weight", "classifier.1.weight"]),
        ("regnet_y_400mf", ["stem.0.weight", "trunk_output.block1.block1-0.proj.0.weight",
                            "trunk_output.block1.block1-0.f.a.0.weight", "trunk_output.block1.block1-0.f.se.fc1.weight",
                            "trunk_output.block4.block4-5.f.c.1.running_mean", "fc.weight"]),
        ("vit_b_16", ["class_token", "conv_proj.weight", "encoder.pos_embedding",
                      "encoder.layers.encoder_layer_0.ln_1.weight",
                      "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
                      "encoder.layers.encoder_layer_0.self_attention.out_proj.bias",
                      "encoder.layers.encoder_layer_11.mlp.0.weight", "encoder.layers.encoder_layer_11.mlp.3.bias",
                      "encoder.ln.weight", "heads.head.weight"]),
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


def test_grouped_and_wide_bottlenecks_have_torchvisions_widths():
    resnext = build_on_meta("resnext50_32x4d").state_dict()
    assert tuple(resnext["layer1.0.conv2.weight"].shape) == (128, 4, 3, 3)  # 32 groups of 4 channels
    assert tuple(resnext["layer4.0.conv2.weight"].shape) == (1024, 32, 3, 3)
    wide = build_on_meta("wide_resnet50_2").state_dict()
    assert tuple(wide["layer4.0.conv2.weight"].shape) == (1024, 1024, 3, 3)  # 2048-1024-2048
    assert tuple(wide["layer4.2.conv3.weight"].shape) == (2048, 1024, 1, 1)


def test_regnet_y_400mf_stages_are_the_papers():
    """(width, blocks, group width) per stage from torchvision's depth 16, w_0 48, w_a 27.89, w_m 2.09, g 8."""
    assert regnet_stages(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8) == [
        (48, 1, 8), (104, 3, 8), (208, 6, 8), (440, 6, 8)]


def test_hyper_parameters_are_torchvisions_defaults():
    """What a parameter count does not show: norm eps/momentum, activations, stochastic depth, layer scale, dropout."""
    convnext = build_on_meta("convnext_small")
    assert convnext.features[1][0].block[2].eps == 1e-6
    assert convnext.features[1][0].layer_scale.shape == (96, 1, 1)
    depths = [m.p for m in convnext.modules() if type(m).__name__ == "StochasticDepth"]
    assert len(depths) == 36 and depths[0] == 0.0 and depths[-1] == pytest.approx(0.4)
    for name in ("mobilenet_v3_small", "mobilenet_v3_large"):
        model = build_on_meta(name)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        assert {(m.eps, m.momentum) for m in norms} == {(0.001, 0.01)}
        assert any(isinstance(m, torch.nn.Hardswish) for m in model.modules())
        assert any(isinstance(m, torch.nn.Hardsigmoid) for m in model.modules())  # the squeeze-excitation gate
        assert model.classifier[2].p == 0.2
    efficientnet = build_on_meta("efficientnet_b0")
    depths = [m.p for m in efficientnet.modules() if type(m).__name__ == "StochasticDepth"]
    assert len(depths) == 16 and depths[-1] == pytest.approx(0.2 * 15 / 16)
    assert {type(m) for m in efficientnet.features[1][0].block[1].modules()} >= {torch.nn.SiLU, torch.nn.Sigmoid}
    assert efficientnet.classifier[0].p == 0.2
    mnasnet = build_on_meta("mnasnet1_0")
    momenta = {m.momentum for m in mnasnet.modules() if isinstance(m, torch.nn.BatchNorm2d)}
    assert len(momenta) == 1 and momenta.pop() == pytest.approx(1 - 0.9997)
    vit = build_on_meta("vit_b_16")
    assert vit.encoder.layers[0].ln_1.eps == 1e-6
    assert isinstance(vit.encoder.layers[0].mlp[1], torch.nn.GELU)


@pytest.mark.parametrize("name", [name for name in IMAGE_NETWORKS if ZOO[name].min_size > 1])
def test_min_size_is_the_smallest_input_the_network_takes(name):
    model = build_on_meta(name)
    size = ZOO[name].min_size
    assert tuple(model(torch.empty(2, 3, size, size, device="meta")).shape) == (2, 1000)
    with pytest.raises((RuntimeError, ValueError)):
        model(torch.empty(2, 3, size - 1, size - 1, device="meta"))


def test_vit_takes_exactly_its_image_size():
    assert ZOO["vit_b_16"].min_size == ZOO["vit_b_16"].max_size == 224
    with pytest.raises(ValueError, match="224x224"):
        build_on_meta("vit_b_16")(torch.empty(1, 3, 256, 256, device="meta"))


@pytest.mark.parametrize("name", MORE_NETWORKS)
def test_more_network_trains_a_step_on_the_cpu(name):
    """Real values at 32 px (every one but vit_b_16 takes it; convnext_small's least), batch 2: a forward in
    training mode (dropout, stochastic depth), the loss and finite gradients for every parameter. vit_b_16 is
    built with position embeddings for 32 px (2 x 2 patches). About 15 s for the ten on a 2-core CPU."""
    torch.manual_seed(0)
    model = vit_b_16(image_size=32) if name == "vit_b_16" else import_function(ZOO[name].builder)()
    model.train()
    images, target = torch.randn(2, 3, 32, 32), torch.tensor([3, 999])
    out = model(images)
    assert tuple(out.shape) == (2, 1000)
    loss = F.cross_entropy(out, target)
    loss.backward()
    assert torch.isfinite(loss)
    for key, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), key


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
