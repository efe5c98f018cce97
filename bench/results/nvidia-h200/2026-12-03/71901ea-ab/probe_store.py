import os, sys, time, json, tempfile, base64, hashlib
sys.path.insert(0, os.getcwd())
from pathlib import Path
from orchestrator.cuda import sanitizer_cache as sc
from orchestrator.process import CommandResult
from orchestrator import files
out = {}
key = sc.PassKey(binary_sha256="a"*64, tool="memcheck", tool_args=[], program_args=["/x/t.txt"], command=["compute-sanitizer"]*12,
                 sanitizer_version="2025.3.1", driver_version="580", gpu="NVIDIA H200", environment={"PATH": "/usr/bin:/bin"*8}, files={"/x/t.txt": "b"*64})
run = CommandResult(argv=["compute-sanitizer"]*12, returncode=0, signal=None, timed_out=False, stdout=os.urandom(1400), stderr=b"",
                    stdout_truncated=False, stderr_truncated=False, seconds=0.5, notes=[], cpu_seconds=0.3, user_seconds=0.2, max_rss_mib=80.0)
log, xml = os.urandom(300), os.urandom(1200)
def t(name, f, n=300):
    f()
    c = time.thread_time()
    for i in range(n): f()
    out[name] = round((time.thread_time() - c) / n * 1e6, 1)
root = Path(tempfile.mkdtemp())
t("store_pass overwrite", lambda: sc.store_pass(root, "day1", key, run, log, xml, gpu_mib=100.0))
i = [0]
def new():
    i[0] += 1
    sc.store_pass(root, f"d{i[0]}", key, run, log, xml, gpu_mib=100.0)
t("store_pass new lesson dir", new)
fields = {"key": key.model_dump(), "command": list(run.argv), "stdout": base64.b64encode(run.stdout).decode()}
t("key.model_dump", lambda: key.model_dump())
t("key.digest", lambda: key.digest())
t("canonical", lambda: sc._canonical(fields))
t("sha256 4KB", lambda: hashlib.sha256(b"x"*4096).hexdigest())
t("b64 1.4KB", lambda: base64.b64encode(run.stdout).decode())
t("Footprint.of", lambda: sc.Footprint.of(run, 1.0))
t("entry_path", lambda: sc.entry_path(root, "day1", key))
p = root / "x.json"
t("atomic_write", lambda: files.atomic_write(p, b"x"*4000, durable=False))
t("overwrite_entry", lambda: files.overwrite_entry(p, b"x"*4000))
print(json.dumps(out, indent=1))
