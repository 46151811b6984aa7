"""Networks outside FADE's zoo, as `module:function` workloads for `fade tune` and hand_config.py (issue 26):
ConvNeXt-T and Swin-T training (torchvision), ViT-B/16 inference (timm), EfficientNet-B0 training (timm: depthwise
convolutions, squeeze-and-excitation, SiLU; many small kernels), a Llama-shaped causal LM training and BERT-base
training (transformers, built from configs: nothing downloaded; BERT a sequence classifier from BertConfig's
defaults: post-norm encoder, GELU, absolute positions).

Run from the repository root, which makes `benchmarks` importable (fade's module:function loader adds the
current directory to sys.path, as `python -m` does; tune_matrix.py also puts the root on PYTHONPATH):

    fade tune benchmarks.outside_zoo:convnext_tiny --mode train --batch 32 -o convnext.tuning.json
    fade tune benchmarks.outside_zoo:swin_t --mode train --batch 32 -o swin.tuning.json
    fade tune benchmarks.outside_zoo:vit_b_16 --mode infer --batch 64 -o vit.tuning.json
    fade tune benchmarks.outside_zoo:efficientnet_b0 --mode train --batch 64 -o effnet.tuning.json
    fade tune benchmarks.outside_zoo:bert_base --mode train --batch 32 -o bert.tuning.json
    fade tune benchmarks.outside_zoo:llama_lm --mode train --batch 8 -o llama.tuning.json

Each function takes the batch size and returns what fade.measure.zoo.workload.user_workload accepts: the
tuple (model, (inputs, target), loss_fn), or a Workload when the optimizer is not the default SGD. The caller
seeds torch (fade: step.runner.WEIGHT_SEED) before calling, so weights are the same on every side; the
synthetic batch comes from its own generator (DATA_SEED). Everything is built on the CPU and moved by the
caller. torchvision, timm and transformers are imported inside the functions: none is needed to import this
module.

The language model computes its own loss: LabelledModel calls the Hugging Face model with
labels=input_ids (the model shifts them for next-token prediction) and returns its ModelOutput; loss_fn reads
`output.loss`. The Workload's target is None, so FADE's step calls loss_fn(output) (Workload.loss), and
model(*inputs) gets (input_ids, labels) positionally from the wrapper's forward, which torch.compile traces
like any module.
"""

from __future__ import annotations

import torch

DATA_SEED = 1  # fade.measure.zoo.workload.DATA_SEED: the synthetic batch
IMAGE_SIZE = 224  # ConvNeXt-T and ViT-B/16 at their ImageNet resolution
IMAGE_CLASSES = 1000
LM_SEQUENCE = 512  # tokens per sample
# Llama-shaped, GPT-2-small-sized: 12 layers, hidden 768, 12 heads with 4 key/value heads (grouped-query
# attention), SwiGLU MLP 2048, vocabulary 32000: about 125 M parameters with the untied LM head.
LLAMA_SHAPE = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
               "num_key_value_heads": 4, "vocab_size": 32000}  # fmt: skip
ADAMW_LR = 1e-4  # as the zoo's gpt2-small (fade.measure.zoo.workload.ADAMW_LR)
ADAMW_WEIGHT_DECAY = 0.01


def _images(batch_size: int, size: int = IMAGE_SIZE):
    """(images [batch, 3, size, size], class labels [batch]) from DATA_SEED."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    images = torch.randn(batch_size, 3, size, size, generator=generator)
    labels = torch.randint(0, IMAGE_CLASSES, (batch_size,), generator=generator)
    return images, labels


def convnext_tiny(batch_size: int):
    """torchvision ConvNeXt-T (28.6 M parameters), random weights, 224 px, cross-entropy: a training case."""
    import torchvision

    model = torchvision.models.convnext_tiny(weights=None)
    return model, _images(batch_size), torch.nn.functional.cross_entropy


def swin_t(batch_size: int):
    """torchvision Swin-T (28.3 M parameters), random weights, 224 px, cross-entropy: a training case with shifted
    window attention (rolls, masks, relative position bias) between GEMMs."""
    import torchvision

    model = torchvision.models.swin_t(weights=None)
    return model, _images(batch_size), torch.nn.functional.cross_entropy


def vit_b_16(batch_size: int):
    """timm ViT-B/16 (vit_base_patch16_224, 86.6 M parameters), random weights, 224 px: an inference case
    (the cross-entropy is what FADE's inference check evaluates on the output)."""
    import timm

    model = timm.create_model("vit_base_patch16_224", pretrained=False)
    return model, _images(batch_size), torch.nn.functional.cross_entropy


def efficientnet_b0(batch_size: int):
    """timm EfficientNet-B0 (5.3 M parameters), random weights, 224 px, cross-entropy: a training case whose
    step is many small depthwise, squeeze-and-excitation and SiLU kernels rather than a few large GEMMs."""
    import timm

    model = timm.create_model("efficientnet_b0", pretrained=False)
    return model, _images(batch_size), torch.nn.functional.cross_entropy


class LabelledModel(torch.nn.Module):
    """A Hugging Face model called with labels: forward(input_ids, labels) -> its ModelOutput (with .loss)."""

    def __init__(self, language_model):
        super().__init__()
        self.language_model = language_model

    def forward(self, input_ids, labels):
        return self.language_model(input_ids=input_ids, labels=labels)


def own_loss(output):
    """The model's own loss from its labels (a causal LM: next-token cross-entropy, shifted inside the model)."""
    return output.loss


def causal_lm(batch_size: int, *, sequence: int = LM_SEQUENCE, **shape):
    """transformers LlamaForCausalLM from a LlamaConfig of `shape` (LLAMA_SHAPE by default), SDPA attention,
    no KV cache, as a Workload with AdamW; tokens from DATA_SEED, labels = the tokens."""
    import transformers

    from fade.measure.zoo.workload import Workload

    shape = {**LLAMA_SHAPE, **shape}
    config = transformers.LlamaConfig(**shape, max_position_embeddings=max(sequence, 2048), use_cache=False,
                                      attn_implementation="sdpa")  # fmt: skip
    model = LabelledModel(transformers.LlamaForCausalLM(config))
    generator = torch.Generator().manual_seed(DATA_SEED)
    tokens = torch.randint(0, shape["vocab_size"], (batch_size, sequence), generator=generator)

    def adamw(parameters):
        return torch.optim.AdamW(parameters, lr=ADAMW_LR, weight_decay=ADAMW_WEIGHT_DECAY)

    facts = {"size": sequence, "size_unit": "tokens", "optimizer": f"AdamW lr {ADAMW_LR} weight decay {ADAMW_WEIGHT_DECAY}",
             "loss": "the model's own next-token cross-entropy (labels)",
             "attention": getattr(config, "_attn_implementation", None), "transformers": transformers.__version__}  # fmt: skip
    # Workload(model, inputs, target, loss_fn, samples, make_optimizer, description, facts)
    return Workload(model, (tokens, tokens), None, own_loss, batch_size, adamw,
                    f"transformers LlamaForCausalLM {shape}, sequence {sequence}", facts)  # fmt: skip


def llama_lm(batch_size: int):
    """The issue's transformer training case: causal_lm at LLAMA_SHAPE, sequence LM_SEQUENCE."""
    return causal_lm(batch_size)


BERT_SEQUENCE = 128  # tokens per sample: BERT's fine-tuning length


def bert_base(batch_size: int):
    """transformers BertForSequenceClassification from BertConfig() (BERT-base: 12 layers, hidden 768, 110 M
    parameters), SDPA attention, two labels, sequence BERT_SEQUENCE, AdamW: a fine-tuning step."""
    import transformers

    from fade.measure.zoo.workload import Workload

    config = transformers.BertConfig(num_labels=2, attn_implementation="sdpa")
    model = LabelledModel(transformers.BertForSequenceClassification(config))
    generator = torch.Generator().manual_seed(DATA_SEED)
    tokens = torch.randint(0, config.vocab_size, (batch_size, BERT_SEQUENCE), generator=generator)
    labels = torch.randint(0, 2, (batch_size,), generator=generator)

    def adamw(parameters):
        return torch.optim.AdamW(parameters, lr=ADAMW_LR, weight_decay=ADAMW_WEIGHT_DECAY)

    facts = {"size": BERT_SEQUENCE, "size_unit": "tokens", "optimizer": f"AdamW lr {ADAMW_LR} weight decay {ADAMW_WEIGHT_DECAY}",
             "loss": "the model's own cross-entropy over two labels", "attention": getattr(config, "_attn_implementation", None),
             "transformers": transformers.__version__}  # fmt: skip
    return Workload(model, (tokens, labels), None, own_loss, batch_size, adamw,
                    f"transformers BertForSequenceClassification (BERT-base), sequence {BERT_SEQUENCE}", facts)  # fmt: skip
