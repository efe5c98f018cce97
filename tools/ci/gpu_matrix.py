#!/usr/bin/env python3
"""The GPU workflows' matrix, from the GPU models checked in at .github/gpu-models.json.

    python3 tools/ci/gpu_matrix.py --for verify            # gpu.yml: the models with "verify": true
    python3 tools/ci/gpu_matrix.py --for record --only h200,t4   # record.yml: the models asked for (none: all)

Prints one line of JSON, {"include": [...]}, an entry per model and shard:
{"model": "h200", "label": "h200", "gpu": "nvidia-h200", "shard": "1/2", "name": "h200-1-of-2"}, which the
workflow's plan job hands its matrix job (`matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}`). Each model
names its runner label, the slug coursectl gives its GPU (its evidence folder, evidence/<lesson>/<gpu>/), how
many shards its lessons are split into (`coursectl verify --shard K/N`, N of its own) and whether gpu.yml
verifies on it. A file that is not such is one message naming it, the model and the key, and exit 2.
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

MODELS_FILE = Path(".github/gpu-models.json")
MAX_SHARDS = 64
MODEL = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")        # in artifact names and concurrency groups
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
GPU = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")           # toolchain.gpu_slug's form: 'NVIDIA H200' -> nvidia-h200
KEYS = {"label", "gpu", "shards", "verify"}


class Refused(Exception):
    """Bad input: the message says what and where; exit 2."""


def read_models(path: Path) -> dict[str, dict]:
    """The models of `path`, each checked: {"h200": {"label": "h200", "gpu": "nvidia-h200", "shards": 2,
    "verify": true}, ...}."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Refused(f"{path}: no such file")
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: cannot be read: {exc}")
    try:
        models = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refused(f"{path}:{exc.lineno}: not JSON: {exc.msg}")
    if not isinstance(models, dict) or not models:
        raise Refused(f"{path}: must be an object of GPU models, such as "
                      '{"h200": {"label": "h200", "gpu": "nvidia-h200", "shards": 2, "verify": true}}')
    for name, model in models.items():
        where = f"{path}: model {name!r}"
        if not MODEL.fullmatch(name):
            raise Refused(f"{where}: a model's name is lower-case letters, digits and '-', at most 40")
        if not isinstance(model, dict):
            raise Refused(f"{where}: must be an object with {', '.join(sorted(KEYS))}")
        if unknown := sorted(set(model) - KEYS):
            raise Refused(f"{where}: unknown key {unknown[0]!r} (the keys are {', '.join(sorted(KEYS))})")
        if missing := sorted(KEYS - set(model)):
            raise Refused(f"{where}: {missing[0]}: missing")
        if not isinstance(model["label"], str) or not LABEL.fullmatch(model["label"]):
            raise Refused(f"{where}: label: a runner label (letters, digits, '_', '.', '-'), not "
                          f"{json.dumps(model['label'])}")
        if not isinstance(model["gpu"], str) or not GPU.fullmatch(model["gpu"]):
            raise Refused(f"{where}: gpu: the GPU's slug as coursectl doctor names it (nvidia-h200), not "
                          f"{json.dumps(model['gpu'])}")
        shards = model["shards"]
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
            raise Refused(f"{where}: shards: a whole number from 1 to {MAX_SHARDS}, not {json.dumps(shards)}")
        if not isinstance(model["verify"], bool):
            raise Refused(f"{where}: verify: true or false, not {json.dumps(model['verify'])}")
    gpus = [m["gpu"] for m in models.values()]
    if twice := sorted({g for g in gpus if gpus.count(g) > 1}):
        raise Refused(f"{path}: gpu {twice[0]!r} is given to two models; evidence is kept per GPU model")
    return models


def matrix(models: dict[str, dict], purpose: str, only: list[str], path: Path = MODELS_FILE) -> dict:
    """The matrix's include list: for verify the models with verify true, for record every model; `only` (model
    names) narrows either. An empty list is refused: GitHub fails a matrix with nothing in it, saying less."""
    if unknown := [name for name in only if name not in models]:
        raise Refused(f"--only: no model {unknown[0]!r} in {path} (its models: {', '.join(models)})")
    chosen = [name for name in models if (not only or name in only) and (purpose == "record" or
                                                                          models[name]["verify"])]
    if not chosen:
        raise Refused(f"no GPU model to {purpose} on: " + (f"none of {', '.join(only)} has \"verify\": true in {path}"
                                                            if only else f"no model in {path} has \"verify\": true"))
    include = []
    for name in chosen:
        n = models[name]["shards"]
        include += [{"model": name, "label": models[name]["label"], "gpu": models[name]["gpu"], "shard": f"{k}/{n}",
                     "name": f"{name}-{k}-of-{n}"} for k in range(1, n + 1)]
    return {"include": include}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--for", dest="purpose", choices=["verify", "record"], required=True)
    parser.add_argument("--only", default="", help="models, comma-separated (default: every one)")
    parser.add_argument("--models", type=Path, default=MODELS_FILE, help=f"default: {MODELS_FILE}")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    try:
        print(json.dumps(matrix(read_models(args.models), args.purpose, only, args.models), separators=(",", ":")))
    except Refused as exc:
        print(f"gpu_matrix.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
