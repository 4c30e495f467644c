"""A training run's checkpoints: writing one, finding the latest, checking its settings, restoring it.

    save_checkpoint(out, step, policy, optimizer, thermostat, adapo, config, verifier)   # out/checkpoint-{step}
    start = load_checkpoint(latest_checkpoint(out), policy, optimizer, thermostat, adapo)

Reading a checkpoint's files for --resume: a damaged or truncated file is a `CheckpointError`, not a traceback.

A run killed while it wrote a checkpoint, a full disk or a partial copy leaves a file that
torch or safetensors cannot read; every reader here names the file and says what to do
(delete that checkpoint and resume from the one before, or start afresh). A missing file
stays FileNotFoundError.
"""

from __future__ import annotations

import json
import random
import shutil
import tomllib
import zipfile
from dataclasses import fields
from pathlib import Path

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.settings import SETTINGS_FILE, dumps, other_settings, to_dict
from trainers.config import RECIPE_BASE, TrainConfig
from trainers.run_log import write_jsonl


class CheckpointError(InputError):
    """A checkpoint file that cannot be read (what is wrong, which file, and what to do instead)."""


def damaged(path, err: BaseException) -> CheckpointError:
    """The error for an unreadable checkpoint file `path` (the reader library's exception `err`)."""
    path = Path(path)
    return CheckpointError(f"{path} is truncated or damaged ({type(err).__name__}: {str(err)[:200]}); delete "
                           f"{path.parent} to resume from an earlier checkpoint, or start afresh without --resume")


def load_tensors(path, device: str = "cpu") -> dict:
    """safetensors.torch.load_file, with a damaged file as CheckpointError."""
    from safetensors.torch import load_file
    _exists(path)
    try:
        return load_file(str(path), device=device)
    except Exception as err:  # SafetensorError, OSError, ...: the file cannot be used either way
        raise damaged(path, err) from None


def load_state(path, keys: tuple[str, ...] = ()) -> dict:
    """torch.load of our own trainer state (RNG states are tuples: weights_only=False), checked to be a dict
    holding `keys`; a damaged or foreign file is CheckpointError."""
    import torch
    _exists(path)
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as err:  # zip, pickle and EOF errors: torch has no single type for "truncated"
        raise damaged(path, err) from None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not an alpha-gym trainer state (no {missing}); delete {Path(path).parent} "
                              "to resume from an earlier checkpoint, or start afresh without --resume")
    return state


# ------------------------------------------------------------------------------ writing and restoring
ARCHIVE_FILE = "archive.npz"


def save_checkpoint(out: Path, step: int, policy, optimizer, thermostat, adapo, config: TrainConfig,
                    verifier=None, verifier_calls: int = 0) -> Path:
    """out/checkpoint-{step}: adapters (PEFT format), optimizer, RNG states, controller states, step, the
    verifier's novelty archive (archive.npz), which `train(resume=True)` restores, and the answers scored so far
    (trainer_state.json's "verifier_calls", the log's running count)."""
    import torch
    target = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "thermostat": thermostat.state_dict() if thermostat else None,
                "adapo": adapo.state_dict() if adapo else None}, tmp / "trainer_state.pt")
    (tmp / "trainer_state.json").write_text(json_dumps({"step": step, "config": config.to_dict(),
                                                        "verifier_calls": verifier_calls}, indent=2))
    if (out / SETTINGS_FILE).is_file():  # what the checkpoint was trained with, for a resume to check against
        shutil.copyfile(out / SETTINGS_FILE, tmp / SETTINGS_FILE)
    if thermostat is not None:
        write_jsonl(tmp / "thermostat.jsonl", thermostat.log)
    if verifier is not None:
        verifier.save_archive(tmp / ARCHIVE_FILE)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def check_checkpoint_settings(out: Path, tables: dict, ignore=()) -> None:
    """Refuse to resume the latest checkpoint in `out` with other settings than it was trained with.

    Its own settings.toml holds them; checkpoints written before that record have the TrainConfig in
    trainer_state.json. No checkpoint: nothing to compare (`train` says so itself).
    """
    ckpt = latest_checkpoint(out)
    if ckpt is None:
        return
    stamp = ckpt / SETTINGS_FILE if (ckpt / SETTINGS_FILE).is_file() else ckpt / "trainer_state.json"
    claim_stamp(stamp, None, lambda path: _other_checkpoint_settings(path, tables, ignore, f"{ckpt} was trained"))


def _other_checkpoint_settings(path: Path, tables: dict, ignore, who: str):
    """The ConfigError naming what differs between the settings a checkpoint's stamp `path` records (its
    settings.toml, or the TrainConfig of an older checkpoint's trainer_state.json) and `tables`, or None."""
    if path.name == SETTINGS_FILE:
        return other_settings(tomllib.loads(path.read_text(encoding="utf-8")), tables, ignore, who)
    state = json.loads(path.read_text())
    if not isinstance(state.get("config"), dict):
        return None
    known = {f.name for f in fields(TrainConfig)}
    # fields the record lacks take the defaults of its time, RECIPE_BASE's
    recorded = {"train": tomllib.loads(dumps({"t": to_dict(RECIPE_BASE.with_(
        **{k: v for k, v in state["config"].items() if k in known}))}))["t"]}
    return other_settings(recorded, {"train": tables["train"]}, ignore, who)


def latest_checkpoint(out: Path) -> Path | None:
    found = [(int(p.name.split("-")[1]), p) for p in Path(out).glob("checkpoint-*")
             if p.is_dir() and p.name.split("-")[1].isdigit() and (p / "trainer_state.pt").exists()]
    return max(found)[1] if found else None


def load_checkpoint(ckpt: Path, policy, optimizer, thermostat, adapo) -> int:
    """Restore everything `save_checkpoint` wrote; returns the step it was taken after."""
    import torch
    from peft import set_peft_model_state_dict
    # both files read before anything is restored: a damaged one (CheckpointError) leaves the run untouched
    weights = load_tensors(Path(ckpt) / "adapter_model.safetensors", device=str(next(policy.parameters()).device))
    state = load_state(Path(ckpt) / "trainer_state.pt", keys=("step", "optimizer", "rng", "thermostat", "adapo"))
    result = set_peft_model_state_dict(policy, weights)
    mismatch = list(result.unexpected_keys) + [k for k in result.missing_keys if "lora_" in k]
    if mismatch:
        raise CheckpointError(f"checkpoint {ckpt} does not match the model's adapters (e.g. {mismatch[:3]}): "
                              "resume with the recipe and model the run started with")
    optimizer.load_state_dict(state["optimizer"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    for controller, key in ((thermostat, "thermostat"), (adapo, "adapo")):
        if (controller is None) != (state[key] is None):
            raise CheckpointError(f"checkpoint {ckpt} was written with {key} "
                                  f"{'off' if state[key] is None else 'on'}; resume with the same config")
        if controller is not None:
            controller.load_state_dict(state[key])
    return int(state["step"])


def checkpoint_verifier_calls(ckpt: Path) -> int:
    """The answers scored up to a checkpoint (0 for one written before the count was kept: a resumed run of that
    time counts from its restart)."""
    path = Path(ckpt) / "trainer_state.json"
    try:
        return int(json.loads(path.read_text()).get("verifier_calls", 0)) if path.is_file() else 0
    except (ValueError, TypeError, AttributeError) as err:
        raise damaged(path, err) from None


# ------------------------------------------------------------------------------ reading, checked
def check_folder(folder) -> None:
    """Read-check every file a Hugging Face Trainer resumes from (safetensors, torch zips, JSON) before it does,
    so that a damaged one is a CheckpointError naming it rather than a traceback from deep inside the Trainer."""
    from safetensors import safe_open
    for path in sorted(Path(folder).iterdir()):
        try:
            if path.suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as fh:  # checks the header against the file's size
                    fh.keys()
            elif path.suffix in (".pt", ".pth", ".bin") and zipfile.is_zipfile(path):  # torch.save's format
                with zipfile.ZipFile(path) as z:
                    bad = z.testzip()  # every member's CRC
                if bad is not None:
                    raise ValueError(f"member {bad} fails its CRC check")
            elif path.suffix in (".pt", ".pth"):  # a truncated zip has lost its directory, at the end
                raise ValueError("not a torch zip archive (truncated?)")
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
        except Exception as err:
            raise damaged(path, err) from None


def _exists(path) -> None:
    if not Path(path).is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
