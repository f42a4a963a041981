"""The results store, without jax: run folders, result.json, params files, locks."""
