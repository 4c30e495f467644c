"""Thread pinning (alpha_gym.threads): a block runs on the asked thread count and the old count comes back."""

from __future__ import annotations

import pytest

from alpha_gym import threads


def test_blas_threads_pins_and_restores():
    libs = threads._libraries()
    if not libs:
        pytest.skip("numpy's OpenBLAS exposes no thread setter here")
    _, getter = libs[0]
    before = int(getter())
    with threads.blas_threads(1):
        assert int(getter()) == 1
    assert int(getter()) == before


def test_torch_threads_pins_and_restores_even_on_error():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with threads.single_threaded():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
