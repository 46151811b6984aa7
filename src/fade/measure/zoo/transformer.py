"""A GPT-2-class decoder and a BERT-class encoder in plain torch.nn, sized by a TransformerConfig.

GPT-2 small (`GPT2_SMALL`): 12 layers, hidden 768, 12 heads, MLP 3072, vocabulary 50257, 1024 positions,
pre-LayerNorm blocks, tanh-approximated GELU, language-model head tied to the token embedding. Parameters:
124,439,808, the count of Hugging Face `GPT2Model` / `GPT2LMHeadModel` for the `gpt2` checkpoint (the tied
head adds none). Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", and
https://huggingface.co/openai-community/gpt2/blob/main/config.json.

BERT base (`BERT_BASE`): 12 layers, hidden 768, 12 heads, MLP 3072, vocabulary 30522, 512 positions, 2 token
types, post-LayerNorm blocks, exact GELU, a tanh pooler on the first token. The encoder with its pooler has
109,482,240 parameters, the count of Hugging Face `BertModel` for `bert-base-uncased` (Devlin et al. 2018;
https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json). The benchmark adds a
sequence-classification head (Linear 768 -> 2, 1,538 parameters): the shape of BERT fine-tuning.

Attention goes through `F.scaled_dot_product_attention` (causal for GPT-2), so torch picks its flash or
memory-efficient kernel where it can, as current training code does. Dropout is 0.1 everywhere, as in both
configurations. Initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms; GPT-2 scales its residual
projections by 1/sqrt(2 * layers), as the paper describes. State-dict key names are FADE's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    max_positions: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    dropout: float = 0.1
    type_vocab_size: int = 0  # BERT's segment embeddings; 0 for GPT-2
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")


GPT2_SMALL = TransformerConfig(vocab_size=50257, max_positions=1024, hidden=768, layers=12, heads=12, intermediate=3072)
BERT_BASE = TransformerConfig(
    vocab_size=30522, max_positions=512, hidden=768, layers=12, heads=12, intermediate=3072,
    type_vocab_size=2, layer_norm_eps=1e-12,
)  # fmt: skip
BERT_CLASSES = 2  # the classification head of the benchmark (a sentence-pair or sentiment task)


class SelfAttention(nn.Module):
    def __init__(self, config: TransformerConfig, *, causal: bool):
        super().__init__()
        self.heads = config.heads
        self.causal = causal
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.proj = nn.Linear(config.hidden, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        # [B, S, 3H] -> 3 x [B, heads, S, H/heads]
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, hidden))


class MLP(nn.Module):
    def __init__(self, config: TransformerConfig, approximate: str):
        super().__init__()
        self.fc = nn.Linear(config.hidden, config.intermediate)
        self.act = nn.GELU(approximate=approximate)
        self.proj = nn.Linear(config.intermediate, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class DecoderBlock(nn.Module):
    """GPT-2: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.attn = SelfAttention(config, causal=True)
        self.ln_2 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.mlp = MLP(config, approximate="tanh")
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.ln_1(x)))
        return x + self.dropout(self.mlp(self.ln_2(x)))


class EncoderBlock(nn.Module):
    """BERT: ln(x + attn(x)), then ln(x + mlp(x))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = SelfAttention(config, causal=False)
        self.ln_1 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.mlp = MLP(config, approximate="none")
        self.ln_2 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.dropout(self.attn(x)))
        return self.ln_2(x + self.dropout(self.mlp(x)))


class GPT2(nn.Module):
    """Token ids [B, S] -> next-token logits [B, S, vocab]."""

    def __init__(self, config: TransformerConfig = GPT2_SMALL):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden)
        self.wpe = nn.Embedding(config.max_positions, config.hidden)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        _init_weights(self)
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2 * layers)
            for projection in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(projection.weight, 0.0, 0.02 / math.sqrt(2 * config.layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied LM head: no parameters of its own


class BertClassifier(nn.Module):
    """Token ids [B, S] -> class logits [B, classes] through a BERT encoder and its pooler."""

    def __init__(self, config: TransformerConfig = BERT_BASE, classes: int = BERT_CLASSES):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden)
        self.position_embeddings = nn.Embedding(config.max_positions, config.hidden)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden)
        self.embedding_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.layers))
        self.pooler = nn.Linear(config.hidden, config.hidden)
        self.classifier = nn.Linear(config.hidden, classes)
        _init_weights(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        # every token in segment 0: embedding row 0 of token types, as a single-sentence input has
        x = self.word_embeddings(tokens) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        x = self.drop(self.embedding_norm(x))
        for block in self.blocks:
            x = block(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(self.drop(pooled))


def _init_weights(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def gpt2(**sizes) -> GPT2:
    """GPT-2 small, or another size: `gpt2(layers=24, hidden=1024, heads=16, intermediate=4096)` is GPT-2 medium."""
    return GPT2(replace(GPT2_SMALL, **sizes))


def bert(classes: int = BERT_CLASSES, **sizes) -> BertClassifier:
    """BERT base with a `classes`-way head, or another size through TransformerConfig fields."""
    return BertClassifier(replace(BERT_BASE, **sizes), classes)
