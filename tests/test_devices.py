"""result.json's `device` says which backend a job got (nar_markov/devices.py)."""

import json

import jax

from nar_markov import devices


def test_describe_backend_names_the_backend_jax_uses():
  d = devices.describe_backend()
  assert set(d) == {"backend", "device_kind", "device_count", "host_cpu"}
  assert d["backend"] == jax.default_backend()
  assert d["device_count"] == jax.local_device_count() >= 1
  assert d["device_kind"] == jax.local_devices()[0].device_kind
  assert json.loads(json.dumps(d)) == d   # goes into result.json as is


CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16

processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16
"""


def test_describe_host_cpu_names_the_model_and_the_simd_extensions():
  d = devices.describe_host_cpu(CPUINFO)
  assert d == {"model": "AMD EPYC 9654 96-Core Processor",
               "simd": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16"]}
  older = devices.describe_host_cpu(CPUINFO.replace(" avx512f avx512_bf16", ""))
  assert older["simd"] == ["sse4_2", "avx", "avx2", "fma"]
  here = devices.describe_host_cpu()
  assert set(here) == {"model", "simd"} and json.loads(json.dumps(here)) == here
