"""result.json's `device` says which backend a job got (nar_markov/devices.py)."""

import json

import jax

from nar_markov import devices


def test_describe_backend_names_the_backend_jax_uses():
  d = devices.describe_backend()
  assert set(d) == {"backend", "device_kind", "device_count"}
  assert d["backend"] == jax.default_backend()
  assert d["device_count"] == jax.local_device_count() >= 1
  assert d["device_kind"] == jax.local_devices()[0].device_kind
  assert json.loads(json.dumps(d)) == d   # goes into result.json as is
