"""Scoring: CPCV, reward channels, the verifier and its configuration."""
