"""What a run is, without jax: gin files, net, protocol, CLRS-30 facts, lambda rule, provenance."""
