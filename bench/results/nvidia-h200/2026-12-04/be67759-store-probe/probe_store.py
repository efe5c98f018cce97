"""store_pass on this machine alone: 933 new entries in 400 new lesson folders, then the same written over."""
import sys, time, os, json, base64, glob, shutil
sys.path.insert(0, os.getcwd())
from pathlib import Path
from orchestrator.cuda import sanitizer_cache as sc
from orchestrator.process import CommandResult
bd = sys.argv[1]
f = sorted(glob.glob(bd + "/cache/sanitizer_passes/*/memcheck*.json"))[0]
d = json.load(open(f)); log = base64.b64decode(d["log"])
res = CommandResult(argv=d["command"], returncode=0, signal=None, timed_out=False, stdout=base64.b64decode(d["stdout"]), stderr=b"",
                    stdout_truncated=False, stderr_truncated=False, seconds=0.3, notes=[], cpu_seconds=0.04, user_seconds=0.03, max_rss_mib=20.0)
key = sc.PassKey.model_validate(d["key"])
root = Path("/tmp/probe-store"); shutil.rmtree(root, ignore_errors=True)
out = {}
for label in ("new", "over"):
    t = time.thread_time(); w = time.perf_counter()
    for i in range(933):
        sc.store_pass(root, f"day{i % 400:04d}-standin", key.model_copy(update={"tool_args": [str(i)]}), res, log, None, gpu_mib=300.0)
    out[label] = {"cpu_us_each": round((time.thread_time() - t) / 933 * 1e6, 1), "wall_us_each": round((time.perf_counter() - w) / 933 * 1e6, 1)}
print(json.dumps(out))
