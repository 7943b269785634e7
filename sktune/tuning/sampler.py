"""sktune's sampler (the search benchmark replays the same one)."""

from __future__ import annotations

import warnings

import optuna


def make_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    # Multivariate TPE: block and cut decisions interact (a cut matters only between fused blocks).
    with warnings.catch_warnings():  # ``group`` is experimental; its warning would tear the progress bar
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True, group=True)
