"""The verifier pool's first address, which the README documented; the pool is `alpha_gym.pool`."""
from alpha_gym.pool import cached_panel, clear, config_key, resolve_config, shared_verifier  # noqa: F401
