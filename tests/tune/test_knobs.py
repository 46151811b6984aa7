"""The knob table: every row valid and sourced, and filtered by backend, torch version, mode and workload."""

import pytest

from fade.analyze.knobs import GROUP_ORDER, KnobTableError, Target, load_knobs, searched_knobs, unmet_needs


def test_every_bundled_row_loads_with_a_source():
    knobs = load_knobs()
    assert {knob.id for knob in knobs} >= {"precision", "channels_last", "compile", "cudnn_benchmark", "miopen_find_mode",
                                          "tunableop", "sdpa_backend", "optimizer_impl", "miopen_suggest_nhwc"}
    assert all(knob.source for knob in knobs)


def test_tunableop_is_left_out_on_cuda_before_torch_2_14_and_searched_on_rocm():
    knobs = load_knobs()
    _, left_out = searched_knobs(knobs, Target("cuda", "2.13.0+cu130", "train", image=True))
    assert "no real candidates" in left_out["tunableop"]
    searched, _ = searched_knobs(knobs, Target("cuda", "2.14.0+cu130", "train", image=True))
    assert "tunableop" in [knob.id for knob in searched]
    searched, _ = searched_knobs(knobs, Target("rocm", "2.11.0+rocm6.4", "train", image=True))
    assert {"tunableop", "miopen_find_mode", "miopen_suggest_nhwc"} <= {knob.id for knob in searched}


def test_search_order_follows_the_groups():
    searched, _ = searched_knobs(load_knobs(), Target("rocm", "2.11.0", "train", image=True, attention=True))
    groups = [knob.group for knob in searched]
    assert groups == sorted(groups, key=GROUP_ORDER.index)


def test_workload_and_mode_filters():
    _, left_out = searched_knobs(load_knobs(), Target("cuda", "2.11.0", "infer", image=False, attention=False))
    assert "channels_last" in left_out and "sdpa_backend" in left_out and "optimizer_impl" in left_out


def test_nhwc_suggestion_needs_channels_last():
    knobs = load_knobs()
    assert unmet_needs(knobs, {"miopen_suggest_nhwc": "on", "channels_last": "off"}) == "miopen_suggest_nhwc=on needs channels_last=on"
    assert unmet_needs(knobs, {"miopen_suggest_nhwc": "on", "channels_last": "on"}) is None


@pytest.mark.parametrize(
    "row, message",
    [
        ('id = "x"\ngroup = "precision"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"', "'source'"),
        ('id = "x"\ngroup = "speed"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"\nsource = "s"', "group"),
        ('id = "x"\ngroup = "backend"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "env"\nsource = "s"', "env table"),
        ('id = "x"\ngroup = "backend"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "env"\nsource = "s"\nenv = { a = { V = "1" } }', "baseline"),
        ('id = "x"\ngroup = "compile"\nvalues = ["a", "b", "c"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"\nsource = "s"\norder = ["c"]', "order"),
        ('id = "x"\ngroup = "compile"\nvalues = ["a", "b", "c"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"\nsource = "s"\norder = ["c", "a"]', "order"),
        ('id = "x"\ngroup = "precision"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"\nsource = "s"\ncompiled_order = { fit = ["b"] }', "compiled_order"),
        ('id = "x"\ngroup = "precision"\nvalues = ["a", "b"]\nwhere = "any"\nmodes = ["train"]\nkind = "model"\nsource = "s"\ncompiled_order = { train = ["a"] }', "compiled_order"),
    ],
)
def test_a_bad_row_names_the_row_and_field(tmp_path, row, message):
    path = tmp_path / "knobs.toml"
    path.write_text("[[knob]]\n" + row + "\n")
    with pytest.raises(KnobTableError, match=message) as caught:
        load_knobs(path)
    assert "knob 1 (x)" in str(caught.value)


def test_the_compile_modes_are_tried_graphs_first_and_half_precision_first_under_a_compile():
    """knobs.toml: reduce-overhead before default (one compile measures fusion and CUDA graphs), max-autotune last;
    under a compile mode the precisions bf16, fp16, tf32 (results/tune-h200-s11/)."""
    from fade.analyze.tuneplan import tried_order

    knobs = {knob.id: knob for knob in load_knobs()}
    assert tried_order(knobs["compile"]) == ["reduce-overhead", "default", "max-autotune"]
    assert knobs["precision"].alternatives == ("tf32", "amp-bf16", "amp-fp16")  # eager: the table's order
    assert knobs["precision"].compiled_order["train"] == ("amp-bf16", "amp-fp16", "tf32")


def test_a_value_brings_what_it_needs_unless_the_judged_knob_or_another_value_holds_it():
    from fade.analyze.knobs import with_needs

    knobs = [knob for knob in load_knobs() if knob.id in ("kv_cache", "decode_compile", "channels_last", "miopen_suggest_nhwc")]
    base = {knob.id: knob.baseline for knob in knobs}
    assert with_needs(knobs, {**base, "decode_compile": "reduce-overhead"})["kv_cache"] == "static"
    judged = with_needs(knobs, {**base, "decode_compile": "reduce-overhead"}, keep="kv_cache")
    assert judged["kv_cache"] == "dynamic"
    assert unmet_needs(knobs, judged) == "decode_compile=reduce-overhead needs kv_cache=static"
    assert with_needs(knobs, {**base, "miopen_suggest_nhwc": "on"})["channels_last"] == "on"
    assert with_needs(knobs[:1], {"decode_compile": "reduce-overhead"}) == {"decode_compile": "reduce-overhead"}


def test_a_need_is_filled_when_the_config_leaves_the_needed_knob_out():
    from fade.analyze.knobs import with_needs

    knobs = [knob for knob in load_knobs() if knob.id in ("kv_cache", "decode_compile", "weight_quant")]
    filled = with_needs(knobs, {"decode_compile": "reduce-overhead", "weight_quant": "int8"})
    assert filled["kv_cache"] == "static"
