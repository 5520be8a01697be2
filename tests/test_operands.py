"""A calibration kernel's operands: uniform values in [-1, 1), a block of draws repeated."""

from __future__ import annotations

import numpy as np

from dlperf.backends.operands import BLOCK, uniform


def test_an_operand_is_uniform_in_minus_one_to_one_of_its_shape():
    a = uniform((3, 5, 7), np.random.default_rng(0))
    assert a.shape == (3, 5, 7) and a.dtype == np.float32
    assert (a >= -1).all() and (a < 1).all() and len(np.unique(a)) == a.size


def test_a_large_operand_repeats_one_block_of_draws():
    a = uniform((2 * BLOCK + 10,), np.random.default_rng(0))
    assert len(np.unique(a)) > 0.99 * BLOCK  # not one value throughout (float32 draws collide)
    assert (a[BLOCK:2 * BLOCK] == a[:BLOCK]).all() and (a[2 * BLOCK:] == a[:10]).all()
    assert a.min() < -0.99 and a.max() > 0.99


def test_pytorchs_operands_repeat_a_block_in_tensors_of_its_own_allocator():
    torch = __import__("pytest").importorskip("torch")
    from dlperf.backends.torch_kernels import repeated_uniform

    gen = torch.Generator().manual_seed(0)
    a = repeated_uniform((2, BLOCK + 5), gen)
    flat = a.view(-1)
    assert a.shape == (2, BLOCK + 5) and a.dtype == torch.float32
    assert bool((a >= -1).all() and (a < 1).all())
    assert torch.equal(flat[BLOCK:2 * BLOCK], flat[:BLOCK]) and torch.equal(
        flat[2 * BLOCK:], flat[:10])
    assert len(torch.unique(flat[:BLOCK])) > 0.99 * BLOCK
    assert a.data_ptr() % 64 == 0  # aligned as the training step's tensors
    small = repeated_uniform((3, 4), gen)
    assert small.shape == (3, 4) and len(torch.unique(small)) == 12
