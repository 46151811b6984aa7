"""The language models `fade bench llm` builds: `data/llm.toml` (or a user's TOML of the same rows, or a Hugging
Face config.json) parsed once into checked, frozen records.

The table holds knowledge (each model's shape from its config.json, each architecture's facts from its modeling
code, a source on every row); this module only validates it. A bad row is one line naming the file, the row and
the field (LlmTableError, a FadeUsageError: exit 2), the way fade.analyze.knobs checks knobs.toml.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from fade.errors import FadeUsageError
from fade.reading import UnreadableFile, parse_json, read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LLM_FILE = Path(__file__).resolve().parents[1] / "data" / "llm.toml"
CONFIG_FILE_MAX_BYTES = 1_000_000  # a config.json is a few kB; a file this large is not one
MLP_KINDS = ("gated", "plain")
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "learned")
# the largest value a shape field may take: a typo (an extra zero) stops here before it allocates terabytes
MAX_SHAPE_VALUE = 10_000_000


class LlmTableError(FadeUsageError):
    """A row of the model table (or a user's config file) is invalid; the message names file, row and field."""


@dataclass(frozen=True)
class Architecture:
    """What a model type's modeling code fixes (llm.toml says what each field means)."""

    model_type: str  # transformers' name: "llama", "qwen2", "gpt2"
    model_class: str  # "LlamaForCausalLM"
    mlp: str  # MLP_KINDS
    norm: str  # NORM_KINDS
    qkv_bias: bool
    output_bias: bool
    mlp_bias: bool
    positions: str  # POSITION_KINDS
    source: str
    config_names: dict = field(default_factory=dict)  # FADE field name -> the model type's config.json name


@dataclass(frozen=True)
class LlmConfig:
    """One model's shape. Field names are Llama's config.json names; Architecture.config_names maps them."""

    name: str
    architecture: Architecture
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    source: str
    rope_theta: Optional[float] = None
    rope_scaling: Optional[dict] = None
    norm_eps: Optional[float] = None
    sliding_window: Optional[int] = None  # tokens each layer attends back to; None: the whole context
    weights: Optional[str] = None  # a local Hugging Face model folder the weights load from; None: random init

    @property
    def model_type(self) -> str:
        return self.architecture.model_type

    def hf_fields(self) -> dict:
        """The keyword arguments transformers' AutoConfig.for_model takes for this shape, in the model type's
        own names. Token ids are set to None: random weights decode no text, and a default eos id would end a
        greedy run early."""
        fields = {
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
        }
        if self.architecture.positions == "rope":  # GPT-2 has neither GQA nor RoPE fields
            fields["num_key_value_heads"] = self.num_key_value_heads
            fields["head_dim"] = self.head_dim
        optional = {"rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling, "norm_eps": self.norm_eps,
                    "sliding_window": self.sliding_window}  # fmt: skip
        fields.update({name: value for name, value in optional.items() if value is not None})
        names = self.architecture.config_names
        named = {names.get(name, name): value for name, value in fields.items()}
        named.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
        return named

    def to_dict(self) -> dict:
        """The shape as a record stores it (`params.config`)."""
        return {
            "name": self.name, "model_type": self.model_type, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling, "norm_eps": self.norm_eps,
            "sliding_window": self.sliding_window, "source": self.source, "weights": self.weights,
        }  # fmt: skip


@dataclass(frozen=True)
class LlmTable:
    architectures: dict  # model_type -> Architecture
    configs: dict  # name -> LlmConfig, in file order


# FADE field name -> (required, kind). Kinds: "count" a positive integer, "bool", "number" > 0, "text", "table".
CONFIG_FIELDS = {
    "name": (True, "text"), "model_type": (True, "text"), "hidden_size": (True, "count"),
    "intermediate_size": (True, "count"), "num_hidden_layers": (True, "count"), "num_attention_heads": (True, "count"),
    "num_key_value_heads": (False, "count"), "head_dim": (False, "count"), "vocab_size": (True, "count"),
    "max_position_embeddings": (True, "count"), "tie_word_embeddings": (True, "bool"), "source": (True, "text"),
    "rope_theta": (False, "number"), "rope_scaling": (False, "table"), "norm_eps": (False, "number"),
    "sliding_window": (False, "count"), "weights": (False, "text"),
}  # fmt: skip
ARCHITECTURE_FIELDS = {
    "model_type": "text", "model_class": "text", "mlp": MLP_KINDS, "norm": NORM_KINDS, "qkv_bias": "bool",
    "output_bias": "bool", "mlp_bias": "bool", "positions": POSITION_KINDS, "source": "text", "config_names": "table",
}  # fmt: skip


def load_llm_table(path=None) -> LlmTable:
    """The bundled table (or a TOML file of the same rows at `path`): its architectures and configs. A user's
    file may leave out [[architecture]] rows; the bundled ones apply. LlmTableError for a bad row."""
    bundled = _parse_toml(LLM_FILE)
    architectures = _architectures(bundled, LLM_FILE.name)
    data = bundled if path is None else _parse_toml(Path(path))
    name = LLM_FILE.name if path is None else str(path)
    if path is not None and data.get("architecture"):
        architectures = {**architectures, **_architectures(data, name)}
    configs: dict = {}
    for index, row in enumerate(data.get("config", []), start=1):
        where = f"{name}: config {index} ({row.get('name', '?') if isinstance(row, dict) else '?'})"
        config = config_from_row(row, architectures, where)
        if config.name in configs:
            raise LlmTableError(f"{where}: name {config.name!r} is used twice")
        configs[config.name] = config
    unknown_tables = set(data) - {"architecture", "config"}
    if unknown_tables:
        raise LlmTableError(f"{name}: unknown table(s) {sorted(unknown_tables)}; the file holds [[architecture]] and [[config]] rows")
    return LlmTable(architectures=architectures, configs=configs)


def resolve_config(request: str, table: Optional[LlmTable] = None) -> LlmConfig:
    """`--config`: a bundled name, a TOML file of [[config]] rows (exactly one), a Hugging Face config.json, or a
    local Hugging Face model folder (config.json and its weights: config_from_folder).
    LlmTableError (exit 2) with a "did you mean" for an unknown name."""
    table = table or load_llm_table()
    if request in table.configs:
        return table.configs[request]
    path = Path(request)
    if path.is_dir():
        return config_from_folder(path, table.architectures)
    if path.suffix == ".json":
        return config_from_json(path, table.architectures)
    if path.suffix == ".toml":
        configs = list(load_llm_table(path).configs.values())
        if len(configs) != 1:
            raise LlmTableError(f"--config {request}: holds {len(configs)} [[config]] rows; give a file with exactly one")
        return configs[0]
    close = difflib.get_close_matches(request, list(table.configs), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise LlmTableError(f"--config {request!r}: unknown model{hint} (bundled: {', '.join(table.configs)}; "
                        "or give a .toml file of [[config]] rows or a Hugging Face config.json)")


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")  # what transformers' from_pretrained loads from a folder


def config_from_folder(folder: Path, architectures: dict) -> LlmConfig:
    """A local Hugging Face model folder (what save_pretrained writes: config.json and *.safetensors or
    pytorch_model*.bin): its config.json's shape, with `weights` naming the folder the model then loads from
    (nothing is downloaded). LlmTableError (exit 2) for a folder without either."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise LlmTableError(f"--config {folder}: a folder without config.json; give a Hugging Face model folder "
                            "(config.json and its weights), a config.json, a .toml file or a bundled name")
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
        raise LlmTableError(f"--config {folder}: no weights in the folder ({' or '.join(WEIGHT_FILES)}); for random "
                            f"weights give its config.json alone")
    config = config_from_json(config_file, architectures)
    return replace(config, weights=str(folder.resolve()), source=f"{folder} (weights loaded from it)")


def config_from_json(path: Path, architectures: dict) -> LlmConfig:
    """A Hugging Face config.json read back into FADE's fields through its architecture's config_names."""
    try:
        data = parse_json(read_bytes(path, what="cannot read --config", max_bytes=CONFIG_FILE_MAX_BYTES)
                          .decode("utf-8", errors="replace"), what=f"--config {path}")  # fmt: skip
    except UnreadableFile as error:
        raise LlmTableError(str(error)) from None
    where = f"--config {path}"
    if not isinstance(data, dict):
        raise LlmTableError(f"{where}: not a JSON object; give a Hugging Face config.json")
    model_type = data.get("model_type")
    if model_type not in architectures:
        raise LlmTableError(f"{where}: model_type {model_type!r} is not one FADE builds "
                            f"({', '.join(architectures)})")
    names = architectures[model_type].config_names
    row = {"name": str(data.get("_name_or_path") or path.stem), "model_type": model_type, "source": str(path)}
    for fade_name in CONFIG_FIELDS:
        if fade_name in row:
            continue
        value = data.get(names.get(fade_name, fade_name))
        if fade_name == "intermediate_size" and value is None and architectures[model_type].mlp == "plain":
            value = 4 * int(data.get(names.get("hidden_size", "hidden_size")) or 0)  # GPT-2: n_inner null is 4 x n_embd
        if fade_name == "tie_word_embeddings" and value is None:
            value = True  # transformers' default when the file leaves it out
        if fade_name == "rope_scaling" and value is None:
            value = data.get("rope_parameters") if isinstance(data.get("rope_parameters"), dict) else None
        if value is not None:
            row[fade_name] = value
    if isinstance(row.get("rope_scaling"), dict) and row["rope_scaling"].get("rope_type", "default") == "default":
        row.pop("rope_scaling")  # plain RoPE: rope_theta says it all
    if data.get("use_sliding_window") is False:
        row.pop("sliding_window", None)  # Qwen2 writes a window it does not use
    return config_from_row(row, architectures, where)


def _check_table(row, known, where: str) -> None:
    """LlmTableError unless `row` is a table whose fields are all among `known`."""
    if not isinstance(row, dict):
        raise LlmTableError(f"{where}: not a table of fields")
    unknown = set(row) - set(known)
    if unknown:
        raise LlmTableError(f"{where}: unknown field(s) {sorted(unknown)} (known: {', '.join(known)})")


def config_from_row(row, architectures: dict, where: str) -> LlmConfig:
    _check_table(row, CONFIG_FIELDS, where)
    values = {}
    for name, (required, kind) in CONFIG_FIELDS.items():
        if name not in row:
            if required:
                raise LlmTableError(f"{where}: field {name!r} is missing")
            continue
        values[name] = _checked(row[name], kind, f"{where}: field {name!r}")
    model_type = values.pop("model_type")
    if model_type not in architectures:
        close = difflib.get_close_matches(model_type, list(architectures), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise LlmTableError(f"{where}: field 'model_type' {model_type!r} has no [[architecture]] row{hint} "
                            f"(known: {', '.join(architectures)})")
    heads = values["num_attention_heads"]
    values.setdefault("num_key_value_heads", heads)
    if heads % values["num_key_value_heads"]:
        raise LlmTableError(f"{where}: field 'num_key_value_heads' {values['num_key_value_heads']} does not divide "
                            f"num_attention_heads {heads}")
    if "head_dim" not in values:
        if values["hidden_size"] % heads:
            raise LlmTableError(f"{where}: field 'head_dim' is missing and hidden_size {values['hidden_size']} is not "
                                f"a multiple of num_attention_heads {heads}")
        values["head_dim"] = values["hidden_size"] // heads
    if architectures[model_type].positions == "learned" and values["num_key_value_heads"] != heads:
        raise LlmTableError(f"{where}: field 'num_key_value_heads': {model_type} has no grouped-query attention")
    return LlmConfig(architecture=architectures[model_type], **values)


def _architectures(data: dict, name: str) -> dict:
    architectures: dict = {}
    for index, row in enumerate(data.get("architecture", []), start=1):
        where = f"{name}: architecture {index} ({row.get('model_type', '?') if isinstance(row, dict) else '?'})"
        _check_table(row, ARCHITECTURE_FIELDS, where)
        values = {}
        for field_name, kind in ARCHITECTURE_FIELDS.items():
            if field_name not in row:
                if field_name == "config_names":
                    continue
                raise LlmTableError(f"{where}: field {field_name!r} is missing")
            values[field_name] = _checked(row[field_name], kind, f"{where}: field {field_name!r}")
        for fade_name, own_name in values.get("config_names", {}).items():
            if fade_name not in CONFIG_FIELDS or not isinstance(own_name, str) or not own_name:
                raise LlmTableError(f"{where}: field 'config_names': {fade_name} = {own_name!r} must map one of "
                                    f"FADE's config fields to a non-empty name")
        if values["model_type"] in architectures:
            raise LlmTableError(f"{where}: model_type {values['model_type']!r} is used twice")
        architectures[values["model_type"]] = Architecture(**values)
    return architectures


def _checked(value, kind, what: str):
    """`value` if it is of `kind` (CONFIG_FIELDS' kinds, or a tuple of allowed strings), else LlmTableError."""
    if isinstance(kind, tuple):
        if value not in kind:
            raise LlmTableError(f"{what} is {value!r}; use one of {', '.join(kind)}")
        return value
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SHAPE_VALUE:
            raise LlmTableError(f"{what} is {value!r}; give a positive integer up to {MAX_SHAPE_VALUE}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise LlmTableError(f"{what} is {value!r}; give true or false")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise LlmTableError(f"{what} is {value!r}; give a number > 0")
        return float(value)
    if kind == "table":
        if not isinstance(value, dict):
            raise LlmTableError(f"{what} is {value!r}; give a table")
        return dict(value)
    if not isinstance(value, str) or not value.strip():
        raise LlmTableError(f"{what} is {value!r}; give a non-empty string")
    return value


def _parse_toml(path: Path) -> dict:
    try:
        text = read_bytes(path, what="cannot read --config").decode("utf-8", errors="replace")
        return tomllib.loads(text)
    except UnreadableFile as error:
        raise LlmTableError(str(error)) from None
    except tomllib.TOMLDecodeError as error:
        raise LlmTableError(f"{path}: not valid TOML ({error})") from None


def config_to_params(config: LlmConfig) -> dict:
    """`config` as a case's JSON parameters: its shape and its architecture, so that a worker rebuilds it
    without reading the user's file again (config_from_params)."""
    shape = {name: value for name, value in config.to_dict().items() if value is not None}
    architecture = {name: getattr(config.architecture, name) for name in Architecture.__dataclass_fields__}
    return {"shape": shape, "architecture": architecture}


def config_from_params(params: dict) -> LlmConfig:
    """The LlmConfig config_to_params wrote, checked again (a case's parameters come through a pipe)."""
    architecture = dict(params["architecture"])
    architectures = _architectures({"architecture": [architecture]}, "case parameters")
    return config_from_row(dict(params["shape"]), architectures, "case parameters")
