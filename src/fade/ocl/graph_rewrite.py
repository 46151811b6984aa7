"""Rewrites of an AOTAutograd graph before graph.py plans it.

`fold_batch_norms`: in an inference graph, an eval-mode batch norm whose input is a convolution read by nothing
else becomes part of the convolution: `fade_ocl::bn_fold` scales the weights per output channel and makes the
bias (normalization.bn_fold, one launch where the batch norm's was), the convolution runs with the scaled
weights and no bias, and the bias is added by an `add` node, which the plan fuses with the activation or
residual add that follows. The batch norm's pass over the activation (read and written once more: resnet50's
graph-mode inference spent 3.4 of its 27.3 ms in bn_eval on the H200) is gone. The weights are folded at every
call, so a change to them or to the running statistics is always seen. A training graph keeps its batch norms:
there the convolution's output is saved for the backward, a second reader.

FADE_OCL_BN_FOLD=off turns the rewrite off.
"""

from __future__ import annotations

import operator

import torch

from fade.ocl.memory import NAME
from fade.ocl.settings import setting

aten = torch.ops.aten

BN_FOLD = setting("FADE_OCL_BN_FOLD")

_library = torch.library.Library("fade_ocl", "FRAGMENT")  # kept alive here: the op lives as long as it does
_library.define("bn_fold(Tensor weight, Tensor? bias, Tensor? bn_weight, Tensor? bn_bias, Tensor running_mean, "
                "Tensor running_var, float eps) -> (Tensor, Tensor)")


def _bn_fold_composite(weight, bias, bn_weight, bn_bias, running_mean, running_var, eps):
    """bn_fold by aten ops (any device; the graph mode runs normalization.bn_fold's kernel instead)."""
    scale = 1 / torch.sqrt(running_var + eps)
    if bn_weight is not None:
        scale = scale * bn_weight
    shift = (bias if bias is not None else torch.zeros_like(running_mean)) - running_mean
    folded_bias = shift * scale + (bn_bias if bn_bias is not None else 0)
    view = [-1] + [1] * (weight.dim() - 1)
    return (weight * scale.view(view)).contiguous(), folded_bias.reshape(-1, 1, 1).contiguous()


def _bn_fold_fake(weight, bias, bn_weight, bn_bias, running_mean, running_var, eps):
    return (torch.empty(weight.shape, dtype=weight.dtype, device=weight.device),
            torch.empty((weight.shape[0], 1, 1), dtype=weight.dtype, device=weight.device))


_library.impl("bn_fold", _bn_fold_composite, "CompositeExplicitAutograd")
torch.library.register_fake("fade_ocl::bn_fold", _bn_fold_fake, lib=_library)
BN_FOLD_OP = torch.ops.fade_ocl.bn_fold.default


def _ocl_tensor(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.device.type == NAME and val.dtype in (torch.float32, torch.float64)


def _parameter(node) -> bool:
    """A graph input or attribute (a parameter or buffer), defined before every call_function node."""
    return isinstance(node, torch.fx.Node) and node.op in ("placeholder", "get_attr") and _ocl_tensor(node)


def _foldable(bn: torch.fx.Node):
    """(convolution node, its bound arguments, the batch norm's) when `bn` folds into the convolution before it."""
    if bn.op != "call_function" or bn.target is not aten._native_batch_norm_legit_no_training.default:
        return None
    names = ("input", "weight", "bias", "running_mean", "running_var", "momentum", "eps")
    norm = dict(zip(names, bn.args), **bn.kwargs)
    conv = norm.get("input")
    if not isinstance(conv, torch.fx.Node) or conv.op != "call_function" or \
            conv.target is not aten.convolution.default or len(conv.users) != 1 or len(conv.args) != 9:
        return None
    x, weight, bias, _, _, _, transposed, _, _ = conv.args
    if transposed or not _ocl_tensor(conv) or not _parameter(weight) or \
            (bias is not None and not _parameter(bias)) or \
            any(not _parameter(norm.get(name)) for name in ("running_mean", "running_var")) or \
            any(norm.get(name) is not None and not _parameter(norm[name]) for name in ("weight", "bias")):
        return None
    if any(user.op != "call_function" or user.target is not operator.getitem or user.args[1] != 0
           for user in bn.users):
        return None  # the saved mean and invstd (empty in eval mode) read somewhere
    return conv, norm


def fold_batch_norms(gm: torch.fx.GraphModule) -> int:
    """Fold every eval-mode batch norm that follows a convolution read by nothing else (module docstring); returns
    how many were folded. The new nodes carry fake values, as AOTAutograd's do."""
    if BN_FOLD == "off":
        return 0
    graph, folded = gm.graph, 0
    for bn in list(graph.nodes):
        found = _foldable(bn)
        if found is None:
            continue
        conv, norm = found
        x, weight, bias = conv.args[:3]
        conv_val, weight_val = conv.meta["val"], weight.meta["val"]
        mode = weight_val.fake_mode if hasattr(weight_val, "fake_mode") else None
        if mode is None:
            continue
        args = (weight, bias, norm.get("weight"), norm.get("bias"), norm["running_mean"], norm["running_var"],
                float(norm["eps"]))
        with mode:
            fold_val = _bn_fold_fake(weight_val, None, None, None, None, None, 0.0)
            add_val = aten.add.Tensor(conv_val, fold_val[1])
        with graph.inserting_before(conv):
            fold = graph.call_function(BN_FOLD_OP, args)
            new_weight = graph.call_function(operator.getitem, (fold, 0))
            new_bias = graph.call_function(operator.getitem, (fold, 1))
        fold.meta["val"] = fold_val
        new_weight.meta["val"], new_bias.meta["val"] = fold_val
        conv.args = (x, new_weight, None) + tuple(conv.args[3:])
        with graph.inserting_after(conv):
            add = graph.call_function(aten.add.Tensor, (conv, new_bias))
        add.meta["val"] = add_val
        for user in list(bn.users):
            user.replace_all_uses_with(add)
            graph.erase_node(user)
        graph.erase_node(bn)
        folded += 1
    if folded:
        graph.lint()
        gm.recompile()
    return folded
