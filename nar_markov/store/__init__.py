"""The results store, without jax: run folders, result.json, state files, params files, locks."""
