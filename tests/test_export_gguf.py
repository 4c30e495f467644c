"""`alpha-gym export-gguf`: a model folder as a GGUF file, served by llama.cpp with the answers transformers gives.

The converter is llama.cpp's own, read out of llama-cpp-python's source archive: tests that convert take it
from $ALPHA_GYM_GGUF_CONVERTER or the user's cache folder, where `.ci/install` puts the archive, and skip
with that reason without it. The served test also needs llama-cpp-python's server and the SmolLM2 GGUF.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from alpha_gym.commands.main import main
from llama_serving import llama_server, skip_without_llama_cpp
from trainers.export_gguf import (CONVERTER_ENV, ExportError, converter_script, export_gguf, find_converter,
                                  merge_adapters, model_source)


def _converter() -> Path:
    """The sdist (or converter) the user's setup holds; conftest points the cache folder at a temporary one."""
    try:
        return find_converter()  # --converter's defaults: $ALPHA_GYM_GGUF_CONVERTER, then the cache folder
    except ExportError:
        pass
    home_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "alpha_gym" / "llama.cpp"
    found = sorted(home_cache.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        pytest.skip(f"llama.cpp's converter not found: set {CONVERTER_ENV}, or run .ci/install (it downloads "
                    f"llama-cpp-python's sdist into {home_cache})")
    return found[-1]


def _model_folder(path: Path, *, weights=True, tokenizer=True, config='{"architectures": ["LlamaForCausalLM"]}'):
    path.mkdir(parents=True)
    (path / "config.json").write_text(config)
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def test_a_missing_or_invalid_folder_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="not found"):
        model_source(tmp_path / "nothing")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(ExportError, match="already a GGUF file"):
        model_source(tmp_path / "m.gguf")
    with pytest.raises(ExportError, match="holds no model: expected config.json"):
        model_source(tmp_path)
    with pytest.raises(ExportError, match="no weights"):
        model_source(_model_folder(tmp_path / "a", weights=False))
    with pytest.raises(ExportError, match="no tokenizer"):
        model_source(_model_folder(tmp_path / "b", tokenizer=False))
    with pytest.raises(ExportError, match="not valid JSON"):
        model_source(_model_folder(tmp_path / "c", config='{"architectures": '))
    with pytest.raises(ExportError, match="names no architectures"):
        model_source(_model_folder(tmp_path / "d", config="{}"))
    # an `alpha-gym sft` output is taken by its model/; a training run by its latest complete checkpoint
    sft = tmp_path / "sft"
    _model_folder(sft / "model")
    assert model_source(sft) == model_source(sft / "model") and model_source(sft).folder == sft / "model"
    run = tmp_path / "run"
    for step, complete in ((2, True), (4, True), (6, False)):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "adapter_config.json").write_text("{}")
        if complete:
            (run / f"checkpoint-{step}" / "trainer_state.pt").write_bytes(b"")
    assert (model_source(run).kind, model_source(run).folder.name) == ("adapter", "checkpoint-4")
    (run / "checkpoint-4" / "adapter_config.json").write_text('{"base_model_name_or_path": "/moved/base"}')
    with pytest.raises(ExportError, match="cannot be loaded .*; pass it with --base"):
        merge_adapters(run / "checkpoint-4", tmp_path / "merged")
    (run / "checkpoint-4" / "adapter_config.json").write_text("[")
    with pytest.raises(ExportError, match="adapter_config.json is not valid JSON"):
        model_source(run)
    # the command: one line, exit 2, nothing written
    for args, says in (([str(tmp_path / "nothing")], "not found"), ([str(tmp_path)], "holds no model"),
                       ([str(sft), "--out", str(tmp_path / "x.bin")], "ending in .gguf"),
                       ([str(sft), "--base", "b"], "--base is for adapter folders")):
        out = ["--out", str(tmp_path / "x.gguf")] if "--out" not in args else []
        assert main(["export-gguf", *args, *out, "--converter", str(tmp_path / "none.py")]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "x.gguf").exists()


def test_the_converter_is_found_or_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv(CONVERTER_ENV, raising=False)
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ExportError, match=r"pip download --no-deps --no-binary :all: llama-cpp-python"):
        find_converter()
    sdist = tmp_path / "cache" / "llama.cpp" / "llama_cpp_python-0.3.36.tar.gz"
    sdist.parent.mkdir(parents=True)
    sdist.write_bytes(b"not a tar archive")
    assert find_converter() == sdist
    with pytest.raises(ExportError, match="cannot be read as a .tar.gz"):
        with converter_script(sdist):
            pass
    monkeypatch.setenv(CONVERTER_ENV, str(tmp_path / "missing.py"))
    with pytest.raises(FileNotFoundError, match="missing.py not found"):
        find_converter()
    with pytest.raises(ExportError, match="holds no convert_hf_to_gguf.py"):
        with converter_script(tmp_path):
            pass
    checkout = tmp_path / "llama.cpp"
    (checkout / "vendor" / "llama.cpp").mkdir(parents=True)
    (checkout / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").write_text("")
    with converter_script(checkout) as script:
        assert script == checkout / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"


def test_the_sdist_yields_llama_cpps_converter_and_its_packages():
    with converter_script(_converter()) as script:
        assert script.name == "convert_hf_to_gguf.py"
        assert (script.parent / "gguf-py" / "gguf" / "gguf_writer.py").is_file()
        assert (script.parent / "conversion" / "llama.py").is_file()
        kept = script.parent
    assert not kept.exists()  # read into a temporary folder, removed after


def test_a_failed_conversion_says_what_the_converter_said_and_leaves_nothing(tmp_path):
    folder = _model_folder(tmp_path / "m", config='{"architectures": ["NoSuchModelForCausalLM"]}')
    with pytest.raises(ExportError, match=r"(?s)llama.cpp's converter failed on .*NoSuchModelForCausalLM"):
        export_gguf(folder, tmp_path / "out" / "m.gguf", converter=_converter())
    assert list((tmp_path / "out").iterdir()) == []


def _tiny_base(folder: Path):
    """A 2-layer Llama with SmolLM2's real tokenizer (the converter identifies the pre-tokenizer by its output)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainers.models import smollm2_gguf
    try:
        gguf = smollm2_gguf()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_adapters_are_merged_into_their_base_before_conversion(tmp_path):
    import numpy as np
    import torch
    from gguf import GGUFReader
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    converter = _converter()
    base_dir = _tiny_base(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(1)  # init_lora_weights=False: B is random too, so the merge moves every adapted weight
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    ckpt = tmp_path / "run" / "checkpoint-3"
    peft.save_pretrained(ckpt)
    (ckpt / "trainer_state.pt").write_bytes(b"")
    assert json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    down = peft.base_model.model.model.layers[0].mlp.down_proj
    merged = (down.base_layer.weight + down.get_delta_weight("default")).detach().numpy()
    before = AutoModelForCausalLM.from_pretrained(base_dir).model.layers[0].mlp.down_proj.weight.detach().numpy()

    summary = export_gguf(tmp_path / "run", tmp_path / "run.gguf", converter=converter)
    assert summary["kind"] == "adapter" and summary["source"] == str(ckpt) and summary["outtype"] == "f32"
    tensors = {t.name: np.asarray(t.data) for t in GGUFReader(tmp_path / "run.gguf").tensors}
    got = tensors["blk.0.ffn_down.weight"].reshape(merged.shape)
    assert np.array_equal(got, merged) and not np.allclose(got, before)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the merged copy is gone
    with pytest.raises(ExportError, match="exists: pass --force"):
        export_gguf(ckpt, tmp_path / "run.gguf", converter=converter)
    f16 = export_gguf(ckpt, tmp_path / "run.gguf", converter=converter, outtype="f16", overwrite=True)
    assert f16["bytes"] < summary["bytes"]
    half = {t.name: t for t in GGUFReader(tmp_path / "run.gguf").tensors}["blk.0.ffn_down.weight"]
    assert np.array_equal(np.asarray(half.data).reshape(merged.shape), merged.astype(np.float16))


@pytest.mark.slow
def test_the_served_export_answers_as_transformers_does(tmp_path):
    """SmolLM2 exported at f32, served by llama.cpp and asked through `alpha-gym eval` at temperature 0 with
    repeat_penalty 1.0: the same answers, token for token, as transformers' greedy decoding in-process."""
    from alpha_gym.evaluation.endpoint import read_raw
    from alpha_gym.tasks.sets import brief_set
    from trainers.rollout import generate_answers
    from trainers.models import load_base, materialise_default_model

    skip_without_llama_cpp()
    converter = _converter()
    try:
        folder = materialise_default_model()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    gguf = tmp_path / "smollm2-f32.gguf"
    assert main(["export-gguf", str(folder), "--out", str(gguf), "--converter", str(converter)]) == 0
    briefs = brief_set("probe")[:3]
    model, tokenizer = load_base(folder)
    local = [a[0] for a in generate_answers(model, tokenizer, [b.prompt() for b in briefs], max_new_tokens=64)]
    del model
    out = tmp_path / "eval"
    with llama_server(gguf, alias="smollm2-f32") as url:
        rc = main(["eval", "--base-url", url, "--model", "smollm2-f32", "--out", str(out), "--limit", "3",
                   "--max-tokens", "64", "--extra-body", '{"repeat_penalty": 1.0}', "--concurrency", "1",
                   "--no-progress", "--end", "2016-12-30", "--timeout", "600"])  # a busy machine: a real deadline
    assert rc == 0
    raw = read_raw(out / "endpoint.jsonl")
    served = [raw[f"{b.id}#0"]["completion"] for b in briefs]
    assert all(len(a) > 10 for a in local)  # answers to compare, not empty strings
    assert served == local
