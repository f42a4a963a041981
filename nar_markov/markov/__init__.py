"""The Markov rule and its record (no jax)."""
