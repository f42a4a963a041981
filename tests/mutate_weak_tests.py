"""Each weak test of docs/testing.md's table, run against the change it is written against:
it must fail.  Usage, from the root of a CLEAN checkout (it restores every tracked file with
`git checkout -- .` after each mutation, and refuses a tree with changes):

    python tests/mutate_weak_tests.py [NAME ...]

The Slurm ones (no_afterok, no_resume) need a running Slurm (docs/testing.md)."""
import subprocess, sys, time, pathlib, os
M = {
 "regen_refused": ("tests/test_analysis.py", '  if os.environ.get("CI"):\n    pytest.fail(f"NAR_REGEN_GOLDEN=1',
                   '  if False:\n    pytest.fail(f"NAR_REGEN_GOLDEN=1',
                   "tests/test_analysis.py::test_golden_regeneration_is_refused_under_ci"),
 "ab_variants_mean": ("benchmarks/ab_variants.py", "1e3 * statistics.median(t)", "1e3 * statistics.mean(t)",
                   "tests/test_bench.py::test_ab_variants_reports_the_median_of_each_variants_timed_steps"),
 "profile_rest": ("benchmarks/profile_step.py", "      rest_ms += per_call_ms\n", "      rest_ms += 2 * per_call_ms\n",
                   "tests/test_profile_step.py::test_tiny_profile_of_both_impls"),
 "budget_no_kill": ("benchmarks/gpu_check.py", "      os.killpg(proc.pid, signal.SIGKILL)\n      killed = True\n",
                   "      proc.wait()\n      killed = True\n",
                   "tests/test_gpu_check.py::test_a_row_stopped_by_the_budget_keeps_what_it_measured"),
 "no_afterok": ("launch/submit.py", '"dependency": f"afterok:{dependency}", ', "",
                   "tests/test_slurm.py::test_gforget_sweep_calibrates_first_and_each_task_waits_for_its_algorithm"),
 "no_resume": ("nar_markov/state/checkpoint.py", "  if not path.exists():\n    return None\n  try:\n    return state_files.read_state(path)",
                   "  if True:\n    return None\n  try:\n    return state_files.read_state(path)",
                   "tests/test_slurm.py::test_requeued_and_preempted_jobs_resume_from_their_checkpoints"),
}
if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                  capture_output=True, text=True, check=True).stdout.strip():
  sys.exit("the checkout has changes: run this in a clean one (it restores tracked files)")
names = sys.argv[1:] or list(M)
for name in names:
  path, old, new, test = M[name]
  subprocess.run(["git", "checkout", "--", "."], check=True)
  p = pathlib.Path(path); s = p.read_text()
  assert s.count(old) == 1, (name, s.count(old))
  p.write_text(s.replace(old, new))
  t = time.time()
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", test],
                     capture_output=True, text=True, env=dict(os.environ, NAR_REQUIRE_SLURM="1"))
  tail = [l for l in r.stdout.splitlines() if l.startswith("E ")][:3]
  print(f"{name}: {path} mutated -> {test}: exit {r.returncode} ({'FAILED as it must' if r.returncode == 1 else 'NOT failed'}) "
        f"in {time.time()-t:.0f} s; {r.stdout.splitlines()[-1] if r.stdout else ''}; first E lines: {tail}", flush=True)
  subprocess.run(["git", "checkout", "--", "."], check=True)
