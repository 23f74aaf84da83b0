"""The decoder tests' shared fixture: test-tiny's model with random weights."""

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import activation_scales, quantize


@pytest.fixture(scope="module")
def tiny_model():
    weights = random_weights(qwen2_config("test-tiny"), seed=1)
    return quantize(weights, activation_scales(weights, seed=2, sequences=1, length=32))
