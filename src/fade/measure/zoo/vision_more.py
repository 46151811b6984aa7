"""Issue 27's further image classifiers in plain torch.nn, layer for layer as torchvision builds them.

convnext_small, densenet161, mobilenet_v3_small, mobilenet_v3_large, mnasnet1_0, efficientnet_b0 and
regnet_y_400mf follow pytorch/vision `torchvision/models/{convnext,densenet,mobilenetv3,mnasnet,efficientnet,
regnet}.py` and the blocks of `torchvision/ops/{misc,stochastic_depth}.py`
(read at v0.28): the same modules in the same order with torchvision's default hyper-parameters (stochastic
depth, dropout, layer scale, norm eps/momentum, activations, squeeze-excitation widths, `_make_divisible`
rounding), so `state_dict()` keys, parameter shapes and outputs equal torchvision's
(tests/models/test_zoo_vs_torchvision.py checks it where torchvision is installed). Each network initialises
its weights as torchvision does, from whatever RNG state the caller seeded; nothing is ever downloaded.
resnext50_32x4d and wide_resnet50_2 are vision.py's ResNet with grouped or wider bottlenecks; vit_b_16 is in
vit.py.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn import functional as F

from fade.measure.zoo.vision import init_mobile, make_divisible


# -- torchvision.ops blocks ---------------------------------------------------------------------------------------
class ConvNormAct(nn.Sequential):
    """torchvision's Conv2dNormActivation: keys `0` (conv), `1` (norm); the convolution has a bias only when there
    is no norm; "same" padding; the activation is built in place."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1, groups: int = 1,
                 norm_layer: Optional[Callable[..., nn.Module]] = nn.BatchNorm2d,
                 activation_layer: Optional[Callable[..., nn.Module]] = nn.ReLU, padding: Optional[int] = None,
                 bias: Optional[bool] = None):
        padding = (kernel_size - 1) // 2 if padding is None else padding
        bias = norm_layer is None if bias is None else bias
        layers: list = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: global average, 1x1 conv down, `activation`, 1x1 conv up, `scale_activation`,
    times the input (both convolutions have biases)."""

    def __init__(self, input_channels: int, squeeze_channels: int, activation: Callable[..., nn.Module] = nn.ReLU,
                 scale_activation: Callable[..., nn.Module] = nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


def stochastic_depth(x: torch.Tensor, p: float, mode: str, training: bool) -> torch.Tensor:
    """torchvision.ops.stochastic_depth: in training, zero the residual branch of each sample ("row") or of the
    whole batch ("batch") with probability p and scale the survivors by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    survival_rate = 1.0 - p
    size = [x.shape[0]] + [1] * (x.ndim - 1) if mode == "row" else [1] * x.ndim
    noise = torch.empty(size, dtype=x.dtype, device=x.device).bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return x * noise


class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str):
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return stochastic_depth(x, self.p, self.mode, self.training)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p}, mode={self.mode})"


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = list(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


# -- ConvNeXt ("A ConvNet for the 2020s") -------------------------------------------------------------------------
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),  # depthwise 7x7
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Linear(4 * dim, dim),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.stochastic_depth(self.layer_scale * self.block(x))
        result += x
        return result


# (input channels, output channels after the stage's downsampling or None, blocks): convnext_small
CONVNEXT_SMALL_SETTING = ((96, 192, 3), (192, 384, 3), (384, 768, 27), (768, None, 3))


class ConvNeXt(nn.Module):
    def __init__(self, setting=CONVNEXT_SMALL_SETTING, stochastic_depth_prob: float = 0.4, layer_scale: float = 1e-6,
                 num_classes: int = 1000):
        super().__init__()
        norm_layer = partial(LayerNorm2d, eps=1e-6)
        # stem: 4x4 "patchify" convolution with a bias, then LayerNorm, no activation
        layers: list = [ConvNormAct(3, setting[0][0], kernel_size=4, stride=4, padding=0, norm_layer=norm_layer,
                                    activation_layer=None, bias=True)]
        total_blocks = sum(blocks for _, _, blocks in setting)
        block_id = 0
        for channels, out_channels, blocks in setting:
            stage = []
            for _ in range(blocks):
                # the drop probability grows linearly with depth, from 0 to stochastic_depth_prob
                stage.append(CNBlock(channels, layer_scale, stochastic_depth_prob * block_id / (total_blocks - 1.0)))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if out_channels is not None:
                layers.append(nn.Sequential(norm_layer(channels), nn.Conv2d(channels, out_channels, kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = setting[-1][1] if setting[-1][1] is not None else setting[-1][0]
        self.classifier = nn.Sequential(norm_layer(last), nn.Flatten(1), nn.Linear(last, num_classes))
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


# -- DenseNet-BC --------------------------------------------------------------------------------------------------
class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv to bn_size * growth channels, BN-ReLU-3x3 conv to `growth` new channels."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.drop_rate = float(drop_rate)

    def forward(self, features: list) -> torch.Tensor:
        bottleneck = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        new_features = self.conv2(self.relu2(self.norm2(bottleneck)))
        if self.drop_rate > 0:
            new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
        return new_features


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int, drop_rate: float):
        super().__init__()
        for index in range(num_layers):
            layer = DenseLayer(num_input_features + index * growth_rate, growth_rate, bn_size, drop_rate)
            self.add_module(f"denselayer{index + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))  # each layer sees every earlier output, concatenated
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate: int = 48, block_config=(6, 12, 36, 24), num_init_features: int = 96,
                 bn_size: int = 4, drop_rate: float = 0.0, num_classes: int = 1000):
        super().__init__()  # defaults: densenet161
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))  # fmt: skip
        num_features = num_init_features
        for index, num_layers in enumerate(block_config):
            block = DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate)
            self.features.add_module(f"denseblock{index + 1}", block)
            num_features += num_layers * growth_rate
            if index != len(block_config) - 1:
                self.features.add_module(f"transition{index + 1}", Transition(num_features, num_features // 2))
                num_features //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)
            elif isinstance(module, nn.Linear):
                nn.init.constant_(module.bias, 0)  # the weight keeps PyTorch's default, as in torchvision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


# -- MobileNetV3 ----------------------------------------------------------------------------------------------------
# (input channels, kernel, expanded channels, output channels, squeeze-excitation, activation, stride): the
# paper's Tables 1 and 2 as torchvision's _mobilenet_v3_conf lists them (width 1.0, no dilation, full tail)
MOBILENET_V3_LARGE_SETTING = (
    (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1),
)
MOBILENET_V3_SMALL_SETTING = (
    (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1),
)


class InvertedResidualV3(nn.Module):
    """Expand (1x1, unless the width stays), depthwise, optional squeeze-excitation (Hardsigmoid gate), project."""

    def __init__(self, input_channels: int, kernel: int, expanded_channels: int, out_channels: int, use_se: bool,
                 activation: str, stride: int, norm_layer: Callable[..., nn.Module]):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        activation_layer = nn.Hardswish if activation == "HS" else nn.ReLU
        layers: list = []
        if expanded_channels != input_channels:
            layers.append(ConvNormAct(input_channels, expanded_channels, kernel_size=1, norm_layer=norm_layer,
                                      activation_layer=activation_layer))
        layers.append(ConvNormAct(expanded_channels, expanded_channels, kernel_size=kernel, stride=stride,
                                  groups=expanded_channels, norm_layer=norm_layer, activation_layer=activation_layer))
        if use_se:
            layers.append(SqueezeExcitation(expanded_channels, make_divisible(expanded_channels // 4, 8),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormAct(expanded_channels, out_channels, kernel_size=1, norm_layer=norm_layer,
                                  activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    def __init__(self, setting, last_channel: int, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        # width 1.0: torchvision's adjust_channels (make_divisible(c * 1.0, 8)) leaves every width of the tables
        setting = [(make_divisible(inp, 8), kernel, make_divisible(exp, 8), make_divisible(out, 8), se, act, stride)
                   for inp, kernel, exp, out, se, act, stride in setting]
        layers: list = [ConvNormAct(3, setting[0][0], kernel_size=3, stride=2, norm_layer=norm_layer,
                                    activation_layer=nn.Hardswish)]
        layers += [InvertedResidualV3(*config, norm_layer=norm_layer) for config in setting]
        lastconv_input = setting[-1][3]
        lastconv_output = 6 * lastconv_input
        layers.append(ConvNormAct(lastconv_input, lastconv_output, kernel_size=1, norm_layer=norm_layer,
                                  activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(lastconv_output, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
        init_mobile(self, lambda weight: nn.init.normal_(weight, 0, 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


# -- MNASNet (B1, depth multiplier alpha) ---------------------------------------------------------------------------
MNASNET_BN_MOMENTUM = 1 - 0.9997  # the paper's TensorFlow momentum 0.9997, in PyTorch's convention


class MnasInvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int, expansion_factor: int,
                 bn_momentum: float = 0.1):
        super().__init__()
        mid_ch = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(in_ch, mid_ch, 1, bias=False),  # pointwise
            nn.BatchNorm2d(mid_ch, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_ch, mid_ch, kernel_size, padding=kernel_size // 2, stride=stride, groups=mid_ch, bias=False),
            nn.BatchNorm2d(mid_ch, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_ch, out_ch, 1, bias=False),  # linear pointwise: no activation
            nn.BatchNorm2d(out_ch, momentum=bn_momentum),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _mnas_stack(in_ch: int, out_ch: int, kernel_size: int, stride: int, exp_factor: int, repeats: int,
                bn_momentum: float) -> nn.Sequential:
    first = MnasInvertedResidual(in_ch, out_ch, kernel_size, stride, exp_factor, bn_momentum=bn_momentum)
    rest = [MnasInvertedResidual(out_ch, out_ch, kernel_size, 1, exp_factor, bn_momentum=bn_momentum)
            for _ in range(1, repeats)]
    return nn.Sequential(first, *rest)


def _round_to_multiple_of(value: float, divisor: int, round_up_bias: float = 0.9) -> int:
    """torchvision mnasnet's rounding: to a multiple of `divisor`, up unless that moves it more than 10%."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded if rounded >= round_up_bias * value else rounded + divisor


class MNASNet(nn.Module):
    def __init__(self, alpha: float = 1.0, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        depths = [_round_to_multiple_of(depth * alpha, 8) for depth in (32, 16, 24, 40, 80, 96, 192, 320)]
        momentum = MNASNET_BN_MOMENTUM
        self.layers = nn.Sequential(
            nn.Conv2d(3, depths[0], 3, padding=1, stride=2, bias=False),  # first layer: regular conv
            nn.BatchNorm2d(depths[0], momentum=momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(depths[0], depths[0], 3, padding=1, stride=1, groups=depths[0], bias=False),  # separable
            nn.BatchNorm2d(depths[0], momentum=momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(depths[0], depths[1], 1, padding=0, stride=1, bias=False),
            nn.BatchNorm2d(depths[1], momentum=momentum),
            _mnas_stack(depths[1], depths[2], 3, 2, 3, 3, momentum),
            _mnas_stack(depths[2], depths[3], 5, 2, 3, 3, momentum),
            _mnas_stack(depths[3], depths[4], 5, 2, 6, 3, momentum),
            _mnas_stack(depths[4], depths[5], 3, 1, 6, 2, momentum),
            _mnas_stack(depths[5], depths[6], 5, 2, 6, 4, momentum),
            _mnas_stack(depths[6], depths[7], 3, 1, 6, 1, momentum),
            nn.Conv2d(depths[7], 1280, 1, padding=0, stride=1, bias=False),
            nn.BatchNorm2d(1280, momentum=momentum),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(1280, num_classes))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.kaiming_uniform_(module.weight, mode="fan_out", nonlinearity="sigmoid")
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))


# -- EfficientNet (V1, B0) ------------------------------------------------------------------------------------------
# (expansion, kernel, stride, input channels, output channels, layers): the paper's Table 1
EFFICIENTNET_V1_SETTING = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                           (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))


class MBConv(nn.Module):
    """Expand (1x1), depthwise, squeeze-excitation (a quarter of the block's input width, SiLU), project; SiLU."""

    def __init__(self, expand_ratio: float, kernel: int, stride: int, input_channels: int, out_channels: int,
                 stochastic_depth_prob: float, norm_layer: Callable[..., nn.Module]):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        expanded_channels = make_divisible(input_channels * expand_ratio, 8)
        layers: list = []
        if expanded_channels != input_channels:
            layers.append(ConvNormAct(input_channels, expanded_channels, kernel_size=1, norm_layer=norm_layer,
                                      activation_layer=nn.SiLU))
        layers.append(ConvNormAct(expanded_channels, expanded_channels, kernel_size=kernel, stride=stride,
                                  groups=expanded_channels, norm_layer=norm_layer, activation_layer=nn.SiLU))
        layers.append(SqueezeExcitation(expanded_channels, max(1, input_channels // 4),
                                        activation=partial(nn.SiLU, inplace=True)))
        layers.append(ConvNormAct(expanded_channels, out_channels, kernel_size=1, norm_layer=norm_layer,
                                  activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += x
        return result


class EfficientNet(nn.Module):
    def __init__(self, width_mult: float = 1.0, depth_mult: float = 1.0, dropout: float = 0.2,
                 stochastic_depth_prob: float = 0.2, num_classes: int = 1000):
        super().__init__()  # defaults: efficientnet_b0
        norm_layer = nn.BatchNorm2d  # B0-B4; torchvision gives B5-B7 eps 0.001, momentum 0.01
        setting = [(expand, kernel, stride, make_divisible(inp * width_mult, 8), make_divisible(out * width_mult, 8),
                    int(math.ceil(layers * depth_mult))) for expand, kernel, stride, inp, out, layers in
                   EFFICIENTNET_V1_SETTING]
        layers: list = [ConvNormAct(3, setting[0][3], kernel_size=3, stride=2, norm_layer=norm_layer,
                                    activation_layer=nn.SiLU)]
        total_blocks = sum(config[5] for config in setting)
        block_id = 0
        for expand, kernel, stride, input_channels, out_channels, repeats in setting:
            stage = []
            for index in range(repeats):
                # the first block of a stage changes width and stride; the drop probability grows with depth
                stage.append(MBConv(expand, kernel, stride if index == 0 else 1,
                                    input_channels if index == 0 else out_channels, out_channels,
                                    stochastic_depth_prob * float(block_id) / total_blocks, norm_layer))
                block_id += 1
            layers.append(nn.Sequential(*stage))
        lastconv_input = setting[-1][4]
        lastconv_output = 4 * lastconv_input
        layers.append(ConvNormAct(lastconv_input, lastconv_output, kernel_size=1, norm_layer=norm_layer,
                                  activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(lastconv_output, num_classes))
        init_mobile(self, lambda weight: nn.init.uniform_(weight, -weight.shape[0] ** -0.5, weight.shape[0] ** -0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


# -- RegNet (Y: with squeeze-excitation) -----------------------------------------------------------------------------
def regnet_stages(depth: int, w_0: int, w_a: float, w_m: float, group_width: int, bottleneck_multiplier: float = 1.0):
    """torchvision's BlockParams.from_init_params: (width, depth, group width) per stage, all of stride 2.

    Block widths grow linearly (w_0 + w_a * i), are quantised in log space with step w_m and rounded to
    multiples of 8; consecutive blocks of one width form a stage; then each bottleneck width is made
    divisible by its group width. Computed in float32 on the CPU, as torchvision does."""
    quant = 8
    widths_cont = torch.arange(depth, device="cpu") * w_a + w_0
    block_capacity = torch.round(torch.log(widths_cont / w_0) / math.log(w_m))
    block_widths = (torch.round(torch.divide(w_0 * torch.pow(w_m, block_capacity), quant)) * quant).int().tolist()
    stage_widths, stage_depths = [], []
    for width in block_widths:
        if stage_widths and stage_widths[-1] == width:
            stage_depths[-1] += 1
        else:
            stage_widths.append(width)
            stage_depths.append(1)
    bottleneck_widths = [int(width * bottleneck_multiplier) for width in stage_widths]
    group_widths = [min(group_width, bottleneck) for bottleneck in bottleneck_widths]
    bottleneck_widths = [make_divisible(bottleneck, group) for bottleneck, group in zip(bottleneck_widths, group_widths)]
    stage_widths = [int(bottleneck / bottleneck_multiplier) for bottleneck in bottleneck_widths]
    return list(zip(stage_widths, stage_depths, group_widths))


class BottleneckTransform(nn.Sequential):
    """1x1 `a`, grouped 3x3 `b` (the stride), squeeze-excitation `se` (se_ratio of the block's input width), 1x1 `c`."""

    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer, activation_layer, group_width: int,
                 bottleneck_multiplier: float, se_ratio: Optional[float]):
        layers: OrderedDict = OrderedDict()
        w_b = int(round(width_out * bottleneck_multiplier))
        groups = w_b // group_width
        layers["a"] = ConvNormAct(width_in, w_b, kernel_size=1, norm_layer=norm_layer, activation_layer=activation_layer)
        layers["b"] = ConvNormAct(w_b, w_b, kernel_size=3, stride=stride, groups=groups, norm_layer=norm_layer,
                                  activation_layer=activation_layer)
        if se_ratio:
            layers["se"] = SqueezeExcitation(w_b, int(round(se_ratio * width_in)), activation=activation_layer)
        layers["c"] = ConvNormAct(w_b, width_out, kernel_size=1, norm_layer=norm_layer, activation_layer=None)
        super().__init__(layers)


class ResBottleneckBlock(nn.Module):
    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer, activation_layer, group_width: int = 1,
                 bottleneck_multiplier: float = 1.0, se_ratio: Optional[float] = None):
        super().__init__()
        self.proj = None
        if width_in != width_out or stride != 1:  # a projection shortcut where the shape changes
            self.proj = ConvNormAct(width_in, width_out, kernel_size=1, stride=stride, norm_layer=norm_layer,
                                    activation_layer=None)
        self.f = BottleneckTransform(width_in, width_out, stride, norm_layer, activation_layer, group_width,
                                     bottleneck_multiplier, se_ratio)
        self.activation = activation_layer(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x) + self.f(x) if self.proj is not None else x + self.f(x)
        return self.activation(x)


class RegNet(nn.Module):
    def __init__(self, stages, se_ratio: Optional[float] = 0.25, stem_width: int = 32, num_classes: int = 1000,
                 bottleneck_multiplier: float = 1.0):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=1e-05, momentum=0.1)
        activation = nn.ReLU
        self.stem = ConvNormAct(3, stem_width, kernel_size=3, stride=2, norm_layer=norm_layer, activation_layer=activation)
        width = stem_width
        blocks = []
        for index, (width_out, depth, group_width) in enumerate(stages):
            stage = nn.Sequential()  # torchvision's AnyStage: blocks named block{stage}-{i}
            for i in range(depth):
                stage.add_module(f"block{index + 1}-{i}", ResBottleneckBlock(
                    width if i == 0 else width_out, width_out, 2 if i == 0 else 1, norm_layer, activation,
                    group_width, bottleneck_multiplier, se_ratio))  # fmt: skip
            blocks.append((f"block{index + 1}", stage))
            width = width_out
        self.trunk_output = nn.Sequential(OrderedDict(blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_features=width, out_features=num_classes)
        for module in self.modules():  # ResNet-style
            if isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
                nn.init.normal_(module.weight, mean=0.0, std=math.sqrt(2.0 / fan_out))
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.trunk_output(self.stem(x)))
        return self.fc(x.flatten(start_dim=1))


# -- builders (torchvision's names and default hyper-parameters) ----------------------------------------------------
def convnext_small(num_classes: int = 1000) -> nn.Module:
    return ConvNeXt(CONVNEXT_SMALL_SETTING, stochastic_depth_prob=0.4, layer_scale=1e-6, num_classes=num_classes)


def densenet161(num_classes: int = 1000) -> nn.Module:
    return DenseNet(48, (6, 12, 36, 24), 96, num_classes=num_classes)


def mobilenet_v3_small(num_classes: int = 1000) -> nn.Module:
    return MobileNetV3(MOBILENET_V3_SMALL_SETTING, make_divisible(1024, 8), num_classes)


def mobilenet_v3_large(num_classes: int = 1000) -> nn.Module:
    return MobileNetV3(MOBILENET_V3_LARGE_SETTING, make_divisible(1280, 8), num_classes)


def mnasnet1_0(num_classes: int = 1000) -> nn.Module:
    return MNASNet(1.0, num_classes)


def efficientnet_b0(num_classes: int = 1000) -> nn.Module:
    return EfficientNet(width_mult=1.0, depth_mult=1.0, dropout=0.2, num_classes=num_classes)


def regnet_y_400mf(num_classes: int = 1000) -> nn.Module:
    stages = regnet_stages(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8)
    return RegNet(stages, se_ratio=0.25, num_classes=num_classes)
