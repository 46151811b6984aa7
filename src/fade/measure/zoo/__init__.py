"""The model zoo: which networks `fade bench models` knows, their input sizes and parameter counts.

This registry imports no torch; `fade.measure.zoo.workload` builds a network with its synthetic batch.
The image classifiers are torchvision's architectures rebuilt in plain torch.nn (`vision.py`: the five seed
CNNs, ResNeXt and Wide ResNet; `vision_more.py`: the other CNNs of issue 27; `vit.py`: ViT-B/16), the token
transformers are GPT-2 small and BERT base (`transformer.py`). Parameter counts are FADE's own models' counts;
for the image classifiers they equal torchvision's, which `TORCHVISION_PARAMS` cites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# torchvision's parameter counts, from the `num_params` field of each model's ImageNet-1K weight metadata
# in pytorch/vision torchvision/models/{alexnet,resnet,vgg,mobilenetv2}.py (v0.13+), also listed in the
# table at https://pytorch.org/vision/stable/models.html#classification; read 2026-05. The ten of issue 27
# were read in torchvision 0.28.0's sources (file:line of the `"num_params"` line, IMAGENET1K_V1), 2026-07.
TORCHVISION_PARAMS_SOURCE = "pytorch/vision torchvision/models/*.py, Weights.meta['num_params'] (IMAGENET1K_V1)"
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "mobilenet_v2": 3_504_872,
    "convnext_small": 50_223_688,  # convnext.py:236, ConvNeXt_Small_Weights
    "densenet161": 28_681_000,  # densenet.py:293, DenseNet161_Weights
    "mobilenet_v3_small": 2_542_856,  # mobilenetv3.py:347, MobileNet_V3_Small_Weights
    "mobilenet_v3_large": 5_483_032,  # mobilenetv3.py:303, MobileNet_V3_Large_Weights (V2 at :321, the same)
    "resnext50_32x4d": 25_028_904,  # resnet.py:491, ResNeXt50_32X4D_Weights
    "wide_resnet50_2": 68_883_240,  # resnet.py:602, Wide_ResNet50_2_Weights
    "mnasnet1_0": 4_383_312,  # mnasnet.py:273, MNASNet1_0_Weights
    "efficientnet_b0": 5_288_548,  # efficientnet.py:449, EfficientNet_B0_Weights
    "regnet_y_400mf": 4_344_144,  # regnet.py:423, RegNet_Y_400MF_Weights
    "vit_b_16": 86_567_656,  # vision_transformer.py:357, ViT_B_16_Weights
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
    max_size: Optional[int] = None  # the largest input a transformer has position embeddings for (vit_b_16: 224 px)

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
        ZooModel("convnext_small", "fade.measure.zoo.vision_more:convnext_small", "image", 224, 1000,
                 TORCHVISION_PARAMS["convnext_small"], "sgd",
                 "torchvision convnext_small (stochastic depth 0.4, layer scale 1e-6)", min_size=32),
        ZooModel("densenet161", "fade.measure.zoo.vision_more:densenet161", "image", 224, 1000,
                 TORCHVISION_PARAMS["densenet161"], "sgd", "torchvision densenet161 (growth 48, no dropout)", min_size=29),
        ZooModel("mobilenet_v3_small", "fade.measure.zoo.vision_more:mobilenet_v3_small", "image", 224, 1000,
                 TORCHVISION_PARAMS["mobilenet_v3_small"], "sgd", "torchvision mobilenet_v3_small (width 1.0)"),
        ZooModel("mobilenet_v3_large", "fade.measure.zoo.vision_more:mobilenet_v3_large", "image", 224, 1000,
                 TORCHVISION_PARAMS["mobilenet_v3_large"], "sgd", "torchvision mobilenet_v3_large (width 1.0)"),
        ZooModel("resnext50_32x4d", "fade.measure.zoo.vision:resnext50_32x4d", "image", 224, 1000,
                 TORCHVISION_PARAMS["resnext50_32x4d"], "sgd", "torchvision resnext50_32x4d (32 groups of 4)"),
        ZooModel("wide_resnet50_2", "fade.measure.zoo.vision:wide_resnet50_2", "image", 224, 1000,
                 TORCHVISION_PARAMS["wide_resnet50_2"], "sgd", "torchvision wide_resnet50_2 (bottlenecks x2)"),
        ZooModel("mnasnet1_0", "fade.measure.zoo.vision_more:mnasnet1_0", "image", 224, 1000,
                 TORCHVISION_PARAMS["mnasnet1_0"], "sgd", "torchvision mnasnet1_0 (B1, depth 1.0)"),
        ZooModel("efficientnet_b0", "fade.measure.zoo.vision_more:efficientnet_b0", "image", 224, 1000,
                 TORCHVISION_PARAMS["efficientnet_b0"], "sgd", "torchvision efficientnet_b0 (stochastic depth 0.2)"),
        ZooModel("regnet_y_400mf", "fade.measure.zoo.vision_more:regnet_y_400mf", "image", 224, 1000,
                 TORCHVISION_PARAMS["regnet_y_400mf"], "sgd", "torchvision regnet_y_400mf"),
        # position embeddings for 14 x 14 patches of 16 px: the input is exactly 224 px square
        ZooModel("vit_b_16", "fade.measure.zoo.vit:vit_b_16", "image", 224, 1000, TORCHVISION_PARAMS["vit_b_16"], "sgd",
                 "torchvision vit_b_16 (12 layers, hidden 768, patch 16)", min_size=224, max_size=224),
        # 124,439,808: Hugging Face GPT2Model for the `gpt2` checkpoint; the LM head is tied to the embedding
        ZooModel("gpt2-small", "fade.measure.zoo.transformer:gpt2", "tokens", 512, 50257, 124_439_808, "adamw",
                 "GPT-2 small: 12 layers, hidden 768, 12 heads, vocab 50257, tied LM head; next-token loss", max_size=1024),
        # 109,482,240 (Hugging Face BertModel, bert-base-uncased) + 1,538 for the 2-class head
        ZooModel("bert-base", "fade.measure.zoo.transformer:bert", "tokens", 512, 2, 109_482_240 + 1_538, "adamw",
                 "BERT base: 12 layers, hidden 768, 12 heads, vocab 30522, pooler + 2-class head", max_size=512),
    )
}  # fmt: skip
SEED_NETWORKS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2")  # dlprimitives' five
# issue 27: the rest of pytorch_dlprim's 14-network table, and vit_b_16
MORE_NETWORKS = ("convnext_small", "densenet161", "mobilenet_v3_small", "mobilenet_v3_large", "resnext50_32x4d",
                 "wide_resnet50_2", "mnasnet1_0", "efficientnet_b0", "regnet_y_400mf", "vit_b_16")


def zoo_model(name: str) -> Optional[ZooModel]:
    return ZOO.get(name)
