"""Builds a test session asks for, run in a process of its own while the first tests run.

    python background_builds.py JOBS.json RESULTS [THREADS]

JOBS.json is a list of [name, manifest, lesson id, arch, variant]; each is
built, in that order, with orchestrator.cuda.build.build_lesson, THREADS at a time
(default: one per core) and at a lower priority than the tests running
meanwhile, into the cache that
$COURSECTL_CACHE names (the session's: a process of its own keeps that fixed
whatever a test sets in the session's process meanwhile). As each build
ends, RESULTS/INDEX.json (INDEX: its place in JOBS.json) is written with the
BuildResult as JSON, or {"error": message}.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.cuda.build import build_lesson  # noqa: E402
from orchestrator.files import atomic_write  # noqa: E402
from orchestrator.manifest.load import load_manifest  # noqa: E402
from orchestrator.cuda.toolchain import nvcc_version  # noqa: E402


def main(jobs_path: str, results: str, threads: str | None = None) -> int:
    os.nice(10)   # the tests running meanwhile come first; these use what the tests leave idle
    jobs = json.loads(Path(jobs_path).read_text())
    nvcc = shutil.which("nvcc")
    version = nvcc_version(nvcc)
    manifests = {path: load_manifest(Path(path)) for path in dict.fromkeys(job[1] for job in jobs)}

    def build(index: int) -> None:
        _, manifest, lesson_id, arch, variant = jobs[index]
        try:
            result = build_lesson(manifests[manifest], manifests[manifest].lesson(lesson_id), arch, nvcc, version,
                                  variant)
            found = result.model_dump_json()
        except Exception as exc:  # noqa: BLE001 - the test that needs it reports it
            found = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        atomic_write(Path(results) / f"{index}.json", found)

    with ThreadPoolExecutor(max_workers=int(threads) if threads else os.cpu_count() or 2) as pool:
        list(pool.map(build, range(len(jobs))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
