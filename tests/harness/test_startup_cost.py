"""What `trainbench run` costs beyond its runs (issue 29, the smoke tier's wall time). The preload of the fork
server and the driver's planning import no module only one workload's evaluation needs (sklearn.metrics was
~1 s of CPU in each). Once torch is in, the process skips the interpreter's teardown (0.2-0.6 s on a 2-core
machine, and the fork server's as long again while it holds the caller's pipe), but still runs the exit
handlers, says everything it had to say, and keeps its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from support.backend_util import ROOT, env, trainbench

PROBE = textwrap.dedent("""
    import atexit, sys
    {imports}
    from suite.cli import main

    class Teardown:
        def __del__(self, write=sys.stderr.write):  # bound now: late in the teardown the module's `sys` is None
            write("teardown ran\\n")

    keep = Teardown()  # freed only by the interpreter's teardown of this module
    atexit.register(lambda: sys.stderr.write("exit handler ran\\n"))
    sys.argv = ["trainbench", *{args!r}]
    main()
""")


def probe(args: list[str], imports: str = "import torch") -> subprocess.CompletedProcess[str]:
    code = PROBE.format(imports=imports, args=args)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)


def test_with_torch_loaded_the_exit_skips_teardown_but_runs_handlers_and_keeps_the_code():
    ok = probe(["list"])
    assert ok.returncode == 0 and "cv/digits_cnn" in ok.stdout, ok.stderr
    assert "exit handler ran" in ok.stderr and "teardown ran" not in ok.stderr
    bad = probe(["run", "nosuch/workload"])
    assert bad.returncode == 2 and "exit handler ran" in bad.stderr and "teardown ran" not in bad.stderr


def test_without_torch_the_exit_is_the_ordinary_one():
    plain = probe(["--help"], imports="")
    assert plain.returncode == 0 and "teardown ran" in plain.stderr and "exit handler ran" in plain.stderr


def test_a_real_run_through_the_entry_point_prints_all_it_has_to_say(tmp_path):
    done = trainbench("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(tmp_path), "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout[done.stdout.index("["):])
    assert [r["status"] for r in rows] == ["budget"] and len(list(tmp_path.rglob("*.json"))) == 1


def test_the_preload_and_the_smoke_plan_import_no_evaluation_only_library():
    code = textwrap.dedent("""
        import importlib, sys
        from suite.execution import forkserver, plan as planner
        from suite.cli.run import _plan
        for name in forkserver.warm_modules("torch"):
            importlib.import_module(name)
        _plan(planner, None, "smoke", "torch", [], None, None, None, 1)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("sklearn", "scipy")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout[-500:], done.stderr[-2000:])


def test_a_thread_still_running_gets_the_ordinary_exit_that_waits_for_it():
    # the thread lives as long as the main thread does (a sleep of fixed length could end before `list` does on a
    # fast machine, or after it on a slow one): it is running whenever the entry point decides how to exit
    waits = probe(["list"], imports="import torch, threading, time\n"
                  "def wait_for_main():\n"
                  "    while threading.main_thread().is_alive():\n"
                  "        time.sleep(0.01)\n"
                  "    sys.stderr.write('thread done\\n')\n"
                  "threading.Thread(target=wait_for_main).start()")
    assert waits.returncode == 0 and "thread done" in waits.stderr and "teardown ran" in waits.stderr
