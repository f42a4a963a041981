"""result.json's `device` says which backend a job got (nar_markov/training/devices.py)."""

import json
import os
import subprocess
import sys

import jax
import pytest

from nar_markov.training import devices


def test_describe_backend_names_the_backend_jax_uses():
  d = devices.describe_backend()
  assert set(d) == {"backend", "device_kind", "device_count", "host_cpu", "xla_cpu_threads"}
  assert d["backend"] == jax.default_backend()
  assert d["device_count"] == jax.local_device_count() >= 1
  assert d["device_kind"] == jax.local_devices()[0].device_kind
  assert d["xla_cpu_threads"] == devices.xla_cpu_threads()
  assert json.loads(json.dumps(d)) == d   # goes into result.json as is


def test_xla_cpu_threads_reads_what_xla_reads(monkeypatch):
  monkeypatch.setenv("PJRT_NPROC", "3")
  monkeypatch.setenv("NPROC", "5")
  assert devices.xla_cpu_threads() == 3
  monkeypatch.setenv("PJRT_NPROC", "three")   # no number: XLA goes on to NPROC
  assert devices.xla_cpu_threads() == 5
  monkeypatch.delenv("PJRT_NPROC")
  monkeypatch.delenv("NPROC")
  assert devices.xla_cpu_threads() == len(os.sched_getaffinity(0))


def _threads_in_a_fresh_process(env_extra, code):
  env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC")}
  env.update(env_extra)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, check=True, timeout=300)
  return out.stdout.split()


def test_importing_the_package_sets_no_environment_variable():
  code = ("import os; before = dict(os.environ); import nar_markov, nar_markov.config.runspec, "
          "nar_markov.store.runs; print(sorted(set(os.environ.items()) ^ set(before.items())))")
  assert _threads_in_a_fresh_process({}, code) == ["[]"]


@pytest.mark.parametrize("env_extra, want", [
    ({}, ["2", "2"]),                    # not chosen: the committed runs' 2
    ({"NPROC": "5"}, ["None", "5"]),     # chosen: kept
    ({"PJRT_NPROC": "1"}, ["1", "1"]),
])
def test_the_training_entry_points_pin_xla_cpu_threads_unless_the_process_chose(env_extra,
                                                                                 want):
  code = ("import os; from nar_markov.training import threads; threads.pin_xla_threads(); "
          "from nar_markov.training import devices; "
          "print(os.environ.get('PJRT_NPROC'), devices.xla_cpu_threads())")
  assert _threads_in_a_fresh_process(env_extra, code) == want


def test_the_pin_does_not_reach_a_pool_jax_already_made():
  code = ("import os, jax; jax.numpy.zeros(1).block_until_ready(); "
          "from nar_markov.training import threads; print(threads.pin_xla_threads(), "
          "os.environ.get('PJRT_NPROC'))")
  assert _threads_in_a_fresh_process({}, code) == ["False", "None"]


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
