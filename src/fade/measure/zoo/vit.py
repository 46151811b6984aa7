"""vit_b_16 in plain torch.nn, layer for layer as torchvision builds it.

Follows pytorch/vision `torchvision/models/vision_transformer.py` (read at v0.28) with torchvision.ops.MLP as
its MLP block: nn.MultiheadAttention, pre-norm encoder blocks (LayerNorm eps 1e-6), GELU, dropout and attention
dropout 0, a class token, learned position embeddings and a zero-initialised head, so `state_dict()` keys,
parameter shapes and outputs equal torchvision's (tests/models/test_zoo_vs_torchvision.py checks it where
torchvision is installed). The position embeddings fix the input at `image_size` (224) square.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial
from typing import Callable

import torch
from torch import nn


class MLPBlock(nn.Sequential):
    """torchvision.ops.MLP as ViT uses it: keys `0` (Linear), `3` (Linear); GELU; dropout after each Linear."""

    def __init__(self, in_dim: int, mlp_dim: int, dropout: float):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, in_dim),
                         nn.Dropout(dropout))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.normal_(module.bias, std=1e-6)


class EncoderBlock(nn.Module):
    """Pre-norm: x + attention(LN(x)), then + MLP(LN(.))."""

    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int, dropout: float, attention_dropout: float,
                 norm_layer: Callable[..., nn.Module]):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = self.dropout(y) + x
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, seq_length: int, num_layers: int, num_heads: int, hidden_dim: int, mlp_dim: int,
                 dropout: float, attention_dropout: float, norm_layer: Callable[..., nn.Module]):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))  # from BERT
        self.dropout = nn.Dropout(dropout)
        layers: OrderedDict = OrderedDict()
        for index in range(num_layers):
            layers[f"encoder_layer_{index}"] = EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                                                            norm_layer)
        self.layers = nn.Sequential(layers)
        self.ln = norm_layer(hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """ViT with a class token and learned position embeddings for exactly (image_size / patch_size)^2 patches:
    the input must be image_size square (torchvision asserts it; so does this)."""

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_layers: int = 12, num_heads: int = 12,
                 hidden_dim: int = 768, mlp_dim: int = 3072, dropout: float = 0.0, attention_dropout: float = 0.0,
                 num_classes: int = 1000):
        super().__init__()  # defaults: vit_b_16
        if image_size % patch_size:
            raise ValueError(f"image size {image_size} is not a multiple of the patch size {patch_size}")
        self.image_size = image_size
        self.patch_size = patch_size
        self.hidden_dim = hidden_dim
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1  # patches and the class token
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                               norm_layer)
        self.seq_length = seq_length
        self.heads = nn.Sequential(OrderedDict([("head", nn.Linear(hidden_dim, num_classes))]))
        fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        if h != self.image_size or w != self.image_size:
            raise ValueError(f"vit: expected {self.image_size}x{self.image_size} images, got {h}x{w}")
        x = self.conv_proj(x).reshape(n, self.hidden_dim, -1).permute(0, 2, 1)  # (n, patches, hidden)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.encoder(x)
        return self.heads(x[:, 0])  # the class token's output



def vit_b_16(num_classes: int = 1000, image_size: int = 224) -> nn.Module:
    return VisionTransformer(image_size, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072,
                             num_classes=num_classes)
