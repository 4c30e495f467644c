"""A trained policy for inference (`load_for_inference`) and the share of answers the verifier accepts.

The answers themselves come from `trainers.rollout` (`generate_answers`, `sample_groups`)."""

from __future__ import annotations

from typing import Sequence


def valid_share(verifier, answers: Sequence[str]) -> float:
    """Share of answers the verifier finds valid."""
    if not answers:
        return 0.0
    return sum(verifier.score(a).valid for a in answers) / len(answers)


def load_for_inference(path: str | None):
    """(model, tokenizer) from a training checkpoint (PEFT adapters over their recorded base), a model folder, a
    packaged model's name (`trainers.models.PACKAGED_MODELS`, e.g. "gemma3-270m"), or None (the default model).

    A checkpoint written by the training loop holds `adapter_config.json`; its
    `base_model_name_or_path` names the base the adapters were trained on.
    """
    import json
    from pathlib import Path

    from trainers.models import load_base, packaged_model
    if packaged_model(path) is None and (Path(path) / "adapter_config.json").exists():
        from peft import PeftModel
        base_path = json.loads((Path(path) / "adapter_config.json").read_text()).get("base_model_name_or_path")
        base, tokenizer = load_base(base_path or None)
        return PeftModel.from_pretrained(base, str(path)), tokenizer
    return load_base(path)
