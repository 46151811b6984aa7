"""The model zoo: which networks `fade bench models` knows, their input sizes and parameter counts.

This registry imports no torch; `fade.measure.zoo.workload` builds a network with its synthetic batch.
The CNNs are torchvision's architectures rebuilt in plain torch.nn (`vision.py`), the transformers are
GPT-2 small and BERT base (`transformer.py`). Parameter counts are FADE's own models' counts; for the CNNs
they equal torchvision's, which `TORCHVISION_PARAMS` cites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# torchvision's parameter counts, from the `num_params` field of each model's ImageNet-1K weight metadata
# in pytorch/vision torchvision/models/{alexnet,resnet,vgg,mobilenetv2}.py (v0.13+), also listed in the
# table at https://pytorch.org/vision/stable/models.html#classification; read 2026-05.
TORCHVISION_PARAMS_SOURCE = "pytorch/vision torchvision/models/*.py, Weights.meta['num_params'] (IMAGENET1K_V1)"
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "mobilenet_v2": 3_504_872,
}


@dataclass(frozen=True)
class ZooModel:
    name: str
    builder: str  # "module:function" that returns the nn.Module
    kind: str  # "image": float images [B, 3, size, size]; "tokens": int64 ids [B, size]
    default_size: int  # image side in pixels, or sequence length in tokens
    classes: int  # classes of the label (image classes; vocabulary for next-token prediction)
    params: int  # parameters of FADE's model, every one trainable
    optimizer: str  # "sgd" (momentum 0.9, lr 0.01) or "adamw" (lr 1e-4, weight decay 0.01)
    note: str
    min_size: int = 1  # the smallest input size the network accepts
    max_size: Optional[int] = None  # the longest sequence a transformer has position embeddings for

    @property
    def size_unit(self) -> str:
        return "px" if self.kind == "image" else "tokens"


ZOO = {
    model.name: model
    for model in (
        ZooModel("alexnet", "fade.measure.zoo.vision:alexnet", "image", 224, 1000, TORCHVISION_PARAMS["alexnet"], "sgd",
                 "torchvision alexnet", min_size=63),
        ZooModel("resnet18", "fade.measure.zoo.vision:resnet18", "image", 224, 1000, TORCHVISION_PARAMS["resnet18"], "sgd",
                 "torchvision resnet18"),
        ZooModel("resnet50", "fade.measure.zoo.vision:resnet50", "image", 224, 1000, TORCHVISION_PARAMS["resnet50"], "sgd",
                 "torchvision resnet50 (v1.5)"),
        ZooModel("vgg16", "fade.measure.zoo.vision:vgg16", "image", 224, 1000, TORCHVISION_PARAMS["vgg16"], "sgd",
                 "torchvision vgg16 (no batch norm)", min_size=32),
        ZooModel("mobilenet_v2", "fade.measure.zoo.vision:mobilenet_v2", "image", 224, 1000, TORCHVISION_PARAMS["mobilenet_v2"],
                 "sgd", "torchvision mobilenet_v2 (width 1.0)"),
        # 124,439,808: Hugging Face GPT2Model for the `gpt2` checkpoint; the LM head is tied to the embedding
        ZooModel("gpt2-small", "fade.measure.zoo.transformer:gpt2", "tokens", 512, 50257, 124_439_808, "adamw",
                 "GPT-2 small: 12 layers, hidden 768, 12 heads, vocab 50257, tied LM head; next-token loss", max_size=1024),
        # 109,482,240 (Hugging Face BertModel, bert-base-uncased) + 1,538 for the 2-class head
        ZooModel("bert-base", "fade.measure.zoo.transformer:bert", "tokens", 512, 2, 109_482_240 + 1_538, "adamw",
                 "BERT base: 12 layers, hidden 768, 12 heads, vocab 30522, pooler + 2-class head", max_size=512),
    )
}  # fmt: skip
SEED_NETWORKS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2")  # dlprimitives' five


def zoo_model(name: str) -> Optional[ZooModel]:
    return ZOO.get(name)
