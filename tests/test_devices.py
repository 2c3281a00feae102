"""devices.py: device choice and its overrides, seeding, synchronize, descriptions."""

import random

import numpy
import pytest
import torch

from specdec_lib.core.devices import describe_device, get_device, seed_everything, synchronize
from specdec_lib.core.errors import ConfigError


def test_env_var_selects_device(monkeypatch):
    monkeypatch.setenv("SPECDEC_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


def test_prefer_overrides_env_var(monkeypatch):
    monkeypatch.setenv("SPECDEC_DEVICE", "not-a-device")
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")


def test_automatic_choice_is_best_available(monkeypatch):
    monkeypatch.delenv("SPECDEC_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert get_device().type == expected


def test_invalid_device_name_is_explained(monkeypatch):
    monkeypatch.setenv("SPECDEC_DEVICE", "banana")
    with pytest.raises(ConfigError, match=r"SPECDEC_DEVICE asks for device 'banana'.*not a valid.*cpu"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without cuda")
def test_unavailable_device_lists_available_ones():
    with pytest.raises(ConfigError, match=r"'cuda:0', which is not available.*Use one of: .*cpu"):
        get_device("cuda:0")


def test_seed_everything_makes_all_rngs_repeat():
    def draw():
        return random.random(), numpy.random.rand(), torch.rand(3).tolist()

    seed_everything(123)
    first = draw()
    seed_everything(123)
    assert draw() == first


def test_seed_everything_rejects_non_integers():
    with pytest.raises(ConfigError, match="seed must be an integer, got 1.5"):
        seed_everything(1.5)


def test_synchronize_is_a_noop_on_cpu():
    synchronize("cpu")
    synchronize(torch.device("cpu"))


def test_describe_cpu_names_threads_with_the_right_plural():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert describe_device("cpu") == "cpu (1 thread)"
        torch.set_num_threads(2)
        assert describe_device("cpu") == "cpu (2 threads)"
    finally:
        torch.set_num_threads(threads)
