"""Kernel names from public CUDA and ROCm profiles get the class (and conv direction) their library implies,
and a malformed kernels.toml row is refused with a message naming the row and the fix."""

from pathlib import Path

import pytest

from fade.analyze.kernels import CLASSES, KernelTableError, classify_kernel, classify_with, load_kernel_table

FIXTURES = Path(__file__).parent / "fixtures"


def _cases(filename: str) -> list:
    cases = []
    for line in (FIXTURES / filename).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        expected, name = line.split("\t", 1)
        kernel_class, _, direction = expected.partition("/")
        cases.append(pytest.param(name, kernel_class, direction or None, id=f"{expected}:{name[:40]}"))
    return cases


@pytest.mark.parametrize("name, kernel_class, direction", _cases("kernel_names_rocm.txt"))
def test_rocm_kernel_names_classify_as_their_library_implies(name, kernel_class, direction):
    result = classify_kernel(name)
    assert (result.kernel_class, result.direction) == (kernel_class, direction), result


@pytest.mark.parametrize("name, kernel_class, direction", _cases("kernel_names_cuda.txt"))
def test_cuda_kernel_names_classify_as_their_library_implies(name, kernel_class, direction):
    result = classify_kernel(name)
    assert (result.kernel_class, result.direction) == (kernel_class, direction), result


def test_the_fixtures_cover_every_class_but_other():
    seen = {case.values[1] for case in _cases("kernel_names_rocm.txt") + _cases("kernel_names_cuda.txt")}
    assert seen == set(CLASSES) - {"other"}


def test_an_unknown_name_is_other_with_no_library():
    result = classify_kernel("my_custom_kernel_v2")
    assert result.to_dict() == {"class": "other", "library": None, "direction": None}


def test_a_backward_weight_convolution_is_told_apart_for_the_miopen_advice():
    assert classify_kernel("naive_conv_wrw_nhwc_bf16").direction == "bwd_weight"
    assert classify_kernel("MIOpenCvBwdWrW").direction == "bwd_weight"
    assert classify_kernel("igemm_bwd_gtcx_nhwc_fp16").direction == "bwd_data"


def test_every_bundled_row_has_a_source_and_a_known_class():
    table = load_kernel_table()
    assert table.rules and all(rule.source.strip() and rule.kernel_class in CLASSES for rule in table.rules)


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "kernels.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("row, message", [
    ('class = "gemmm"\nlibrary = "x"\npatterns = ["a"]\nsource = "s"', "did you mean 'gemm'"),
    ('class = "gemm"\nlibrary = "x"\npatterns = ["a"]\nsource = "  "', "needs a non-empty 'source'"),
    ('class = "gemm"\nlibrary = "x"\npatterns = ["a"]', "needs a non-empty 'source'"),
    ('class = "gemm"\nlibrary = "x"\npatterns = ["(unclosed"]\nsource = "s"', "not a valid regular expression"),
    ('class = "gemm"\nlibrary = "x"\npatterns = []\nsource = "s"', "non-empty list"),
    ('class = "gemm"\nlibrary = "x"\npatterns = ["a"]\nsource = "s"\ndirection = "fwd"', "only on convolution rows"),
    ('class = "gemm"\nlibrary = "x"\npaterns = ["a"]\nsource = "s"', "did you mean 'patterns'"),
])
def test_a_bad_row_is_refused_with_the_row_and_the_fix(tmp_path, row, message):
    with pytest.raises(KernelTableError) as error:
        load_kernel_table(_write(tmp_path, "[[kernel]]\n" + row + "\n"))
    text = str(error.value)
    assert message in text and "[[kernel]] row 1" in text and "\n" not in text


def test_glob_rows_match_the_whole_name(tmp_path):
    table = load_kernel_table(_write(tmp_path, '[[kernel]]\nclass = "gemm"\nlibrary = "mine"\nsyntax = "glob"\n'
                                               'patterns = ["my_gemm_*"]\nsource = "test"\n'))
    assert classify_with(table, "my_gemm_128x128").kernel_class == "gemm"
    assert classify_with(table, "not_my_gemm_128").kernel_class == "other"
