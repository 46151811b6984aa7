"""The fused attention ops that nn.MultiheadAttention and nn.TransformerEncoderLayer call in inference
(`_native_multi_head_attention`, `_transformer_encoder_layer_fwd`: their "fast path", taken in eval mode
under no_grad on cpu, cuda and PrivateUse1), composed of this backend's own kernels (linear, batched matmul,
softmax, layer norm, activations) so that they never leave the device.

torchvision's ViT (and fade's vit_b_16) run every encoder block's attention through the first in inference; on
the CPU fallback a batch-64 vit_b_16 inference ran at 2% of CUDA on the H200 (docs/ocl.md).

The semantics are ATen's CPU kernels' (aten/src/ATen/native/transformers/attention.cpp, transformer.cpp):
- query/key/value are (B, L, E) and (B, S, E), batch first; the projections are one (3E, E) weight and
  (3E,) bias, split in three for the query, the key and the value.
- mask_type 0: a (L, S) attention mask; 1: a (B, S) key-padding mask; 2: a mask already merged to
  (B, H, L, S). A boolean mask is True where attention is NOT allowed (masked_softmax's convention); a float
  mask is added to the scores.
- need_weights returns the softmax weights, averaged over the heads when average_attn_weights, else None.
- the encoder layer: x + attention(x) then norm (norm_first: x + attention(norm(x))), then the feed-forward
  (linear, relu or gelu, linear) with its own residual and norm; dropout is off (inference only).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fade.ocl.sources import NoKernel

FLOATS = (torch.float32, torch.float64)


def _additive_mask(mask, mask_type, batch: int, heads: int, q_len: int, k_len: int, dtype):
    """The mask as a float tensor added to the (B, H, L, S) scores, or None."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    elif mask.dtype != dtype:
        mask = mask.to(dtype)
    if mask_type == 1:  # key padding
        return mask.view(batch, 1, 1, k_len)
    if mask.dim() == 2:  # (L, S)
        return mask.view(1, 1, q_len, k_len)
    if mask.dim() == 3:  # (B*H or B, L, S)
        return mask.view(-1, heads if mask.shape[0] == batch * heads else 1, q_len, k_len)
    return mask  # (B, H, L, S)


def multi_head(query, key, value, embed_dim, heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask=None,
               need_weights=True, average_attn_weights=True, mask_type=None):
    """`_native_multi_head_attention` composed of ocl ops: (output, weights or None)."""
    batch, q_len, _ = query.shape
    k_len = key.shape[1]
    head_dim = embed_dim // heads
    if query is key and key is value:  # self-attention: one projection
        q, k, v = F.linear(query, qkv_weight, qkv_bias).split(embed_dim, dim=-1)
    else:
        w_q, w_k, w_v = qkv_weight.split(embed_dim, dim=0)
        b_q, b_k, b_v = qkv_bias.split(embed_dim, dim=0) if qkv_bias is not None else (None, None, None)
        q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def heads_first(t, length):
        return t.reshape(batch, length, heads, head_dim).transpose(1, 2)

    q, k, v = heads_first(q, q_len), heads_first(k, k_len), heads_first(v, k_len)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
    additive = _additive_mask(mask, mask_type, batch, heads, q_len, k_len, scores.dtype)
    if additive is not None:
        scores = scores + additive
    weights = torch.softmax(scores, dim=-1)
    attended = torch.matmul(weights, v).transpose(1, 2).reshape(batch, q_len, embed_dim)
    out = F.linear(attended, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (weights.mean(dim=1) if average_attn_weights else weights)


def native_multi_head_attention(op, args, kwargs, bound):
    query = bound["query"]
    if query.dtype not in FLOATS or query.is_nested or query.dim() != 3:
        raise NoKernel(f"multi-head attention over {query.dtype}, {query.dim()}-D")
    return multi_head(query, bound["key"], bound["value"], bound["embed_dim"], bound["num_head"],
                      bound["qkv_weight"], bound["qkv_bias"], bound["proj_weight"], bound["proj_bias"],
                      bound["mask"], bound["need_weights"], bound["average_attn_weights"], bound["mask_type"])


def transformer_encoder_layer(op, args, kwargs, bound):
    """`_transformer_encoder_layer_fwd` composed of ocl ops (nn.TransformerEncoderLayer in inference)."""
    x = bound["src"]
    if x.dtype not in FLOATS or x.is_nested or x.dim() != 3:
        raise NoKernel(f"transformer encoder layer over {x.dtype}, {x.dim()}-D")
    embed_dim, eps = bound["embed_dim"], bound["eps"]

    def norm(t, which):
        return F.layer_norm(t, (embed_dim,), bound[f"norm_weight_{which}"], bound[f"norm_bias_{which}"], eps)

    def attend(t):
        return multi_head(t, t, t, embed_dim, bound["num_heads"], bound["qkv_weight"], bound["qkv_bias"],
                          bound["proj_weight"], bound["proj_bias"], bound["mask"], False, True,
                          bound["mask_type"])[0]

    def feed_forward(t):
        hidden = F.linear(t, bound["ffn_weight_1"], bound["ffn_bias_1"])
        hidden = F.gelu(hidden) if bound["use_gelu"] else F.relu(hidden)
        return F.linear(hidden, bound["ffn_weight_2"], bound["ffn_bias_2"])

    if bound["norm_first"]:
        x = x + attend(norm(x, 1))
        return x + feed_forward(norm(x, 2))
    x = norm(x + attend(x), 1)
    return norm(x + feed_forward(x), 2)
