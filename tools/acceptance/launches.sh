#!/usr/bin/env bash
# A clean sanitizer report is not enough, on a GPU. In a copy of the course: record a lesson (its
# evidence keeps the program's output under each pass); give its pass a kernel filter that takes none
# of its kernels (verify fails naming it); empty the recorded output under a pass, its digest kept in
# step, as a pass whose work was skipped would leave it (verify --offline fails); delete it (INCOMPLETE).
#
#   tools/acceptance/launches.sh COPY [LESSON [TOOL]]
#
# COPY: a folder the course is copied into (edited there, never here); LESSON: default
# day14-syncthreads; TOOL: default racecheck. coursectl is the one on PATH.
set -u
. "$(dirname "$0")/common.sh"
copy=${1:?give a folder to copy the course into}
lesson=${2:-day14-syncthreads}
tool=${3:-racecheck}
copy_course "$copy"
evidence=$(ls -d evidence/"$lesson"/*/ | grep -v /build/ | head -1)

echo "# recorded: the program's output under each pass is kept beside its report"
step coursectl record "$lesson"
coursectl render >/dev/null   # the source's Verified line names the new evidence
ls "$evidence"
step head -3 "$evidence/$tool.stdout.txt"
step coursectl verify "$lesson" --offline --strict

echo
echo "# a kernel filter that takes none of the lesson's kernels"
cp lessons.yaml lessons.yaml.orig
python3 - "$lesson" "$tool" <<'PY'
import sys, yaml
lesson, tool = sys.argv[1:]
data = yaml.safe_load(open("lessons.yaml"))
for item in data["lessons"]:
    if isinstance(item, dict) and (item.get("id") == lesson or lesson in item):
        spec = item.setdefault("sanitizers", {}).get(tool) or {}
        spec["args"] = ["--kernel-name", "kns=noSuchKernel"]
        item["sanitizers"][tool] = spec
open("lessons.yaml", "w").write(yaml.safe_dump(data, sort_keys=False, width=1000))
PY
step coursectl verify "$lesson" --strict
mv lessons.yaml.orig lessons.yaml

echo
echo "# the recorded output under $tool emptied, meta.json's digest kept in step"
python3 - "$evidence" "$tool" <<'PY'
import hashlib, json, sys
folder, tool = sys.argv[1:]
name = f"{tool}.stdout.txt"
open(f"{folder}/{name}", "w").close()
meta = json.load(open(f"{folder}/meta.json"))
meta["files"][name] = hashlib.sha256(b"").hexdigest()
json.dump(meta, open(f"{folder}/meta.json", "w"), indent=2)
PY
step coursectl verify "$lesson" --offline --strict

echo
echo "# the recorded output under $tool deleted"
python3 - "$evidence" "$tool" <<'PY'
import json, os, sys
folder, tool = sys.argv[1:]
name = f"{tool}.stdout.txt"
os.remove(f"{folder}/{name}")
meta = json.load(open(f"{folder}/meta.json"))
del meta["files"][name]
json.dump(meta, open(f"{folder}/meta.json", "w"), indent=2)
PY
step coursectl verify "$lesson" --offline --strict
step coursectl record "$lesson"
coursectl render >/dev/null
step coursectl verify "$lesson" --offline --strict
