"""R3 `jepa_stress`: a JEPA world model of the train window, scenario worlds, and the stress channel.

Importing this package does not import torch. The numpy parts (geometry
targets, the R3 formula, stylised facts, the manifest, the provider once
scenario panels are cached) work without it; fitting and building scenario
panels need the optional extra ``alpha-gym[stress]`` (torch, safetensors, tqdm).

    from alpha_gym.stress import attach
    attach(verifier)            # verifier.stress from verifier.config.stress_checkpoint (off when None;
                                # "auto", the default: the model `alpha-gym stress fit` registered for the panel)

Modules: `geometry` (targets, R3 value, stylised facts, AUC), `config`,
`data` (features), `model` (torch modules), `fit` (training, gates,
checkpoints), `scenarios` (shifted latents -> panels, cache), `provider`
(the channel), `registry` (the model fitted for each panel), `report` (the gates as text); `alpha-gym stress ...` is in `alpha_gym/commands/stress.py`.
Validating the scenarios scores formulas, so it sits one layer up, in
`alpha_gym.evaluation.stress_validation`: this package never imports the verifier.
"""

from alpha_gym.stress.config import SCENARIOS, StressConfig, StressError, preset
from alpha_gym.stress.geometry import TARGET_NAMES, geometry_targets, r3_value
from alpha_gym.stress.provider import StressProvider, attach

__all__ = ["SCENARIOS", "StressConfig", "StressError", "StressProvider", "TARGET_NAMES", "attach",
           "geometry_targets", "preset", "r3_value"]
