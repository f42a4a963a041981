"""What a run is, without jax: its gin files, net, protocol, the CLRS-30 facts, lambda rule and provenance."""
