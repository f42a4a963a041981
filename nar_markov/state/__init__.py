"""A seed's training state, without jax: its checkpoint, model selection and lambda schedule."""
