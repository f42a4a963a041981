"""Which JAX backend and devices a process got, for result.json and job logs."""

from __future__ import annotations

from typing import Any, Dict

import jax


def describe_backend() -> Dict[str, Any]:
  """{"backend": "cpu"|"gpu"|"tpu", "device_kind": ..., "device_count": ...}.

  A GPU job that silently fell back to the CPU (a CPU-only jaxlib, no visible
  GPU) reads "cpu" here; `device_kind` is the first local device's, e.g.
  "NVIDIA H100 80GB HBM3" or "cpu".
  """
  devices = jax.local_devices()
  return {"backend": jax.default_backend(),
          "device_kind": devices[0].device_kind if devices else None,
          "device_count": len(devices)}


if __name__ == "__main__":
  print(describe_backend())
