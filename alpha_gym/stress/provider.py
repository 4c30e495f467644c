"""The R3 provider: re-score a formula in the scenario worlds and turn the score drop into the channel value.

    R3 = -min(1, 0.4 * log(1 + mean_s max(0, CPCV_real - CPCV_s)))

over the enabled scenarios s. Each world is a `Verifier` on the scenario
panel with the same config (costs, CPCV, limits) and no archive seeding, and
the formula's score there is `Verifier.trade(formula).cpcv`: the same
number as R1 on the real panel. Scoring needs no torch once the scenario
panels are cached (they are built at fit time).

When there is no checkpoint, when the model failed a gate, or when every
scenario is switched off, the provider is OFF: `channel` returns
(0.0, "off: <why>") for every formula, never an invented value. A checkpoint
fitted on other data is refused (`StressError`).
"""

from __future__ import annotations

import logging

from alpha_gym.book.answer import InvalidVerdict
from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.config import SCENARIOS, StressError
from alpha_gym.stress.geometry import r3_value
from alpha_gym.stress.registry import AUTO, NOT_FITTED, lookup, named_folder

log = logging.getLogger("alpha_gym")


class StressProvider:
    """`channel(formula_text, base_cpcv) -> (value, state)` for the verifier's R3 hook."""

    def __init__(self, worlds: dict | None = None, reason: str = "", manifest: dict | None = None,
                 directory: str | None = None, identity: str | None = None):
        self.worlds = dict(worlds or {})
        self.reason = reason
        self.manifest = manifest
        self.directory = directory
        self._identity = identity

    @property
    def on(self) -> bool:
        return bool(self.worlds)

    @property
    def identity(self) -> str:
        """The world model R3 uses, as every score names it: the checkpoint's content hash
        (`checkpoint.identity`), or "off" when R3 is off ("unidentified": worlds built by hand)."""
        if not self.on:
            return ck.OFF
        return self._identity or "unidentified"

    # ------------------------------------------------------------ construction
    @classmethod
    def off(cls, reason: str, manifest: dict | None = None, directory=None) -> "StressProvider":
        return cls({}, reason, manifest, None if directory is None else str(directory))

    @classmethod
    def from_checkpoint(cls, directory, verifier) -> "StressProvider":
        """The provider of a checkpoint directory for this verifier's panel ("auto": the one registered
        for the panel by `alpha-gym stress fit`, see `alpha_gym.stress.registry`).

        Off (with the reason) when the directory holds no model, the model
        failed its gates, or no scenario is enabled. Raises `StressError` when
        the directory does not exist (or is a file), the checkpoint was fitted
        on other data or its weights do not match the manifest.
        """
        if directory is None:
            return cls.off("no world model configured (config.stress_checkpoint is None)")
        if directory == AUTO:
            directory = lookup(verifier.panel)
            if directory is None:
                return cls.off(NOT_FITTED)
        d = named_folder(directory)
        if not ck.has_checkpoint(d):
            partial = (d / ck.PARTIAL_JSON).is_file()
            why = "a fit is in progress there (resume it with `alpha-gym stress fit`)" if partial else "none found"
            return cls.off(f"no world model at {d}: {why}", directory=d)
        manifest = ck.read_manifest(d)
        ck.check_data(manifest, verifier.panel, d)
        ck.check_weights(manifest, d)
        gates = manifest.get("gates", {})
        if not gates.get("passed", False):
            failed = [name for name in ("prediction", "geometry", "stylised_facts")
                      if not gates.get(name, {}).get("passed", False)]
            return cls.off(f"the world model at {d} failed its gates ({', '.join(failed) or 'unknown'}); "
                           f"see `alpha-gym stress check {d}`", manifest, d)
        enabled = [s for s in SCENARIOS if manifest["scenarios"]["enabled"].get(s, False)]
        if not enabled:
            return cls.off(f"every scenario of the world model at {d} is switched off", manifest, d)
        from alpha_gym.stress.scenarios import load_or_build
        panels, _meta = load_or_build(d, verifier.panel, manifest)
        config = verifier.config.with_(archive_seed=False, stress_checkpoint=None)
        # the worlds are verifiers of the caller's own class: the stress package never imports the scoring one
        worlds = {name: type(verifier)(panels[name], config) for name in enabled}
        return cls(worlds, "on", manifest, str(d), ck.identity(d, manifest["model_sha256"]))

    # ------------------------------------------------------------ the channel
    def scenario_scores(self, formula_text: str) -> dict[str, float]:
        """The formula's CPCV score in each enabled world (a world where it fails to evaluate scores -0.8)."""
        out = {}
        for name, world in self.worlds.items():
            ev = world.trade(formula_text)  # the one answer-to-book path; an invalid verdict instead of a raise
            if isinstance(ev, InvalidVerdict):
                log.warning("R3: %r failed in world %s: %r", formula_text, name, ev.exception or ev.reason)
                out[name] = float(world.config.reward_unparseable)
            else:
                out[name] = float(ev.cpcv)
        return out

    def channel(self, formula_text: str, base_cpcv: float) -> tuple[float, str]:
        if not self.on:
            return 0.0, f"off: {self.reason} (contributes 0)"
        scores = self.scenario_scores(formula_text)
        weight = next(iter(self.worlds.values())).config.stress_weight
        value, mean_drop, drops = r3_value(base_cpcv, list(scores.values()), weight)
        detail = ", ".join(f"{n} {s:+.3f}" for n, s in scores.items())
        return value, (f"on: model {self.directory} ({self.identity}), mean drop {mean_drop:.3f} over {len(scores)} worlds "
                       f"(CPCV {detail})")

    def __repr__(self) -> str:
        state = f"on, {self.identity}, worlds {sorted(self.worlds)}" if self.on else f"off: {self.reason}"
        return f"StressProvider({state})"


def attach(verifier, directory=None) -> StressProvider:
    """Set `verifier.stress` from `directory` (default: `verifier.config.stress_checkpoint`); returns the provider."""
    directory = verifier.config.stress_checkpoint if directory is None else directory  # "auto": the registry's
    provider = StressProvider.from_checkpoint(directory, verifier)
    verifier.stress = provider
    return provider


__all__ = ["StressProvider", "StressError", "attach"]
