"""Messages of the filter specs and kernel files that say what is wrong (never mislead)."""

import numpy as np
import pytest

from xcorr_app.errors import InputError
from xcorr_app.filters import bank_weights, parse_kernel_spec
from xcorr_app.filters._banks import mix_weights

from sample_paths import stack_path
from cli_helpers import assert_clean_error, xcorr


@pytest.mark.parametrize("spec", ["gaussian:inf", "gaussian:nan", "dog:1,inf"])
def test_infinite_sigma_says_finite(spec):
    with pytest.raises(InputError, match="finite"):
        parse_kernel_spec(spec)


@pytest.mark.parametrize("spec", ["dog:4,2", "dog:2,2", "dog:1,inf", "dog:1,nan", "dog:1,3,2"])
def test_bank_dog_follows_the_kernel_rule(spec):
    with pytest.raises(InputError, match="sigma"):
        bank_weights(spec, channels=1)


def test_bank_dog_increasing_still_works():
    assert bank_weights("dog:1,2,4", channels=2).shape[:2] == (2, 2)


def test_text_file_named_npy_is_not_pickled(tmp_path):
    path = tmp_path / "k.npy"
    path.write_text("1 2 3\n4 5 6\n")
    for load in (lambda: parse_kernel_spec(str(path)), lambda: bank_weights(str(path), 1),
                 lambda: mix_weights(str(path), 1)):
        with pytest.raises(InputError, match="not a NumPy .npy file") as info:
            load()
        assert "pickle" not in str(info.value)


def test_pickled_npy_is_not_loaded(tmp_path):
    path = tmp_path / "k.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="object"):
        parse_kernel_spec(str(path))


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3), (2, 1)])
def test_complex_kernel_files_are_refused(tmp_path, shape):
    path = tmp_path / "c.npy"
    np.save(path, (np.ones(shape) + 1j).astype(np.complex64))
    for load in (lambda: parse_kernel_spec(str(path)), lambda: bank_weights(str(path), 1),
                 lambda: mix_weights(str(path), 1)):
        with pytest.raises(InputError, match="complex"):
            load()


@pytest.mark.parametrize("option,spec", [("--kernel", "gaussian:inf"), ("--bank", "dog:4,2"),
                                         ("--kernel", "COMPLEX"), ("--bank", "COMPLEX"),
                                         ("--kernel", "TEXT"), ("--mix", "COMPLEX")])
def test_cli_spec_errors_are_one_line(tmp_path, option, spec):
    if spec == "COMPLEX":
        spec = tmp_path / "c.npy"
        np.save(spec, np.ones((3, 3) if option != "--mix" else (1,), np.complex128))
    elif spec == "TEXT":
        spec = tmp_path / "t.npy"
        spec.write_text("0 1 0\n1 1 1\n0 1 0\n")
    res = xcorr("filter", stack_path("moon"), option, spec, "--out", tmp_path / "f.tif",
                "--device", "cpu")
    assert_clean_error(res)
    assert res.returncode == 2
    assert "pickle" not in res.stderr and "must be > 0" not in res.stderr
    assert not (tmp_path / "f.tif").exists()
