"""The seed image classifiers in plain torch.nn, layer for layer as torchvision builds them.

alexnet, resnet18, resnet50, vgg16 and mobilenet_v2 follow pytorch/vision `torchvision/models/{alexnet,
resnet,vgg,mobilenetv2}.py` (v0.13 and later): the same modules in the same order, so `state_dict()` keys,
parameter shapes and output shapes equal torchvision's (tests/models/test_zoo_vs_torchvision.py checks it
where torchvision is installed). resnext50_32x4d and wide_resnet50_2 are the same ResNet with grouped or
wider bottlenecks (torchvision's `groups` and `width_per_group`). Weights are initialised as torchvision
initialises them (kaiming-normal convolutions, unit batch norms, N(0, 0.01) classifier layers where
torchvision does so), from whatever RNG state the caller seeded; nothing is ever downloaded. The networks
added for issue 27 (ConvNeXt, DenseNet, MobileNetV3, MNASNet, EfficientNet, RegNet, ViT) are in vision_more.py.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


# -- AlexNet ("One weird trick", the variant torchvision ships) -----------------------------------------------
class AlexNet(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )
        # torchvision keeps PyTorch's default initialisation for AlexNet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# -- VGG (configuration "D" = VGG-16, no batch norm) -------------------------------------------------------------
VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, layers=VGG16_LAYERS, num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        modules: list = []
        channels = 3
        for layer in layers:
            if layer == "M":
                modules.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                modules += [nn.Conv2d(channels, layer, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                channels = layer
        self.features = nn.Sequential(*modules)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(module.bias, 0)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.constant_(module.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# -- ResNet (v1.5: the stride sits in the 3x3 convolution of a bottleneck) --------------------------------------
def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, groups=groups, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Optional[nn.Module] = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")  # as torchvision
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Optional[nn.Module] = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups  # resnet50: planes; resnext50_32x4d: 2 * planes
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes: int = 1000, groups: int = 1, width_per_group: int = 64):
        super().__init__()
        self.inplanes = 64
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride), nn.BatchNorm2d(planes * block.expansion)
            )
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, groups=self.groups, base_width=self.base_width)
                   for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# -- MobileNetV2 (width 1.0) -----------------------------------------------------------------------------------
# (expansion t, output channels c, repeats n, first stride s), the paper's Table 2
MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's `_make_divisible`: round to a multiple of `divisor`, never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNReLU6(nn.Sequential):
    """torchvision's Conv2dNormActivation with BatchNorm2d and ReLU6: keys `0` (conv), `1` (bn)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden_dim, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),  # depthwise
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),  # linear bottleneck: no activation
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


def init_mobile(model: nn.Module, linear_weight) -> None:
    """torchvision's initialisation of its mobile networks (MobileNetV2/V3, EfficientNet), in module order so the
    same seed draws the same weights: convolutions Kaiming-normal (fan_out) with zero bias, norms one and zero,
    linear layers `linear_weight(weight)` with zero bias (the one part that differs between them)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            linear_weight(module.weight)
            nn.init.zeros_(module.bias)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        input_channel = make_divisible(32)
        last_channel = make_divisible(1280)
        features: list = [ConvBNReLU6(3, input_channel, stride=2)]
        for expansion, channels, repeats, stride in MOBILENET_V2_SETTING:
            output_channel = make_divisible(channels)
            for index in range(repeats):
                features.append(InvertedResidual(input_channel, output_channel, stride if index == 0 else 1, expansion))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(last_channel, num_classes))
        init_mobile(self, lambda weight: nn.init.normal_(weight, 0, 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))  # not squeeze: the batch may be 1
        return self.classifier(torch.flatten(x, 1))


def alexnet(num_classes: int = 1000) -> nn.Module:
    return AlexNet(num_classes)


def vgg16(num_classes: int = 1000) -> nn.Module:
    return VGG(VGG16_LAYERS, num_classes)


def resnet18(num_classes: int = 1000) -> nn.Module:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes)


def resnet50(num_classes: int = 1000) -> nn.Module:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes)


def resnext50_32x4d(num_classes: int = 1000) -> nn.Module:
    """32 groups of 4 channels per 64 planes: bottleneck widths 128, 256, 512, 1024."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, groups=32, width_per_group=4)


def wide_resnet50_2(num_classes: int = 1000) -> nn.Module:
    """Bottlenecks twice as wide as resnet50's (the last block is 2048-1024-2048); outer widths unchanged."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, width_per_group=64 * 2)


def mobilenet_v2(num_classes: int = 1000) -> nn.Module:
    return MobileNetV2(num_classes)
