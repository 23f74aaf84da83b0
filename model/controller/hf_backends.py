"""Optional HuggingFace ``transformers`` backends for the controller (local paths only).

:class:`HFGenerator` wraps any causal LM saved with ``save_pretrained`` (greedy steps, KV cache
kept across calls and cropped to the longest common prefix); :class:`HFSequenceScorer` wraps a
sequence-classification model as a PRM: with one label the score is ``sigmoid(logit)``, with two
it is the softmax probability of label 1. Nothing is downloaded: models load with
``local_files_only=True``. ``torch`` and ``transformers`` are imported when a backend is made.
"""

from __future__ import annotations

import math
from pathlib import Path

from heteroreason.model.controller.brsd import ControllerError, reusable_prefix

__all__ = ["HFGenerator", "HFSequenceScorer"]


def _load(kind: str, path: Path | str):
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise ControllerError("the HuggingFace backends need torch and transformers: "
                              "pip install torch==2.13.0 transformers") from exc
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ControllerError(f"{path}: not a saved model (no config.json); HuggingFace "
                              "backends load local paths only")
    cls = getattr(transformers, kind)
    model = cls.from_pretrained(str(path), local_files_only=True)
    model.eval()
    limit = getattr(model.config, "max_position_embeddings", None) or 2**31
    return model, int(limit)


class HFGenerator:
    """Greedy step generation with a local causal LM."""

    def __init__(self, name: str, path: Path | str):
        self.name = name
        self.model, self.max_context = _load("AutoModelForCausalLM", path)
        self._cached: list[int] = []
        self._past = None

    def generate_step(self, context, *, max_tokens, stop):
        import torch

        common = reusable_prefix(self, context, max_tokens)
        past = self._past
        if past is not None and common > 0:
            excess = past.get_seq_length() - common
            if excess > 0:
                past.crop(-excess)  # keep the longest common prefix
        else:
            past, common = None, 0
        with torch.no_grad():
            out = self.model(torch.tensor([list(context[common:])]), past_key_values=past,
                             use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1]
            cached = list(context)
            step = []
            while True:
                token = int(torch.argmax(logits))
                step.append(token)
                if token in stop or len(step) == max_tokens:
                    break
                out = self.model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1]
                cached.append(token)
        self._past, self._cached = past, cached
        return step


class HFSequenceScorer:
    """A local sequence-classification model as the PRM."""

    def __init__(self, name: str, path: Path | str):
        self.name = name
        self.model, self.max_context = _load("AutoModelForSequenceClassification", path)
        labels = self.model.config.num_labels
        if labels not in (1, 2):
            raise ControllerError(f"{name}: a PRM needs 1 or 2 labels, the model has {labels}")

    def score_step(self, context, step):
        import torch

        tokens = list(context) + list(step)
        if len(tokens) > self.max_context:
            raise ControllerError(f"{self.name}: context of {len(tokens)} tokens exceeds its "
                                  f"maximum of {self.max_context}")
        with torch.no_grad():
            logits = self.model(torch.tensor([tokens])).logits[0].double()
        if logits.numel() == 1:
            return 1.0 / (1.0 + math.exp(-float(logits[0])))
        return float(torch.softmax(logits, dim=-1)[1])
