"""Importing this module installs alpha-gym's invalid-answer guard on verl's GDPO estimator.

For `VERL_USE_EXTERNAL_MODULES=alpha_gym.integrations.verl_guard`: verl imports the modules
named there in every process that imports verl, Ray actors included.
"""

from alpha_gym.integrations.verl import install_guard

install_guard()
